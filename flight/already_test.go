package flight_test

import (
	"testing"

	"github.com/flightdeck-ai/flightdeck/flight"
	"github.com/flightdeck-ai/flightdeck/topics"
)

// TestRetriedOwnerCallAnswersOnce: a complete or a final fail retried with the same token (its
// reply lost, or the write-back of an outcome Redis took) answers ALREADY; on one node the
// owner's task, answered and acknowledged by the first call, gets no second event.
func TestRetriedOwnerCallAnswersOnce(t *testing.T) {
	modes(t, func(t *testing.T, b *bundle) {
		own := func(key, task string) flight.Ownership {
			d := b.acquireWith(flight.AcquireParams{Key: key, OwnerID: "A", Task: b.task(task), Start: true})
			if d.Action != flight.ActionOwner {
				t.Fatalf("own %s: %+v", key, d)
			}
			return *d.Owner
		}
		c := own("once-c", "tc")
		for range 2 {
			if st, err := b.complete(c, `"v"`); err != nil || !st.Answered {
				t.Fatalf("complete: %+v %v", st, err)
			}
		}
		f := own("once-f", "tf")
		fail := flight.Failure{Type: "bad_request", Code: "400", Message: "no"}
		for range 2 {
			if st, err := b.c.Fail(b.ctx, f, fail, 0); err != nil || !st.Final || !st.Answered {
				t.Fatalf("fail: %+v %v", st, err)
			}
		}
		if b.mode != "write" {
			return // on Redis Cluster's mode the script cannot tell: answered again (at least once)
		}
		evs := b.events()
		for _, id := range []string{"tc", "tf"} {
			if len(evs[id]) != 1 || evs[id][0].Shared != topics.SharedOwner {
				t.Errorf("%s: events %+v, want one, as owner", id, evs[id])
			}
		}
	})
}
