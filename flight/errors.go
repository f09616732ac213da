package flight

import (
	"errors"
	"fmt"
)

// Sentinel errors of the coordinator. Owner calls wrap them with the key:
// errors.Is(err, flight.ErrStaleToken) tells a fenced-off owner.
var (
	// ErrStaleToken: the caller's token is not the flight's current token (another owner took
	// over, or the flight is gone). Nothing was written; the caller must stop and write nothing.
	ErrStaleToken = errors.New("flight: stale token")
	// ErrCancelled: the flight was cancelled; the owner aborts its run.
	ErrCancelled = errors.New("flight: cancelled")
	// ErrExpired: the flight's runningTTL is spent or its progress stalled; the owner aborts and
	// re-acquires if attempts are left.
	ErrExpired = errors.New("flight: expired")
	// ErrNotFound: no flight exists for the key.
	ErrNotFound = errors.New("flight: not found")
	// ErrProtocol: a script answered something the coordinator does not understand (unknown
	// action, malformed reply, corrupt meta). Counted and alerted on; never a reason to run twice.
	ErrProtocol = errors.New("flight: protocol error")
	// ErrInvalidKey: a request key that cannot be a flight key (empty, too long, braces).
	ErrInvalidKey = errors.New("flight: invalid request key")
)

// StateError says that an owner call found the flight in a status it does not accept
// (for example complete on a PENDING flight). Nothing was written.
type StateError struct {
	// Op is the refused call: start, heartbeat, complete, fail or cancel.
	Op string
	// Status is the flight's status at the time of the call.
	Status Status
}

func (e *StateError) Error() string {
	return fmt.Sprintf("flight: %s not allowed in status %s", e.Op, e.Status)
}
