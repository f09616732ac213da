package flight_test

import (
	"testing"
	"time"

	"github.com/flightdeck-ai/flightdeck/flight"
)

// TestArchivedAnswers: a result answers a new owner; a failure or cancellation only while
// Redis would have kept it (failureTTL); an expired flight never.
func TestArchivedAnswers(t *testing.T) {
	old, fresh := time.Now().Add(-2*time.Minute), time.Now().Add(-time.Second)
	for _, c := range []struct {
		a    flight.Archived
		want bool
	}{
		{flight.Archived{Status: flight.StatusSucceeded, FinishedAt: old}, true},
		{flight.Archived{Status: flight.StatusFailed, FinishedAt: fresh}, true},
		{flight.Archived{Status: flight.StatusFailed, FinishedAt: old}, false},
		{flight.Archived{Status: flight.StatusCancelled, FinishedAt: fresh}, true},
		{flight.Archived{Status: flight.StatusExpired, FinishedAt: fresh}, false},
	} {
		if got := c.a.Answers(time.Minute); got != c.want {
			t.Errorf("%s finished %v ago: Answers = %v, want %v", c.a.Status, time.Since(c.a.FinishedAt).Round(time.Second), got, c.want)
		}
	}
}

// TestDecisionFinal: only an acquire that ended the flight for good gives an outcome to
// archive, under the flight's token; a caller's own deadline ends nothing.
func TestDecisionFinal(t *testing.T) {
	for _, c := range []struct {
		d    flight.Decision
		want flight.Status
	}{
		{flight.Decision{Action: flight.ActionCancelled, Token: 3, ErrorCode: "closed"}, flight.StatusCancelled},
		{flight.Decision{Action: flight.ActionExpired, Token: 3}, flight.StatusExpired},
		{flight.Decision{Action: flight.ActionExpired, Token: 3, Reason: flight.ReasonDeadlinePassed}, ""},
		{flight.Decision{Action: flight.ActionCancelled}, ""},
		{flight.Decision{Action: flight.ActionResultHit, Token: 3}, ""},
		{flight.Decision{Action: flight.ActionFailedFinal, Token: 3}, ""},
	} {
		a, ok := c.d.Final("k", "s", "t", time.Hour)
		if ok != (c.want != "") || a.Status != c.want {
			t.Errorf("%s/%s: Final = %+v, %v; want status %q", c.d.Action, c.d.Reason, a, ok, c.want)
			continue
		}
		if ok && (a.Key != "k" || a.Stage != "s" || a.Tenant != "t" || a.Token != 3 || a.Attempts != 1 || a.Retention != time.Hour || a.ErrorCode != c.d.ErrorCode) {
			t.Errorf("%s: Final = %+v", c.d.Action, a)
		}
	}
}
