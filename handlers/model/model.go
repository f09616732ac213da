// Package model defines how a Flightdeck consumer runs one model call: the Model adapter
// interface, the typed *Error every adapter returns, and two adapters: Sim, a deterministic
// simulated model that needs no network, and OpenAI, a client for any OpenAI-compatible
// chat-completions endpoint.
//
// The flight owner calls Model.Call with a context that it cancels when the flight is cancelled
// or expired, or its token goes stale. Adapters must return promptly when it is done. Whatever
// an adapter returns as error, the owner passes it through Classify and records Retryable, Type
// and Code in the flight's meta.
package model

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/flightdeck-ai/flightdeck/flight"
)

// Request is one model call.
type Request struct {
	// Stage, TaskID, Tenant and SessionID identify the task whose flight runs the call.
	Stage, TaskID, Tenant, SessionID string
	// Input is the task input, any JSON value. Adapters must not modify it.
	Input json.RawMessage
	// ModelVersion and PromptVersion are the versions that entered the semantic key.
	ModelVersion, PromptVersion string
	// Attempt is the 1-based flight attempt number.
	Attempt int
	// Consumer is the name of the consumer process running the call.
	Consumer string
	// Params are the task's key params as a JSON object, nil when none. They entered the
	// semantic key, so the call may depend on them.
	Params json.RawMessage
	// RequestKey is the flight key the call runs under.
	RequestKey string
	// Deadline is the task's deadline, the zero time when none. A result after it is no longer
	// wanted.
	Deadline time.Time
}

// ProgressFunc reports that the call made progress, such as a streamed chunk or a step. It
// feeds the flight's progress liveness. It is cheap and safe to call from any goroutine.
// Adapters must accept a nil ProgressFunc and treat it as a no-op.
type ProgressFunc func()

// report calls f if it is set.
func (f ProgressFunc) report() {
	if f != nil {
		f()
	}
}

// Model is a model adapter. Implementations are safe for concurrent use.
type Model interface {
	// Name is the adapter's short name as a stage policy names it: "sim", "openai".
	Name() string
	// Call runs req once and returns the model's output as JSON. It must return when ctx is
	// done. progress may be nil. A failed call returns an error that Classify maps
	// faithfully: adapters return *Error for every failure they can tell apart.
	Call(ctx context.Context, req Request, progress ProgressFunc) (json.RawMessage, error)
}

// Error types: the values of Error.Type, recorded as errorType in the flight's meta.
const (
	// TypeTimeout is a call that ran out of time: context deadline, network timeout,
	// connection reset, HTTP 408. Retryable.
	TypeTimeout = "timeout"
	// TypeRateLimited is a call the provider refused for rate limits with HTTP 429. Retryable.
	// RetryAfter carries the provider's hint.
	TypeRateLimited = "rate_limited"
	// TypeUpstream is a provider or transport failure: HTTP 5xx, unknown errors. Retryable.
	TypeUpstream = "upstream"
	// TypeBadRequest is a request the provider or the adapter itself rejects as invalid: HTTP
	// 4xx other than 408 and 429, or unusable input. Final: retrying cannot help.
	TypeBadRequest = "bad_request"
	// TypeCancelled is a call whose context was cancelled. Final.
	TypeCancelled = "cancelled"
	// TypeBadOutput is a response the adapter cannot use because it is malformed, empty or too
	// large. Retryable.
	TypeBadOutput = "bad_output"
	// TypeSimulated is a failure Sim was told to produce. Retryable as requested.
	TypeSimulated = "simulated"
	// TypePanic is a handler or adapter that panicked. The consumer recovers it and records it
	// as a final failure, since a bug does not get better by calling it again, and the model
	// call it may have made is not repeated. Code is "panic", Message the panic value.
	TypePanic = "panic"
)

// Error is a classified model call failure. Adapters return *Error. Classify turns any error
// into one.
type Error struct {
	// Retryable reports whether another attempt may succeed.
	Retryable bool
	// Type is one of the Type constants.
	Type string
	// Code is a finer, adapter-specific reason such as "http_429". It may be empty.
	Code string
	// Message is a human-readable description. It never contains credentials.
	Message string
	// RetryAfter is the provider's hint for when to retry, 0 when none was given.
	RetryAfter time.Duration
	// Err is the underlying error, if any.
	Err error
}

// Error returns "model: <type> (<code>): <message>: <err>", leaving out the empty parts.
func (e *Error) Error() string {
	s := "model: " + e.Type
	if e.Code != "" {
		s += " (" + e.Code + ")"
	}
	if e.Message != "" {
		s += ": " + e.Message
	}
	if e.Err != nil {
		s += ": " + e.Err.Error()
	}
	return s
}

// Unwrap returns the underlying error.
func (e *Error) Unwrap() error { return e.Err }

// Permanent marks err as a final failure for handler functions whose input can never succeed.
// No other attempt runs, and every task of the flight's key receives a FAILED event with
// errorType bad_request and errorCode code. An empty code becomes "permanent".
func Permanent(code string, err error) error {
	if code == "" {
		code = "permanent"
	}
	return &Error{Type: TypeBadRequest, Code: code, Err: err}
}

// RetryLater marks err as retryable after at least d, as for a provider's Retry-After hint. The
// flight's next attempt starts no sooner. The task waits without holding a handler.
func RetryLater(d time.Duration, err error) error {
	return &Error{Retryable: true, Type: TypeRateLimited, Code: "retry_later", RetryAfter: d, Err: err}
}

// Usage is what one model call used, as its provider reported it.
type Usage = flight.Usage

// Remaining is the budget a provider says is left after a call, -1 where it said nothing.
type Remaining = flight.Remaining

// ReportUsage records, from inside Model.Call, what the call used. The owner charges it to the
// stage's limiter and carries it in its event. Several reports of one call add up.
func ReportUsage(ctx context.Context, u Usage) { flight.ReportUsage(ctx, u) }

// ReportRemaining records, from inside Model.Call, the budget the provider's
// x-ratelimit-remaining-* headers say is left. The stage's limiter lowers its view to it.
func ReportRemaining(ctx context.Context, r Remaining) { flight.ReportRemaining(ctx, r) }

// Classify turns err into an *Error:
//   - nil stays nil.
//   - An *Error anywhere in err's chain is returned as is.
//   - context.Canceled is a final TypeCancelled.
//   - context.DeadlineExceeded and network timeouts are a retryable TypeTimeout.
//   - Anything else is a retryable TypeUpstream.
//
// Except for the first two cases, the result wraps err.
func Classify(err error) *Error {
	if err == nil {
		return nil
	}
	if e, ok := errors.AsType[*Error](err); ok {
		return e
	}
	f := flight.FailureOf(err)
	return &Error{Retryable: f.Retryable, Type: f.Type, Code: f.Code, Err: err}
}

// Failure returns the flight failure an owner records for e, with its class and the provider's
// retry hint as RetryIn. flight.FailureOf calls it.
func (e *Error) Failure() flight.Failure {
	return flight.Failure{Retryable: e.Retryable, Type: e.Type, Code: e.Code, Message: e.Error(), RetryIn: e.RetryAfter}
}

// contextError classifies why ctx is done, keeping its context.Cause in the chain.
// ctx must be done.
func contextError(ctx context.Context) *Error {
	err := ctx.Err()
	if cause := context.Cause(ctx); cause != nil && cause != err {
		err = fmt.Errorf("%w: %w", err, cause)
	}
	return Classify(err)
}
