// Package guard is the one place a panic is recovered. Code Flightdeck does not own, such as a
// handler, an executor function or a decoder of hostile input, runs through Run, which turns
// its panic into a *PanicError that the caller settles like any other outcome.
package guard

import (
	"bytes"
	"errors"
	"fmt"
	"runtime/debug"
)

// ErrGoexit is the Value of the PanicError reported for a function that called
// runtime.Goexit.
var ErrGoexit = errors.New("guard: function called runtime.Goexit")

// PanicError is a recovered panic with the stack of the goroutine that panicked.
type PanicError struct {
	// Value is what the function panicked with, ErrGoexit for runtime.Goexit.
	Value any
	// Stack is the panicking goroutine's stack, without its first line.
	Stack []byte
}

// Error describes the panic and where it happened.
func (p *PanicError) Error() string { return fmt.Sprintf("panic: %v\n\n%s", p.Value, p.Stack) }

// Unwrap returns Value if it is an error, so errors.Is(p, ErrGoexit) holds for a Goexit.
func (p *PanicError) Unwrap() error {
	err, _ := p.Value.(error)
	return err
}

// Run calls f and returns its error, or the panic it raised as a *PanicError. A *PanicError
// that a caller of Run raises again is returned as it is, with its first stack. If f calls
// runtime.Goexit, Run does not return, and onGoexit, when not nil, gets the PanicError first.
func Run(f func() error, onGoexit func(*PanicError)) (p *PanicError, err error) {
	returned := false
	defer func() {
		if returned {
			return
		}
		r := recover()
		switch v := r.(type) {
		case nil:
			// Only runtime.Goexit unwinds with nothing to recover. Since Go 1.21, panic(nil)
			// recovers a *runtime.PanicNilError.
			if onGoexit != nil {
				onGoexit(newPanicError(ErrGoexit))
			}
		case *PanicError:
			p = v
		default:
			p = newPanicError(v)
		}
	}()
	err = f()
	returned = true
	return nil, err
}

func newPanicError(v any) *PanicError {
	stack := debug.Stack()
	// The first line is "goroutine N [running]:". The panic is settled or raised again on
	// another goroutine, so that line would mislead. x/sync's singleflight trims it too.
	if i := bytes.IndexByte(stack, '\n'); i >= 0 {
		stack = stack[i+1:]
	}
	return &PanicError{Value: v, Stack: stack}
}
