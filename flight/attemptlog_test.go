package flight_test

import (
	"strings"
	"testing"
	"time"

	"github.com/flightdeck-ai/flightdeck/flight"
)

// TestAttemptLog: every attempt a new owner ends (a retry after a failure, a takeover of a
// silent owner) is appended to the flight's attempt log with its owner, token and outcome,
// and the retry delay a failure asks for makes the next acquires park until it passes.
func TestAttemptLog(t *testing.T) {
	b := setup(t)
	const key = "ai:interview-evaluation:v1:acme:log"
	d1, _ := b.own(key)
	if _, err := b.c.Fail(b.ctx, *d1.Owner, flight.Failure{Retryable: true, Type: "upstream", Code: "http_503",
		Message: "bad\tgateway\nagain", RetryIn: 300 * time.Millisecond}, 0); err != nil {
		t.Fatal(err)
	}
	if d := b.acquire(key, "B", b.task("tb")); d.Action != flight.ActionFollowerWait {
		t.Fatalf("acquire before retryAt: %s %s, want FOLLOWER_WAIT", d.Action, d.Reason)
	}
	time.Sleep(350 * time.Millisecond)
	d2 := b.acquireWith(flight.AcquireParams{Key: key, OwnerID: "B", Task: b.task("tb2"), Start: true})
	if d2.Action != flight.ActionOwner || d2.Reason != flight.ReasonRetry {
		t.Fatalf("acquire after retryAt: %s %s", d2.Action, d2.Reason)
	}
	b.set(key, "heartbeatAt", "now-6s") // B went silent past its 5 s lease
	d3 := b.acquireWith(flight.AcquireParams{Key: key, OwnerID: "C", Task: b.task("tc"), Start: true})
	if d3.Action != flight.ActionOwner || d3.Reason != flight.ReasonTakeover {
		t.Fatalf("takeover: %s %s", d3.Action, d3.Reason)
	}
	log := b.get(key).Fields["attemptLog"]
	lines := strings.Split(log, "\n")
	if len(lines) != 2 {
		t.Fatalf("attempt log %q: want 2 lines", log)
	}
	f1, f2 := strings.Split(lines[0], "\t"), strings.Split(lines[1], "\t")
	if len(f1) != 9 || f1[0] != "1" || f1[2] != "A" || f1[6] != "FAILED" || f1[7] != "http_503" || f1[8] != "bad gateway again" {
		t.Errorf("first line %q", f1)
	}
	if len(f2) != 9 || f2[0] != "2" || f2[2] != "B" || f2[6] != "LEASE_LOST" {
		t.Errorf("second line %q", f2)
	}
	if f1[1] == f2[1] {
		t.Errorf("both lines carry token %s", f1[1])
	}
}
