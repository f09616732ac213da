package flight

import "errors"

// Verdict is what the state machine made of an owner's call to Complete, Fail, Rehydrate,
// Restore or Heartbeat. Callers switch on Judge(err) once instead of matching errors.
type Verdict uint8

// The verdicts.
const (
	// VerdictTaken: the call took effect.
	VerdictTaken Verdict = iota
	// VerdictCancelled: the flight was cancelled. The run's result may never be stored.
	VerdictCancelled
	// VerdictExpired: the flight expired for good. The run's result may never be stored.
	VerdictExpired
	// VerdictStale: another owner holds the flight with a larger token. This one is fenced off.
	VerdictStale
	// VerdictConflict: the flight is in a state the call does not apply to, a *StateError.
	VerdictConflict
	// VerdictUnavailable: Redis could not be used, see IsCoordinationFailure. Whether the call
	// took effect is unknown.
	VerdictUnavailable
	// VerdictInvalid: anything else, such as a protocol error, an invalid key or token, or a
	// caller that gave up.
	VerdictInvalid
)

// String names the verdict: taken, cancelled, expired, stale, conflict, unavailable or invalid.
func (v Verdict) String() string {
	names := [...]string{"taken", "cancelled", "expired", "stale", "conflict", "unavailable", "invalid"}
	if int(v) < len(names) {
		return names[v]
	}
	return "invalid"
}

// Judge returns the verdict of an owner call's error.
func Judge(err error) Verdict {
	if err == nil {
		return VerdictTaken
	}
	var se *StateError
	switch {
	case errors.Is(err, ErrCancelled):
		return VerdictCancelled
	case errors.Is(err, ErrExpired):
		return VerdictExpired
	case errors.Is(err, ErrStaleToken):
		return VerdictStale
	case errors.As(err, &se):
		return VerdictConflict
	case IsCoordinationFailure(err):
		return VerdictUnavailable
	}
	return VerdictInvalid
}

// Closed reports whether v ends the run for good: cancelled or expired.
func (v Verdict) Closed() bool { return v == VerdictCancelled || v == VerdictExpired }

// Refused reports whether another owner's flight stands: stale token or a state conflict.
func (v Verdict) Refused() bool { return v == VerdictStale || v == VerdictConflict }
