package flight

import (
	"context"
	"errors"
	"fmt"

	"github.com/flightdeck-ai/flightdeck/topics"
	"github.com/redis/go-redis/v9"
)

// Sentinel errors of the coordinator. Owner calls wrap them with the key:
// errors.Is(err, flight.ErrStaleToken) tells a fenced-off owner.
var (
	// ErrStaleToken: the caller's token is not the flight's current token because another
	// owner took over, or the fence refuses it. Nothing was written. The caller must stop and
	// write nothing of its run.
	ErrStaleToken = errors.New("flight: stale token")
	// ErrGone: the flight's meta is gone, because it expired or Redis lost it. The caller
	// acquires again.
	ErrGone = errors.New("flight: gone")
	// ErrCancelled: the flight was cancelled. The owner aborts its run.
	ErrCancelled = errors.New("flight: cancelled")
	// ErrExpired: the flight's runningTTL is spent or its progress stalled. The owner aborts
	// and re-acquires if attempts are left.
	ErrExpired = errors.New("flight: expired")
	// ErrNotFound: no flight exists for the key.
	ErrNotFound = errors.New("flight: not found")
	// ErrProtocol: a script answered something the coordinator does not understand, such as an
	// unknown action, a malformed reply or a corrupt meta. Counted and alerted on, never a reason
	// to run twice.
	ErrProtocol = errors.New("flight: protocol error")
	// ErrNotReplicated: under DurabilityReplicated, a call took effect on the master but no
	// replica acknowledged it in time. See NotReplicatedError.
	ErrNotReplicated = errors.New("flight: not acknowledged by a replica")
	// ErrInvalidKey: a request key that cannot be a flight key: empty, too long, or with braces.
	ErrInvalidKey = errors.New("flight: invalid request key")
	// ErrInvalidToken: a fencing token outside 1..MaxToken. Nothing was written.
	ErrInvalidToken = errors.New("flight: invalid token")
	// ErrDuplicateMember: a JSON document given to Canonical, or as a semantic key's input or
	// params, has an object with a member name twice, compared after JSON unescaping. The error
	// names the path of the member. A semantic key refuses it with ErrInvalidKey too.
	ErrDuplicateMember = errors.New("flight: duplicate member name")
)

// MaxToken is the largest fencing token. The scripts compare tokens as Lua numbers, which
// are doubles exact up to 2^53, and Redis issues them from its clock in microseconds, far
// below it. A larger one can only be forged, and would stop the fence: token + 1 == token.
const MaxToken = 1 << 53

// CheckToken returns a wrapped ErrInvalidToken unless t is in 1..MaxToken.
func CheckToken(t int64) error {
	if t < 1 || t > MaxToken {
		return fmt.Errorf("%w: %d (want 1..%d)", ErrInvalidToken, t, int64(MaxToken))
	}
	return nil
}

// StateError says that an owner call found the flight in a status it does not accept, for
// example complete on a PENDING flight. Nothing was written.
type StateError struct {
	// Op is the refused call: start, heartbeat, complete, fail or cancel.
	Op string
	// Status is the flight's status at the time of the call.
	Status Status
}

// Error describes the refused call and the status.
func (e *StateError) Error() string {
	return fmt.Sprintf("flight: %s not allowed in status %s", e.Op, e.Status)
}

// Errors of the Executor.
var (
	// ErrCoordinationUnavailable: Redis could not be used to coordinate. The connection was
	// refused, timed out, a script failed, or the circuit breaker is open. DISTRIBUTED_ONLY
	// stages return it at once. HYBRID stages fall back to in-process single-flight instead.
	ErrCoordinationUnavailable = errors.New("flight: coordination unavailable")
	// ErrUncertainOutcome: the model answered but its result could be stored neither in Redis
	// nor in the local spool. Do returns it together with the value: the value is good, but
	// other nodes will not see it.
	ErrUncertainOutcome = errors.New("flight: uncertain outcome")
	// ErrFailed: the flight failed for good. *OutcomeError holds the error fields.
	ErrFailed = errors.New("flight: failed")
	// ErrUnknownStage: the executor has no options for the stage.
	ErrUnknownStage = errors.New("flight: unknown stage")
	// ErrTooManyWaiters: executor.Config.MaxWaiters in-process followers already wait. The
	// call is refused rather than queued without bound, and it never runs the function instead.
	ErrTooManyWaiters = errors.New("flight: too many waiting followers")
)

// CoordinationError wraps the failure behind ErrCoordinationUnavailable.
type CoordinationError struct {
	// Err is the underlying error: a go-redis error, a timeout, or gobreaker.ErrOpenState.
	Err error
	// BreakerOpen is true when the call was not made because the breaker is open.
	BreakerOpen bool
}

// Error says why coordination was unavailable.
func (e *CoordinationError) Error() string {
	if e.BreakerOpen {
		return "flight: coordination unavailable: circuit breaker open"
	}
	return "flight: coordination unavailable: " + e.Err.Error()
}

// Unwrap returns the underlying error.
func (e *CoordinationError) Unwrap() error { return e.Err }

// Is matches ErrCoordinationUnavailable.
func (e *CoordinationError) Is(target error) bool { return target == ErrCoordinationUnavailable }

// OutcomeError is a flight that ended without a result: FAILED, CANCELLED or EXPIRED. It
// matches ErrFailed, ErrCancelled or ErrExpired with errors.Is.
type OutcomeError struct {
	// Status is the flight's final status.
	Status Status
	// Type, Code and Message describe the failure: a model error class, "cancelled", ...
	Type, Code, Message string
	// Retryable tells whether the underlying model error was retryable and attempts ran out.
	Retryable bool
}

// Error describes the flight's final status and failure.
func (e *OutcomeError) Error() string {
	return fmt.Sprintf("flight: %s (%s/%s): %s", e.Status, e.Type, e.Code, e.Message)
}

// Is matches the sentinel of the status.
func (e *OutcomeError) Is(target error) bool {
	switch e.Status {
	case StatusFailed:
		return target == ErrFailed
	case StatusCancelled:
		return target == ErrCancelled
	case StatusExpired:
		return target == ErrExpired
	}
	return false
}

// errLapsed: an owner call that asked first, because the coordinator has a WriteBackFence,
// found its own record in a state that lets another caller take the flight over. Nothing was
// written, and the coordinator asks the fence before it calls again.
var errLapsed = errors.New("flight: lease lapsed")

// IsCoordinationFailure reports whether err means Redis could not be used: connection
// refused, timeout, script error. Answers of the state machine, such as stale token,
// cancelled, expired or a state conflict, protocol errors, and the caller giving up are not.
func IsCoordinationFailure(err error) bool {
	if err == nil {
		return false
	}
	var se *StateError
	switch {
	case errors.Is(err, ErrStaleToken), errors.Is(err, ErrCancelled), errors.Is(err, ErrExpired),
		errors.Is(err, ErrNotFound), errors.Is(err, ErrInvalidKey), errors.Is(err, ErrInvalidToken), errors.Is(err, ErrProtocol),
		errors.Is(err, ErrGone), errors.Is(err, ErrLockLost), errors.Is(err, topics.ErrInvalidKeyspace),
		errors.Is(err, context.Canceled), errors.Is(err, redis.Nil), errors.As(err, &se):
		return false
	}
	return true
}
