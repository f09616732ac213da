package handlers_test

import (
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/flightdeck-ai/flightdeck/handlers"
	"github.com/flightdeck-ai/flightdeck/handlers/model"
	"github.com/flightdeck-ai/flightdeck/topics"
)

// withStage sets the evaluation stage's concurrency and joinWait and a metrics registry.
func withStage(reg *prometheus.Registry, concurrency int, joinWait time.Duration) func(*handlers.Config) {
	return func(cfg *handlers.Config) {
		cfg.Registry = reg
		for i, s := range cfg.Stages {
			if s.Name == "interview-evaluation" {
				cfg.Stages[i].Concurrency, cfg.Stages[i].JoinWait = concurrency, joinWait
			}
		}
	}
}

// outcomes returns the consumer's task event counters of stage, by outcome, once they count
// want events (or after 5 s: a handler counts after its call returns).
func outcomes(t *testing.T, reg *prometheus.Registry, stage string, want float64) map[string]float64 {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		out := countOutcomes(t, reg, stage)
		var n float64
		for oc, v := range out {
			if oc != "parked" {
				n += v
			}
		}
		if n >= want || time.Now().After(deadline) {
			return out
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func countOutcomes(t *testing.T, reg *prometheus.Registry, stage string) map[string]float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]float64{}
	for _, mf := range mfs {
		if mf.GetName() != "flightdeck_task_events_total" {
			continue
		}
		for _, m := range mf.GetMetric() {
			var st, oc string
			for _, l := range m.GetLabel() {
				switch l.GetName() {
				case "stage":
					st = l.GetValue()
				case "outcome":
					oc = l.GetValue()
				}
			}
			if st == stage {
				out[oc] += m.GetCounter().GetValue()
			}
		}
	}
	return out
}

// dupTasks enqueues n tasks of one key (model latency ms) and returns their ids.
func dupTasks(b *bundle, prefix string, key, n, latencyMs int) []string {
	ids := make([]string, n)
	for i := range ids {
		ids[i] = fmt.Sprintf("%s-%d", prefix, i)
		b.enqueue(topics.Task{TaskID: ids[i], Stage: "interview-evaluation", Input: simInput(key, latencyMs)})
	}
	return ids
}

// onceEach waits for the events of ids and checks that each got one, with status; it returns
// how many events had each shared label.
func onceEach(t *testing.T, b *bundle, ids []string, status topics.Status) map[topics.Shared]int {
	t.Helper()
	got := b.eventsFor([]string{"interview-evaluation"}, ids, 15*time.Second)
	shared := map[topics.Shared]int{}
	for _, id := range ids {
		if len(got[id]) != 1 || got[id][0].Status != status {
			t.Fatalf("%s: events %+v, want one %s", id, got[id], status)
		}
		shared[got[id][0].Shared]++
	}
	return shared
}

// gaugeValue returns the value of the gauge name for stage in reg (0 when absent).
func gaugeValue(t *testing.T, reg *prometheus.Registry, name, stage string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "stage" && l.GetValue() == stage {
					return m.GetGauge().GetValue()
				}
			}
		}
	}
	return 0
}

// gatedJoinConsumer starts consumer c1 with the evaluation stage at concurrency handlers, a
// joinWait and lease of a minute, and a model whose first call waits for release. A failed
// check releases it too, so that the consumer's shutdown does not wait for the call.
func gatedJoinConsumer(t *testing.T, b *bundle, reg *prometheus.Registry, concurrency int) (*gateModel, func()) {
	t.Helper()
	gm := newGateModel()
	b.consumer("c1", func(c *handlers.Config) {
		withStage(reg, concurrency, time.Minute)(c)
		for i := range c.Stages {
			c.Stages[i].Lease = time.Minute // joinWait is at most the lease
		}
		c.Models = map[string]model.Model{"sim": gm}
	})
	release := sync.OnceFunc(func() { close(gm.release) })
	t.Cleanup(release)
	return gm, release
}

// TestJoinedTasksRideTheOwnersComplete: duplicates read by the consumer that runs their key's
// owner wait for it in the consumer and are answered by its complete: one model call, every
// task one event, and none of them parked on the flight (no call to Redis of their own). The
// owner's call is held until the seven have joined (flightdeck_joined_waiting).
func TestJoinedTasksRideTheOwnersComplete(t *testing.T) {
	b := setup(t)
	reg := prometheus.NewRegistry()
	gm, release := gatedJoinConsumer(t, b, reg, 8)
	ev := "interview-evaluation"
	ids := dupTasks(b, "j", 1, 8, 0)
	wait(t, gm.started, "the owner's model call")
	until(t, "seven tasks joined the owner", func() bool { return gaugeValue(t, reg, "flightdeck_joined_waiting", ev) == 7 })
	release()
	shared := onceEach(t, b, ids, topics.StatusSucceeded)
	if gm.runs.Load() != 1 || shared[topics.SharedOwner] != 1 || shared[topics.SharedFollower] != 7 {
		t.Errorf("model runs %d, shared %v; want 1 run, 1 owner, 7 followers", gm.runs.Load(), shared)
	}
	oc := outcomes(t, reg, ev, 8)
	if oc["parked"] != 0 || oc["follower_SUCCEEDED"] != 7 || oc["owner_SUCCEEDED"] != 1 {
		t.Errorf("outcomes %v; want 7 followers answered by the owner, none parked", oc)
	}
	if g := gaugeValue(t, reg, "flightdeck_joined_waiting", ev); g != 0 {
		t.Errorf("flightdeck_joined_waiting %v after the owner answered them, want 0", g)
	}
	until(t, "no entry pending", func() bool {
		return b.r.Client.XPending(b.ctx, b.ks.Tasks(ev), topics.ConsumerGroup).Val().Count == 0
	})
}

// TestJoinedTasksHoldNoHandler: tasks waiting for their key's owner in the consumer hold no
// handler (stream.Waiting): with 2 handlers, five duplicates join the running owner, and a
// task of another key behind them is read and answered while the owner's call is still held;
// the owner's complete then answers the five, none parked.
func TestJoinedTasksHoldNoHandler(t *testing.T) {
	b := setup(t)
	reg := prometheus.NewRegistry()
	gm, release := gatedJoinConsumer(t, b, reg, 2)
	ev := "interview-evaluation"
	ids := dupTasks(b, "dup", 1, 6, 0)
	wait(t, gm.started, "the owner's model call")
	until(t, "five tasks joined the owner", func() bool { return gaugeValue(t, reg, "flightdeck_joined_waiting", ev) == 5 })
	b.enqueue(topics.Task{TaskID: "other", Stage: ev, Input: simInput(2, 0)})
	if e := b.eventsFor([]string{ev}, []string{"other"}, 10*time.Second)["other"]; len(e) != 1 {
		t.Fatalf("the other key's task: %+v; the joined tasks held the handlers", e)
	}
	release()
	shared := onceEach(t, b, ids, topics.StatusSucceeded)
	if gm.runs.Load() != 2 || shared[topics.SharedOwner] != 1 || shared[topics.SharedFollower] != 5 {
		t.Errorf("model runs %d, shared %v; want 2 runs, 1 owner and 5 followers of key 1", gm.runs.Load(), shared)
	}
	if oc := outcomes(t, reg, ev, 7); oc["parked"] != 0 {
		t.Errorf("outcomes %v; want none parked", oc)
	}
}

// TestJoinWaitIsBounded: while a key's owner runs a long model call, its duplicates wait in
// the consumer only joinWait, then park on the flight and free their handlers: a quick task
// behind them is answered while the owner still runs (its call is held until the quick task's
// event is out; were the handlers still held, the quick task would never be read); every
// duplicate is answered once.
func TestJoinWaitIsBounded(t *testing.T) {
	b := setup(t)
	reg := prometheus.NewRegistry()
	gm := newGateModel()
	b.consumer("c1", func(c *handlers.Config) {
		withStage(reg, 4, 50*time.Millisecond)(c)
		c.Models = map[string]model.Model{"sim": gm}
	})
	ev := "interview-evaluation"
	ids := dupTasks(b, "long", 1, 8, 0)
	wait(t, gm.started, "the owner's model call")
	b.enqueue(topics.Task{TaskID: "quick", Stage: ev, Input: simInput(2, 0)})
	if e := b.eventsFor([]string{ev}, []string{"quick"}, 30*time.Second)["quick"]; len(e) != 1 {
		t.Fatalf("the quick task: %+v; the duplicates held the handlers while the owner ran", e)
	}
	close(gm.release)
	onceEach(t, b, ids, topics.StatusSucceeded)
	if oc := outcomes(t, reg, ev, 8); oc["parked"] != 7 {
		t.Errorf("outcomes %v; want the 7 duplicates parked after joinWait", oc)
	}
	if gm.runs.Load() != 2 {
		t.Errorf("model runs %d, want 2", gm.runs.Load())
	}
}

// TestJoinedTasksAfterAFailure: when the owner's call fails for good, the tasks that joined it
// acquire the flight themselves and are answered with its failure; the model ran once.
func TestJoinedTasksAfterAFailure(t *testing.T) {
	b := setup(t)
	reg := prometheus.NewRegistry()
	b.consumer("c1", withStage(reg, 8, 2*time.Second))
	ev := "interview-evaluation"
	ids := make([]string, 6)
	for i := range ids {
		ids[i] = fmt.Sprintf("f-%d", i)
		b.enqueue(topics.Task{TaskID: ids[i], Stage: ev,
			Input: []byte(`{"question":"q","answer":"a","sim":{"latencyMs":300,"fail":"final"}}`)})
	}
	onceEach(t, b, ids, topics.StatusFailed)
	if b.runs.Load() != 1 {
		t.Errorf("model runs %d, want 1", b.runs.Load())
	}
}

// TestPastDeadlineDoesNotJoin: a duplicate whose deadline passed before it was read does not
// join its key's running owner: its acquire answers it EXPIRED (deadline_passed), as without
// joining.
func TestPastDeadlineDoesNotJoin(t *testing.T) {
	b := setup(t)
	b.consumer("c1", withStage(prometheus.NewRegistry(), 4, 2*time.Second))
	ev := "interview-evaluation"
	b.enqueue(topics.Task{TaskID: "lead", Stage: ev, Input: simInput(3, 500)})
	b.enqueue(topics.Task{TaskID: "late", Stage: ev, Input: simInput(3, 500),
		Deadline: time.Now().Add(-time.Second).UTC().Format(time.RFC3339Nano)})
	got := b.eventsFor([]string{ev}, []string{"lead", "late"}, 10*time.Second)
	if e := got["lead"]; len(e) != 1 || e[0].Status != topics.StatusSucceeded {
		t.Errorf("lead: %+v", e)
	}
	if e := got["late"]; len(e) != 1 || e[0].Status != topics.StatusExpired || e[0].ErrorCode != "deadline_passed" {
		t.Errorf("late: %+v; want one EXPIRED deadline_passed", e)
	}
}
