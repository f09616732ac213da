package main_test

import (
	"fmt"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/flightdeck-ai/flightdeck/topics"
)

// Process tests of the stream engine: the ways reading and claiming used to stall under
// backlog, restarts and mixed task lengths.

// readAsDead enqueues tk and delivers it to a consumer name no process uses (a consumer that
// died holding it).
func (e *e2e) readAsDead(tk topics.Task, dead string) {
	e.t.Helper()
	e.enqueue(tk)
	stream := e.ks.Tasks(tk.Stage)
	_ = e.rdb.XGroupCreateMkStream(e.ctx, stream, topics.ConsumerGroup, "0").Err()
	res, err := e.rdb.XReadGroup(e.ctx, &redis.XReadGroupArgs{Group: topics.ConsumerGroup, Consumer: dead,
		Streams: []string{stream, ">"}, Count: 1, Block: -1}).Result()
	if err != nil || len(res) == 0 || len(res[0].Messages) != 1 {
		e.t.Fatalf("deliver to %s: %v %v", dead, res, err)
	}
}

// answeredAt waits for task id's first event and returns when it was written.
func (e *e2e) answeredAt(id string, timeout time.Duration) time.Time {
	e.t.Helper()
	got := e.collect([]string{"interview-evaluation"}, map[string]bool{id: true}, timeout)
	if len(got[id]) == 0 {
		e.t.Fatalf("task %s got no event within %v", id, timeout)
	}
	return got[id][0].FinishedAt
}

// TestNewConsumerReadsAtOnce: a consumer that starts while more than a hundred entries are
// pending under a busy live consumer reads and runs a new task at once.
func TestNewConsumerReadsAtOnce(t *testing.T) {
	e := newE2E(t)
	e.stages = "interview-evaluation"
	cfg := e.stageConfig(`stages:
  interview-evaluation:
    heartbeatInterval: 250ms
    lease: 1500ms
`)
	e.startConfig("busy", cfg, "--concurrency", "55")
	for i := range 165 {
		e.enqueue(task(fmt.Sprint("long-", i), "interview-evaluation", 1000+i, 30000))
	}
	time.Sleep(2 * time.Second) // the busy consumer's entries idle meanwhile
	e.startConfig("new", cfg, "--concurrency", "120")
	e.enqueue(task("quick", "interview-evaluation", 1, 0))
	// At once: before any of the 30 s tasks ahead of it has finished.
	e.answeredAt("quick", 25*time.Second)
	e.noneAnswered("long-", 165)
}

// noneAnswered fails the test when a task named prefix0..prefix<n-1> already has an event.
func (e *e2e) noneAnswered(prefix string, n int) {
	e.t.Helper()
	want := map[string]bool{}
	for i := range n {
		want[fmt.Sprint(prefix, i)] = true
	}
	done := 0
	for id := range e.collect([]string{"interview-evaluation"}, want, 100*time.Millisecond) {
		if want[id] {
			done++
		}
	}
	if done > 0 {
		e.t.Fatalf("%d of the long tasks finished first: the task was not run at once", done)
	}
}

// TestDeadEntryFoundBehindLiveOnes: a dead consumer's entry is claimed within the lease and a
// second or two, although 200 older entries are held by a live owner.
func TestDeadEntryFoundBehindLiveOnes(t *testing.T) {
	e := newE2E(t)
	e.stages = "interview-evaluation"
	cfg := e.stageConfig(`stages:
  interview-evaluation:
    heartbeatInterval: 2s
    lease: 5s
`)
	e.startConfig("live", cfg, "--concurrency", "200")
	for i := range 200 {
		e.enqueue(task(fmt.Sprint("held-", i), "interview-evaluation", 2000+i, 40000))
	}
	deadline := time.Now().Add(20 * time.Second)
	for {
		p, _ := e.rdb.XPending(e.ctx, e.ks.Tasks("interview-evaluation"), topics.ConsumerGroup).Result()
		if p != nil && p.Consumers["live"] == 200 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the live consumer holds %v", p)
		}
		time.Sleep(100 * time.Millisecond)
	}
	e.readAsDead(task("orphan", "interview-evaluation", 1, 0), "dead-host")
	e.startConfig("rescuer", cfg, "--concurrency", "2")
	// Within the lease and a claim pass or two: long before any of the 40 s held tasks ends.
	e.answeredAt("orphan", 35*time.Second)
	e.noneAnswered("held-", 200)
}

// TestDeadEntryClaimedWhenASlotFrees: a dead consumer's entry is found while the only handler
// is busy and runs the moment it is free, before the backlog queued behind it.
func TestDeadEntryClaimedWhenASlotFrees(t *testing.T) {
	e := newE2E(t)
	e.stages = "interview-evaluation"
	cfg := e.stageConfig(`stages:
  interview-evaluation:
    heartbeatInterval: 250ms
    lease: 1500ms
`)
	e.startConfig("one", cfg, "--concurrency", "1")
	e.enqueue(task("first", "interview-evaluation", 1, 4000))
	e.waitOwned([]string{keyOf(t, task("first", "interview-evaluation", 1, 4000))}, "one", 10*time.Second)
	e.readAsDead(task("orphan", "interview-evaluation", 2, 0), "dead-host")
	backlog := map[string]bool{}
	for i := range 10 {
		id := fmt.Sprint("later-", i)
		backlog[id] = true
		e.enqueue(task(id, "interview-evaluation", 100+i, 500))
	}
	orphanAt := e.answeredAt("orphan", 15*time.Second)
	got := e.collect([]string{"interview-evaluation"}, backlog, 30*time.Second)
	for id := range backlog {
		if evs := got[id]; len(evs) > 0 && evs[0].FinishedAt.Before(orphanAt) {
			t.Errorf("%s was answered before the orphan", id)
		}
	}
}

// TestRestartUnderSameName: a consumer restarted under its own name (a container restart
// keeps hostname and pid 1) picks up the entries its previous life held.
func TestRestartUnderSameName(t *testing.T) {
	e := newE2E(t)
	e.stages = "interview-evaluation"
	cfg := e.stageConfig(`stages:
  interview-evaluation:
    heartbeatInterval: 250ms
    lease: 1500ms
`)
	a := e.startConfig("same", cfg, "--concurrency", "1")
	tk := task("kept", "interview-evaluation", 1, 2000)
	e.enqueue(tk)
	e.waitOwned([]string{keyOf(t, tk)}, "same", 10*time.Second)
	_ = a.cmd.Process.Signal(syscall.SIGKILL)
	<-a.done
	e.startConfig("same", cfg, "--concurrency", "1")
	e.answeredAt("kept", 20*time.Second)
}

// TestNoHeadOfLineBlocking: with two consumers of four handlers each, four long tasks and then
// eight quick ones: the quick ones run on the four free handlers at once, none waits behind a
// long one.
func TestNoHeadOfLineBlocking(t *testing.T) {
	e := newE2E(t)
	e.stages = "interview-evaluation"
	cfg := e.stageConfig(`stages:
  interview-evaluation:
    heartbeatInterval: 250ms
    lease: 1500ms
    concurrency: 4
`)
	e.startConfig("c1", cfg)
	e.startConfig("c2", cfg)
	for i := range 4 {
		e.enqueue(task(fmt.Sprint("long-", i), "interview-evaluation", 100+i, 12000))
	}
	time.Sleep(500 * time.Millisecond)
	start := time.Now()
	quick := map[string]bool{}
	for i := range 8 {
		id := fmt.Sprint("quick-", i)
		quick[id] = true
		e.enqueue(task(id, "interview-evaluation", i, 100))
	}
	got := e.collect([]string{"interview-evaluation"}, quick, 20*time.Second)
	for id := range quick {
		if len(got[id]) == 0 {
			t.Errorf("%s got no event", id)
			continue
		}
		if wait := got[id][0].FinishedAt.Sub(start); wait > 3*time.Second {
			t.Errorf("%s answered after %v, behind a long task", id, wait)
		}
	}
}
