package flight_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"testing"
	"time"

	"github.com/flightdeck-ai/flightdeck/flight"
	"github.com/flightdeck-ai/flightdeck/handlers/model"
)

// TestJudge: each answer of the state machine, wrapped as the coordinator wraps it, has its
// verdict; a Redis failure is unavailable; the rest is invalid.
func TestJudge(t *testing.T) {
	wrap := func(err error) error { return fmt.Errorf("flight: complete %q: %w", "k", err) }
	for err, want := range map[error]flight.Verdict{
		nil:                                      flight.VerdictTaken,
		wrap(flight.ErrCancelled):                flight.VerdictCancelled,
		wrap(flight.ErrExpired):                  flight.VerdictExpired,
		wrap(flight.ErrStaleToken):               flight.VerdictStale,
		wrap(&flight.StateError{Op: "complete"}): flight.VerdictConflict,
		wrap(errors.New("dial tcp: refused")):    flight.VerdictUnavailable,
		wrap(context.DeadlineExceeded):           flight.VerdictUnavailable,
		wrap(flight.ErrProtocol):                 flight.VerdictInvalid,
		wrap(flight.ErrInvalidToken):             flight.VerdictInvalid,
		wrap(context.Canceled):                   flight.VerdictInvalid,
	} {
		if got := flight.Judge(err); got != want {
			t.Errorf("Judge(%v) = %d, want %d", err, got, want)
		}
	}
	if !flight.VerdictCancelled.Closed() || !flight.VerdictExpired.Closed() || flight.VerdictStale.Closed() {
		t.Error("Closed: want cancelled and expired only")
	}
	if !flight.VerdictStale.Refused() || !flight.VerdictConflict.Refused() || flight.VerdictUnavailable.Refused() {
		t.Error("Refused: want stale and conflict only")
	}
}

type notRetryable struct{ error }

func (notRetryable) Retryable() bool { return false }

// TestFailureOf: the consumer and the executor record the same failure for the same error.
// A model adapter's error keeps its class and retry hint; other errors are classified by
// their context or timeout, and a Retryable method has the last word.
func TestFailureOf(t *testing.T) {
	timeout := &net.OpError{Op: "read", Err: &timeoutErr{}}
	for name, c := range map[string]struct {
		err  error
		want flight.Failure
	}{
		"adapter": {fmt.Errorf("call: %w", &model.Error{Type: model.TypeRateLimited, Code: "http_429", Retryable: true, RetryAfter: time.Second}),
			flight.Failure{Retryable: true, Type: "rate_limited", Code: "http_429", RetryIn: time.Second}},
		"permanent": {model.Permanent("bad_input", errors.New("no answer")), flight.Failure{Type: "bad_request", Code: "bad_input"}},
		"cancelled": {context.Canceled, flight.Failure{Type: "cancelled", Code: "canceled"}},
		"deadline":  {fmt.Errorf("x: %w", context.DeadlineExceeded), flight.Failure{Retryable: true, Type: "timeout", Code: "deadline_exceeded"}},
		"net":       {timeout, flight.Failure{Retryable: true, Type: "timeout", Code: "net_timeout"}},
		"other":     {errors.New("boom"), flight.Failure{Retryable: true, Type: "upstream", Code: "unclassified"}},
		"says no":   {notRetryable{errors.New("boom")}, flight.Failure{Type: "upstream", Code: "unclassified"}},
		"typed":     {fmt.Errorf("x: %w", typedErr{}), flight.Failure{Retryable: true, Type: "quota", Code: "q1"}},
	} {
		got := flight.FailureOf(c.err)
		got.Message = ""
		if got != c.want {
			t.Errorf("%s: FailureOf = %+v, want %+v", name, got, c.want)
		}
		if m := model.Classify(c.err); name != "says no" && (m.Type != c.want.Type || m.Code != c.want.Code || m.Retryable != c.want.Retryable) {
			t.Errorf("%s: model.Classify = %s/%s/%v, want FailureOf's", name, m.Type, m.Code, m.Retryable)
		}
	}
}

type typedErr struct{}

func (typedErr) Error() string     { return "over quota" }
func (typedErr) ErrorType() string { return "quota" }
func (typedErr) ErrorCode() string { return "q1" }

type timeoutErr struct{}

func (*timeoutErr) Error() string   { return "i/o timeout" }
func (*timeoutErr) Timeout() bool   { return true }
func (*timeoutErr) Temporary() bool { return true }

// TestJudgeOfNilAllocatesNothing: every owner call judges its error, success included.
func TestJudgeOfNilAllocatesNothing(t *testing.T) {
	if n := testing.AllocsPerRun(1000, func() { _ = flight.Judge(nil) }); n != 0 {
		t.Errorf("Judge(nil) allocates %v times per call", n)
	}
}
