package flight

import (
	"context"
	"errors"
)

// FailureOf returns the failure an owner records for its call's error: the error's own when it
// has one (a Failure() Failure method, as the model adapters' errors have). Otherwise a
// cancelled context is final, a timeout is retryable, and anything else is retryable; an
// error's ErrorType() and ErrorCode() methods name its class, and a Retryable() bool method has
// the last word.
func FailureOf(err error) Failure {
	if c, ok := errors.AsType[interface {
		error
		Failure() Failure
	}](err); ok {
		return c.Failure()
	}
	f := Failure{Retryable: true, Type: "upstream", Code: "unclassified", Message: err.Error()}
	switch t, timeout := errors.AsType[interface {
		error
		Timeout() bool
	}](err); {
	case errors.Is(err, context.Canceled):
		f.Retryable, f.Type, f.Code = false, "cancelled", "canceled"
	case errors.Is(err, context.DeadlineExceeded):
		f.Type, f.Code = "timeout", "deadline_exceeded"
	case timeout && t.Timeout():
		f.Type, f.Code = "timeout", "net_timeout"
	}
	if t, ok := errors.AsType[interface {
		error
		ErrorType() string
		ErrorCode() string
	}](err); ok {
		f.Type, f.Code = t.ErrorType(), t.ErrorCode()
	}
	if r, ok := errors.AsType[interface {
		error
		Retryable() bool
	}](err); ok {
		f.Retryable = r.Retryable()
	}
	return f
}
