package flight

import (
	"context"
	"errors"
	"fmt"

	"github.com/flightdeck-ai/flightdeck/internal/guard"
)

// FailureOf returns the failure an owner records for its call's error. That is the error's
// own when it has a Failure() Failure method, as the model adapters' errors have. Otherwise a
// cancelled context is final, a timeout is retryable, and anything else is retryable. An
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

// Guarded runs call and returns a panic in it as a final failure of type "panic", see
// FailureOf, after passing the panic with its stack to logPanic. The error unwraps to the *guard.PanicError.
func Guarded(call func() ([]byte, error), logPanic func(*guard.PanicError)) (out []byte, err error) {
	p, err := guard.Run(func() (err error) {
		out, err = call()
		return err
	}, nil)
	if p != nil {
		logPanic(p)
		return nil, panicked{p}
	}
	return out, err
}

// panicked is the error of a call that panicked: a final failure of type "panic", whose
// message is the panic's value. The stack goes to the log, not to the event.
type panicked struct{ p *guard.PanicError }

func (e panicked) Error() string { return "panic: " + fmt.Sprint(e.p.Value) }
func (e panicked) Unwrap() error { return e.p }
func (e panicked) Failure() Failure {
	return Failure{Type: "panic", Code: "panic", Message: fmt.Sprint(e.p.Value)}
}
