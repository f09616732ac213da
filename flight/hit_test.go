package flight_test

import (
	"strconv"
	"testing"

	"github.com/flightdeck-ai/flightdeck/flight"
	"github.com/flightdeck-ai/flightdeck/topics"
)

// TestHitAnswersOnlyFromTheRecord: a kept outcome (Finished) answers a duplicate by Hit with
// the event an acquire's hit would write (shared hit, the owner's token, the result inlined)
// and acknowledges its entry, while the record is SUCCEEDED under the kept token; on one node
// never twice. Once the
// record is gone, and once a new run of the key holds it (running, then succeeded under a
// larger token), Hit writes nothing and leaves the entry pending: the caller acquires.
func TestHitAnswersOnlyFromTheRecord(t *testing.T) {
	modes(t, func(t *testing.T, b *bundle) {
		d, _ := b.own("k-hit")
		result := []byte(`{"score": 7}`)
		o := *d.Owner
		o.Usage = &flight.Usage{PromptTokens: 30, CompletionTokens: 4, Model: "m-1"}
		if _, err := b.c.Complete(b.ctx, o, result, 0); err != nil {
			t.Fatal(err)
		}
		fin := b.c.Finished(o, result)
		// A task left parked on the finished flight (a settle cut short on Redis Cluster) is
		// answered by the hit, as by an acquire's.
		tw := b.task("tw")
		if err := b.rdb.HSet(b.ctx, b.ks.Waiters("k-hit"), tw.Entry+" "+tw.Stream, strconv.FormatInt(b.now(), 10)+" tw").Err(); err != nil {
			t.Fatal(err)
		}
		t1 := b.task("t1")
		h, ok, err := b.c.Hit(b.ctx, fin, t1, 0)
		if err != nil || !ok || h.Action != flight.ActionResultHit || h.Token != d.Token || h.Answered != 2 {
			t.Fatalf("hit on the SUCCEEDED record: %+v, %v, %v", h, ok, err)
		}
		if h.Usage == nil || *h.Usage != *o.Usage {
			t.Errorf("the hit's usage %+v, want the owner's %+v (the ledger counts it as avoided)", h.Usage, o.Usage)
		}
		if e := b.events()["tw"]; len(e) != 1 || e[0].Shared != topics.SharedFollower || string(e[0].Result) != `{"score":7}` {
			t.Errorf("the parked task's events %+v, want one follower event with the result", e)
		}
		if h := b.holder(tw); h != "" || b.rdb.Exists(b.ctx, b.ks.Waiters("k-hit")).Val() != 0 {
			t.Errorf("the parked task's entry is held by %q, or its waiter field is left", h)
		}
		d2 := b.acquire("k-hit", "B", b.task("t-acq"))
		ev, ev2 := b.events()["t1"], b.events()["t-acq"]
		if len(ev) != 1 || ev[0].Shared != topics.SharedHit || ev[0].OwnerToken != d.Token ||
			string(ev[0].Result) != `{"score":7}` || ev[0].ResultRef != b.ks.Flight("k-hit") {
			t.Errorf("hit event %+v", ev)
		}
		if d2.Action != flight.ActionResultHit || len(ev2) != 1 || ev2[0].Shared != ev[0].Shared ||
			ev2[0].OwnerToken != ev[0].OwnerToken || string(ev2[0].Result) != string(ev[0].Result) ||
			ev2[0].Attempts != ev[0].Attempts || ev2[0].RequestKey != ev[0].RequestKey || ev2[0].Tenant != ev[0].Tenant ||
			ev2[0].ResultRef != ev[0].ResultRef || ev2[0].Usage != nil || ev[0].Usage != nil {
			t.Errorf("an acquire's hit answered %+v, the short hit %+v: want the same outcome, without usage", ev2, ev)
		}
		if h := b.holder(t1); h != "" {
			t.Errorf("t1's entry is still pending under %q", h)
		}
		if b.mode == "write" {
			// The same hit again (a lost reply, a consumer paused while another answered the
			// task): the entry is no longer pending, so nothing more is written.
			h, ok, err := b.c.Hit(b.ctx, fin, t1, 0)
			if err != nil || !ok || h.Shared != "" || h.Answered != 0 || len(b.events()["t1"]) != 1 {
				t.Errorf("a second hit of t1: %+v, %v, %v, events %d; want it answered before, nothing written",
					h, ok, err, len(b.events()["t1"]))
			}
		}

		miss := func(when string) {
			t.Helper()
			tm := b.task("t-" + when)
			if h, ok, err := b.c.Hit(b.ctx, fin, tm, 0); err != nil || ok {
				t.Errorf("%s: hit %+v, %v, %v; want no hit", when, h, ok, err)
			}
			if e := b.events()[tm.ID]; len(e) != 0 {
				t.Errorf("%s: events %+v, want none", when, e)
			}
			if h := b.holder(tm); h != "c1" {
				t.Errorf("%s: the entry is held by %q, want c1 still", when, h)
			}
		}
		if err := b.rdb.Del(b.ctx, b.ks.Flight("k-hit")).Err(); err != nil {
			t.Fatal(err)
		}
		miss("gone")
		d3 := b.acquireWith(flight.AcquireParams{Key: "k-hit", OwnerID: "C", Task: b.task("t-run"), Start: true})
		if d3.Action != flight.ActionOwner || d3.Token <= d.Token {
			t.Fatalf("a new run: %+v", d3)
		}
		miss("running")
		if _, err := b.c.Complete(b.ctx, *d3.Owner, result, 0); err != nil {
			t.Fatal(err)
		}
		miss("succeeded-again")
	})
}
