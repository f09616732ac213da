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
	s.Master.Restart() // it comes back empty; the sentinels make it a replica of the new master
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
