package client_test

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/flightdeck-ai/flightdeck/client"
	"github.com/flightdeck-ai/flightdeck/topics"
)

func TestTally(t *testing.T) {
	t0 := time.Unix(1000, 0)
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	ev := func(id, key string, shared topics.Shared, st topics.Status) topics.Event {
		return topics.Event{TaskID: id, RequestKey: key, Stage: "s", Status: st, Shared: shared}
	}
	tl := client.NewTally(t0)
	tl.Expect(client.Receipt{TaskID: "a", EnqueuedAt: at(0)})
	tl.Expect(client.Receipt{TaskID: "a", EnqueuedAt: at(0)}) // counted once

	if !tl.Observe(ev("a", "k1", topics.SharedOwner, topics.StatusSucceeded), at(10)) {
		t.Error("first event of a not counted")
	}
	if tl.Observe(ev("a", "k1", topics.SharedHit, topics.StatusSucceeded), at(11)) {
		t.Error("duplicate of a counted")
	}
	// b's event arrives before its receipt.
	if tl.Observe(ev("b", "k1", topics.SharedFollower, topics.StatusFailed), at(30)) {
		t.Error("event of an unknown task counted")
	}
	if e, ok := tl.Expect(client.Receipt{TaskID: "b", EnqueuedAt: at(5)}); !ok || e.TaskID != "b" {
		t.Errorf("Expect(b) = %+v, %v; want the early event", e, ok)
	}
	tl.Expect(client.Receipt{TaskID: "c", EnqueuedAt: at(5)})
	tl.Seal()
	select {
	case <-tl.Done():
		t.Fatal("Done before c's event")
	default:
	}
	if tl.Observe(ev("z", "k9", topics.SharedLocal, topics.StatusSucceeded), at(40)) {
		t.Error("event of an unknown task counted after Seal")
	}
	tl.Observe(ev("c", "k2", topics.SharedHit, topics.StatusSucceeded), at(105))
	select {
	case <-tl.Done():
	default:
		t.Fatal("Done not closed")
	}
	want := client.Summary{Tasks: 3, Events: 3, DistinctKeys: 2, Owner: 1, Hit: 1, Follower: 1,
		Failures: 1, P50Ms: 25, P99Ms: 100, WallMs: 2000}
	if diff := cmp.Diff(want, tl.Summary(at(2000))); diff != "" {
		t.Errorf("Summary (-want +got):\n%s", diff)
	}
}

// TestTallyForeignEvents: events under a task's id but of another tenant or request key
// (another producer's task that reused the id) are not the task's event, before or after
// its receipt is registered.
func TestTallyForeignEvents(t *testing.T) {
	t0 := time.Unix(1000, 0)
	ev := func(id, tenant, key string) topics.Event {
		return topics.Event{TaskID: id, Tenant: tenant, RequestKey: key, Stage: "s",
			Status: topics.StatusSucceeded, Shared: topics.SharedOwner}
	}
	tl := client.NewTally(t0)
	// Early: a foreign event of x, then x's own.
	tl.Observe(ev("x", "evil", "kx"), t0)
	tl.Observe(ev("x", "acme", "kx"), t0)
	if e, ok := tl.Expect(client.Receipt{TaskID: "x", Tenant: "acme", RequestKey: "kx", EnqueuedAt: t0}); !ok || e.Tenant != "acme" {
		t.Errorf("Expect(x) = %+v, %v; want x's own early event", e, ok)
	}
	tl.Expect(client.Receipt{TaskID: "y", Tenant: "acme", RequestKey: "ky", EnqueuedAt: t0})
	for _, foreign := range []topics.Event{ev("y", "evil", "ky"), ev("y", "acme", "other-key")} {
		if tl.Observe(foreign, t0) {
			t.Errorf("foreign event %+v counted for y", foreign)
		}
	}
	if !tl.Observe(ev("y", "acme", "ky"), t0) {
		t.Error("y's own event not counted")
	}
	if s := tl.Summary(t0); s.Events != 2 || s.Tasks != 2 {
		t.Errorf("Summary = %+v, want 2 of 2", s)
	}
}
