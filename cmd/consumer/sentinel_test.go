package main_test

import (
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/flightdeck-ai/flightdeck/internal/testkit/redistest"
	"github.com/flightdeck-ai/flightdeck/topics"
)

// TestSentinelFailover: two stock consumers given go-redis's failover URL (three sentinels, a
// master and a replica, all real processes) name the master they follow in their start line,
// keep running when the master is SIGKILLed while owners run, follow the promotion without a
// restart, and answer every task, those enqueued before the kill and after it, while the old
// master comes back as a replica. Nothing is left pending.
func TestSentinelFailover(t *testing.T) {
	s := redistest.StartSentinel(t)
	rdb := s.Client()
	e := newE2EOn(t, rdb, s.URL(), redistest.Prefix())
	e.stages = "interview-evaluation"
	cfg := e.stageConfig(`stages:
  interview-evaluation:
    heartbeatInterval: 250ms
    lease: 1500ms
    parkCheck: 1s
`)
	procs := []*proc{e.startConfig("s1", cfg), e.startConfig("s2", cfg)}
	for _, p := range procs {
		b, err := os.ReadFile(p.logPath)
		if err != nil {
			t.Fatal(err)
		}
		if want := `"sentinelMaster":"` + redistest.MasterName + `","masterAddr":"` + s.Master.Addr() + `"`; !strings.Contains(string(b), want) {
			t.Errorf("%s's start line does not name the master it follows (%s):\n%s", p.name, want, b)
		}
	}
	replicate := func() {
		t.Helper()
		// Replication is asynchronous: the tasks must be on the replica before the kill, or
		// the kill loses them with the master.
		if n, err := rdb.Do(e.ctx, "WAIT", 1, 2000).Int(); err != nil || n < 1 {
			t.Fatalf("WAIT: %d replicas, %v", n, err)
		}
	}
	// Tasks whose owners run for 400 ms, so that the kill finds several running.
	for i := range 40 {
		e.enqueue(task(fmt.Sprint("before", i), "interview-evaluation", i, 400))
	}
	replicate()
	time.Sleep(300 * time.Millisecond)
	old := s.Master.Addr()
	s.Master.Stop()
	promoted := s.WaitPromoted(old, 30*time.Second)
	t.Logf("promoted %s", promoted)
	for i := range 40 {
		e.enqueue(task(fmt.Sprint("after", i), "interview-evaluation", 100+i, 50))
	}
	s.Rejoin(s.Master) // it comes back empty, as a replica of the new master
	want := ids("before", 40)
	for id := range ids("after", 40) {
		want[id] = true
	}
	got := e.collect([]string{"interview-evaluation"}, want, 60*time.Second)
	for id := range want {
		if len(got[id]) == 0 {
			t.Errorf("task %s got no terminal event", id)
		} else if ev := got[id][0]; ev.Status != topics.StatusSucceeded {
			t.Errorf("task %s: %s %s", id, ev.Status, ev.Error)
		}
	}
	e.expectDrained(30 * time.Second)
	s.WaitReplica(s.Master, 30*time.Second)
	for _, p := range procs {
		select {
		case <-p.done:
			t.Errorf("consumer %s exited", p.name)
		default:
		}
	}
}

// TestReplicatedClaimsOnSentinel: with durability replicated the master is SIGKILLed while
// owners run three duplicates each of 30 keys, the replica is promoted and the old master
// comes back as its replica: every task is answered, and every key ran its model exactly
// once across both consumers (no claim or outcome was lost with the master, so no second
// owner ran a key whose first owner lived). The start line says the claims are replicated.
func TestReplicatedClaimsOnSentinel(t *testing.T) {
	s := redistest.StartSentinel(t)
	rdb := s.Client()
	e := newE2EOn(t, rdb, s.URL(), redistest.Prefix())
	e.stages = "interview-evaluation"
	cfg := e.stageConfig(`stages:
  interview-evaluation:
    heartbeatInterval: 1s
    lease: 15s
    parkCheck: 1s
    durability: replicated
    replicationTimeout: 500ms
`)
	procs := []*proc{e.startConfig("r1", cfg), e.startConfig("r2", cfg)}
	for _, p := range procs {
		if b, _ := os.ReadFile(p.logPath); !strings.Contains(string(b), `"replicas":1,`) || !strings.Contains(string(b), `"message":"replicated claims`) {
			t.Errorf("%s's log does not say its claims wait for the replica:\n%s", p.name, b)
		}
	}
	want := map[string]bool{}
	for i := range 90 {
		id := fmt.Sprint("before", i)
		want[id] = true
		e.enqueue(task(id, "interview-evaluation", i%30, 1500))
	}
	if n, err := rdb.Do(e.ctx, "WAIT", 1, 2000).Int(); err != nil || n < 1 {
		t.Fatalf("WAIT: %d replicas, %v", n, err)
	}
	time.Sleep(500 * time.Millisecond) // owners run
	old := s.Master.Addr()
	s.Master.Stop()
	s.WaitPromoted(old, 30*time.Second)
	s.Rejoin(s.Master) // back empty, as a replica of the new master
	for i := range 20 {
		id := fmt.Sprint("after", i)
		want[id] = true
		e.enqueue(task(id, "interview-evaluation", 100+i, 50))
	}
	got := e.collect([]string{"interview-evaluation"}, want, 90*time.Second)
	for id := range want {
		if len(got[id]) == 0 {
			t.Errorf("task %s got no terminal event", id)
		} else if ev := got[id][0]; ev.Status != topics.StatusSucceeded {
			t.Errorf("task %s: %s %s", id, ev.Status, ev.Error)
		}
	}
	e.expectDrained(30 * time.Second)
	calls := 0
	for _, p := range procs {
		calls += p.modelCalls(t)
	}
	if calls != 50 {
		t.Errorf("%d model calls for 50 keys, want one each", calls)
	}
}
