package handlers

import (
	"testing"

	"github.com/flightdeck-ai/flightdeck/stream"
)

// TestClaimKeepsAFreeFailure: a parked entry on a flight waiting out a limiter (a free
// failure, attempts at maxAttempts) is kept, not claimed as if the flight had ended.
func TestClaimKeepsAFreeFailure(t *testing.T) {
	m := map[string]string{"status": "FAILED", "retryable": "1", "free": "1", "attempts": "1",
		"policy": "5000 120000 0 600000 60000 1", "updatedAt": "1000", "heartbeatAt": "1000"}
	if v := verdict(stream.Candidate{Parked: true, ID: "1-0", Stream: "s"}, m, 1500, 0, 5000); v != stream.Keep {
		t.Errorf("verdict %v, want Keep (the flight retries after its limiter wait)", v)
	}
}

// TestClaimWaitsALeaseForAVanishedFlight: a parked entry whose flight is gone is skipped,
// untouched, until this consumer has found the flight gone for longer than the lease, since a
// live owner writes its flight back at its next heartbeat. A flight found again, by this
// consumer or by another whose check touched the entry, starts the count over. An entry of
// another consumer's task with no flight is claimed at once: its holder stopped touching it
// for a lease already.
func TestClaimWaitsALeaseForAVanishedFlight(t *testing.T) {
	var g goneFlights
	c := stream.Candidate{Parked: true, ID: "1-0", Stream: "s"}
	gone := map[string]string{}
	running := map[string]string{"status": "RUNNING", "heartbeatAt": "2900", "policy": "1500 3000 0 30000 1000 3"}
	for _, step := range []struct {
		now, idle int64 // idle: how long the entry went untouched when listed, delay before now
		m         map[string]string
		want      stream.Verdict
	}{
		{1000, 1000, gone, stream.Skip},
		{2000, 2000, gone, stream.Skip},
		{2500, 2500, gone, stream.Skip},
		{2501, 2501, gone, stream.Claim},
		{3000, 3000, running, stream.Keep}, // found alive: kept, touched at 3000
		{4000, 1000, gone, stream.Skip},
		{5501, 2501, gone, stream.Claim},
		// Another consumer found the flight alive at 5800 and touched the entry; this one did not
		// see it, so its count starts over.
		{6900, 1100, gone, stream.Skip},
		{8000, 2200, gone, stream.Skip},
		{8401, 2601, gone, stream.Claim},
	} {
		goneFor := g.seen(c.Stream+" "+c.ID, step.m["status"] == "", step.now-step.idle, step.now)
		if v := verdict(c, step.m, step.now, goneFor, 1500); v != step.want {
			t.Fatalf("at %d (status %q): verdict %v, want %v", step.now, step.m["status"], v, step.want)
		}
	}
	type step struct{ now, idle, want int64 } // want: how long seen says the flight is gone
	for _, sc := range []struct {
		name  string
		steps []step
	}{
		// A touch that lands after a check's listing but before it reads the time is seen at the
		// next check: listed at 1000 (idle since 0), read at 1400; touched by another consumer at
		// 1100; listed again at 2100 (idle since 1100), read at 2105: the count starts over.
		{"a touch before a late time reading", []step{{1400, 1000, 0}, {2105, 1000, 0}, {3005, 1900, 900}, {3606, 2500, 1501}}},
		// A check whose time reading comes late (listed at 2000, read at 2600) may start the count
		// over once, early on; the entry's idle time grows with each check, and later delays do not.
		{"late time readings", []step{{1000, 1000, 0}, {2600, 2000, 0}, {3000, 3000, 400}, {3500, 2800, 900}, {4301, 3600, 1701}}},
	} {
		var g goneFlights
		for _, st := range sc.steps {
			if got := g.seen("s 1-0", true, st.now-st.idle, st.now); got != st.want {
				t.Fatalf("%s, at %d: gone for %d ms, want %d", sc.name, st.now, got, st.want)
			}
		}
	}
	// An entry is forgotten only after no check found it gone for a while.
	g.prune(8401)
	if n := len(g.at); n != 1 {
		t.Errorf("%d entries remembered after a prune before their last check, want 1", n)
	}
	g.prune(8402)
	if n := len(g.at); n != 0 {
		t.Errorf("%d entries remembered after a prune past their last check, want 0", n)
	}
	if v := verdict(stream.Candidate{ID: "2-0", Stream: "s"}, gone, 1000, 0, 1500); v != stream.Claim {
		t.Errorf("another consumer's idle entry of a vanished flight: %v, want Claim", v)
	}
}
