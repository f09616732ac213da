package flight_test

import (
	"testing"

	"github.com/flightdeck-ai/flightdeck/flight"
	"github.com/flightdeck-ai/flightdeck/topics"
)

// TestOwnerLabel: a final outcome labels the flight's owner task owner (whether it acquires
// again itself or another caller's acquire ends its attempt for good), and only it: another
// task under the owner's task id but with its own stream entry is a hit or a follower.
func TestOwnerLabel(t *testing.T) {
	last := func(t *testing.T, b *bundle, id string) topics.Event {
		t.Helper()
		evs := b.events()[id]
		if len(evs) == 0 {
			t.Fatalf("no event for %s", id)
		}
		return evs[len(evs)-1]
	}
	t.Run("the owner's own entry after its complete's reply was lost", func(t *testing.T) {
		modes(t, func(t *testing.T, b *bundle) {
			key := "ai:" + testStage + ":v1:acme:lost-reply"
			d, ta := b.own(key)
			if _, err := b.complete(*d.Owner, `{"ok":true}`); err != nil {
				t.Fatal(err)
			}
			d2 := b.acquire(key, "A", ta)
			if d2.Action != flight.ActionResultHit || d2.Shared != topics.SharedOwner {
				t.Fatalf("acquire = %s, shared %q; want RESULT_HIT, owner", d2.Action, d2.Shared)
			}
			if e := last(t, b, "ta"); e.Shared != topics.SharedOwner {
				t.Errorf("event labelled %q, want owner", e.Shared)
			}
		})
	})
	t.Run("another entry under the owner's task id, on a stored result", func(t *testing.T) {
		modes(t, func(t *testing.T, b *bundle) {
			key := "ai:" + testStage + ":v1:acme:same-id"
			d, _ := b.own(key)
			if _, err := b.complete(*d.Owner, `{"ok":true}`); err != nil {
				t.Fatal(err)
			}
			d2 := b.acquire(key, "B", b.task("ta"))
			if d2.Action != flight.ActionResultHit || d2.Shared != topics.SharedHit {
				t.Fatalf("acquire = %s, shared %q; want RESULT_HIT, hit", d2.Action, d2.Shared)
			}
			if e := last(t, b, "ta"); e.Shared != topics.SharedHit {
				t.Errorf("event labelled %q, want hit", e.Shared)
			}
		})
	})
	t.Run("another entry under the owner's task id, on a cancelled flight", func(t *testing.T) {
		modes(t, func(t *testing.T, b *bundle) {
			key := "ai:" + testStage + ":v1:acme:same-id-cancelled"
			b.own(key)
			if _, err := b.c.Cancel(b.ctx, key, "stop", cancelParams()); err != nil {
				t.Fatal(err)
			}
			d2 := b.acquire(key, "B", b.task("ta"))
			if d2.Action != flight.ActionCancelled || d2.Shared != topics.SharedFollower {
				t.Fatalf("acquire = %s, shared %q; want CANCELLED, follower", d2.Action, d2.Shared)
			}
			if e := last(t, b, "ta"); e.Shared != topics.SharedFollower {
				t.Errorf("event labelled %q, want follower", e.Shared)
			}
		})
	})
	t.Run("the owner's task, when another caller ends its attempt for good", func(t *testing.T) {
		modes(t, func(t *testing.T, b *bundle) {
			key := "ai:" + testStage + ":v1:acme:expired-for-good"
			b.own(key)
			b.set(key, "heartbeatAt", "now-10s", "attempts", "3")
			d := b.acquire(key, "B", b.task("tb"))
			if d.Action != flight.ActionExpired || d.Shared != topics.SharedFollower {
				t.Fatalf("acquire = %s, shared %q; want EXPIRED, follower", d.Action, d.Shared)
			}
			if e := last(t, b, "ta"); e.Shared != topics.SharedOwner || e.Status != topics.StatusExpired {
				t.Errorf("the owner's task: %s labelled %q, want EXPIRED owner", e.Status, e.Shared)
			}
			if e := last(t, b, "tb"); e.Shared != topics.SharedFollower {
				t.Errorf("the caller's task labelled %q, want follower", e.Shared)
			}
		})
	})
}
