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
