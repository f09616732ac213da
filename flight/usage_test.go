package flight_test

import (
	"context"
	"math"
	"strconv"
	"strings"
	"testing"

	"github.com/flightdeck-ai/flightdeck/flight"
	"github.com/flightdeck-ai/flightdeck/topics"
)

// TestRecordKeepsUsage: a SUCCEEDED flight keeps what its owner's call used, and every later
// duplicate's hit reads it, so that the ledger can count the tokens the hit avoided. A
// record written back after Redis lost it keeps it too; a call that reported none leaves it out.
func TestRecordKeepsUsage(t *testing.T) {
	modes(t, func(t *testing.T, b *bundle) {
		d, _ := b.own("u")
		o := *d.Owner
		o.Usage = &flight.Usage{Model: "gpt-4o mini\t2024", PromptTokens: 120, CompletionTokens: 30}
		if _, err := b.complete(o, `{"v":1}`); err != nil {
			t.Fatal(err)
		}
		want := flight.Usage{Model: "gpt-4o_mini_2024", PromptTokens: 120, CompletionTokens: 30}
		hit := b.acquire("u", "B", b.task("th"))
		if hit.Action != flight.ActionResultHit || hit.Usage == nil || *hit.Usage != want {
			t.Fatalf("hit: %+v, usage %+v; want %+v", hit, hit.Usage, want)
		}
		if got := b.get("u").Fields["usage"]; got != "120 30 gpt-4o_mini_2024" {
			t.Errorf("record usage field %q", got)
		}

		// A parked duplicate answered by the complete, then the record lost and written back.
		d2, _ := b.own("w")
		b.acquire("w", "B", b.task("tp"))
		b.rdb.Del(b.ctx, b.ks.Flight("w"))
		o2 := *d2.Owner
		o2.Usage = &flight.Usage{PromptTokens: 7, CompletionTokens: 0}
		st, err := b.complete(o2, `"r"`)
		if err != nil || !st.Restored {
			t.Fatalf("write-back: %+v %v", st, err)
		}
		if hit := b.acquire("w", "C", b.task("tw")); hit.Usage == nil || *hit.Usage != (flight.Usage{PromptTokens: 7}) {
			t.Errorf("hit after the write-back: usage %+v", hit.Usage)
		}

		// No usage reported: none kept, and the hit says none.
		d3, _ := b.own("n")
		if _, err := b.complete(*d3.Owner, `1`); err != nil {
			t.Fatal(err)
		}
		if hit := b.acquire("n", "B", b.task("tn")); hit.Action != flight.ActionResultHit || hit.Usage != nil {
			t.Errorf("hit of a call without usage: %+v", hit)
		}
		// A usage field the record cannot mean reads as none.
		b.set("n", "usage", "12 x")
		if hit := b.acquire("n", "B", b.task("tx")); hit.Action != flight.ActionResultHit || hit.Usage != nil {
			t.Errorf("hit of a record with a malformed usage: %+v", hit)
		}
		for _, ev := range b.events()["th"] {
			if ev.Shared != topics.SharedHit || ev.Usage != nil {
				t.Errorf("the hit's event %+v: a hit uses nothing, and its event says so", ev)
			}
		}
	})
}

// TestRecordUsageFieldRoundTrips: EncodeRecord and ParseRecord keep the usage field where the
// scripts write it, after updatedAt.
func TestRecordUsageFieldRoundTrips(t *testing.T) {
	raw := flight.EncodeRecord(map[string]string{"status": "SUCCEEDED", "ownerToken": "5", "attempts": "1",
		"usage": "3 4 m", "requestKey": "k"}, []byte("x"))
	f, res, err := flight.ParseRecord(raw)
	if err != nil || f["usage"] != "3 4 m" || string(res) != "x" || f["ownerToken"] != "5" {
		t.Fatalf("round trip: %v %q %v", f, res, err)
	}
	if !strings.HasPrefix(raw, "f1\tSUCCEEDED\t5\t1\t\t\t3 4 m\t") {
		t.Errorf("line 1 %q: usage follows updatedAt", strings.SplitN(raw, "\n", 2)[0])
	}
}

// TestRecordKeepsOwnerTrace: the traceparent an owner's acquire gives is kept with the flight:
// a parked follower and a later hit read it, a takeover replaces it with the new owner's, and
// a record Redis lost is written back with it.
func TestRecordKeepsOwnerTrace(t *testing.T) {
	modes(t, func(t *testing.T, b *bundle) {
		const tpA = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
		const tpC = "00-0af7651916cd43dd8448eb211c80319c-00f067aa0ba902b7-01"
		a := b.acquireWith(flight.AcquireParams{Key: "tr", OwnerID: "A", Task: b.task("ta"), Start: true, Trace: tpA})
		if a.Action != flight.ActionOwner || a.Owner.Trace != tpA {
			t.Fatalf("owner: %+v", a)
		}
		if f := b.acquire("tr", "B", b.task("tf")); f.Reason != flight.ReasonParked || f.OwnerTrace != tpA {
			t.Errorf("parked follower: %+v, want the owner's trace", f)
		}
		// The lease lapses: C takes over with its own trace.
		b.set("tr", "heartbeatAt", "now-6s")
		c := b.acquireWith(flight.AcquireParams{Key: "tr", OwnerID: "C", Task: b.task("tc"), Start: true, Trace: tpC})
		if c.Action != flight.ActionOwner || c.Reason != flight.ReasonTakeover {
			t.Fatalf("takeover: %+v", c)
		}
		if f := b.acquire("tr", "B", b.task("tg")); f.OwnerTrace != tpC {
			t.Errorf("follower after the takeover: trace %q, want the new owner's %q", f.OwnerTrace, tpC)
		}
		// Redis loses the record; the complete writes it back with the trace.
		b.rdb.Del(b.ctx, b.ks.Flight("tr"))
		if _, err := b.complete(*c.Owner, `"r"`); err != nil {
			t.Fatal(err)
		}
		if h := b.acquire("tr", "D", b.task("th")); h.Action != flight.ActionResultHit || h.OwnerTrace != tpC {
			t.Errorf("hit after the write-back: %+v", h)
		}
		if got := b.get("tr").Fields["trace"]; got != tpC {
			t.Errorf("record trace field %q", got)
		}
	})
}

// TestReportUsageBounds: a negative count, which would make counters go down (and Prometheus
// counters panic), counts as 0; a huge one is capped, so sums cannot overflow.
func TestReportUsageBounds(t *testing.T) {
	ctx, got := flight.CollectUsage(context.Background())
	flight.ReportUsage(ctx, flight.Usage{Model: "m", PromptTokens: -500, CompletionTokens: 7})
	flight.ReportUsage(ctx, flight.Usage{PromptTokens: 3, CompletionTokens: math.MaxInt})
	flight.ReportUsage(ctx, flight.Usage{PromptTokens: 2, CompletionTokens: math.MaxInt})
	u := got()
	if u == nil || u.PromptTokens != 5 || u.CompletionTokens != 1<<40 || u.Model != "m" {
		t.Fatalf("usage %+v, want 5 prompt tokens and completion tokens capped at 2^40", u)
	}
}

// TestRecordRefusesOddTraces: an AcquireParams.Trace that cannot be a traceparent (too long,
// or with a tab, a space or upper-case letters) is kept as no trace.
func TestRecordRefusesOddTraces(t *testing.T) {
	b := setup(t)
	for i, tr := range []string{strings.Repeat("a", 129), "00-ab\tcd", "00 ab", "00-AB"} {
		key := "odd" + strconv.Itoa(i)
		a := b.acquireWith(flight.AcquireParams{Key: key, OwnerID: "A", Task: b.task("ta"), Start: true, Trace: tr})
		if f := b.acquire(key, "B", b.task("tb")); a.Action != flight.ActionOwner || f.OwnerTrace != "" {
			t.Errorf("trace %q: owner %+v, follower's OwnerTrace %q, want none", tr, a.Action, f.OwnerTrace)
		}
	}
}
