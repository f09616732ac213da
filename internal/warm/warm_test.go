package warm_test

import (
	"errors"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/flightdeck-ai/flightdeck/internal/guard"

	"github.com/flightdeck-ai/flightdeck/internal/warm"
)

// TestPool: Do returns the function's error, raises its panic in the caller, reuses an idle
// goroutine rather than starting one, runs concurrent calls at once, and lets its goroutines
// go when idle long enough or closed.
func TestPool(t *testing.T) {
	base := runtime.NumGoroutine()
	p := warm.New(time.Hour)
	boom := errors.New("boom")
	if err := p.Do(func() error { return boom }); !errors.Is(err, boom) {
		t.Fatalf("Do: %v, want the function's error", err)
	}
	// Sequential calls reuse goroutines: a call finds the last one idle, except when it has
	// not reached its wait for the next function yet (then a second one starts, and stays).
	for range 100 {
		if err := p.Do(func() error { return nil }); err != nil {
			t.Fatal(err)
		}
	}
	if n := runtime.NumGoroutine() - base; n < 1 || n > 8 {
		t.Errorf("%d pool goroutines after 100 sequential calls, want a few", n)
	}
	// Concurrent calls run at once (each on its own goroutine when none is idle).
	var wg sync.WaitGroup
	gate := make(chan struct{})
	var started sync.WaitGroup
	for range 8 {
		wg.Add(1)
		started.Add(1)
		go func() {
			defer wg.Done()
			_ = p.Do(func() error { started.Done(); <-gate; return nil })
		}()
	}
	started.Wait() // all 8 run together, or this never returns
	close(gate)
	wg.Wait()

	func() {
		defer func() {
			r := recover()
			pe, ok := r.(*guard.PanicError)
			if !ok || pe.Value != "bad" || len(pe.Stack) == 0 {
				t.Errorf("recovered %v, want a *PanicError with the value and a stack", r)
			}
		}()
		_ = p.Do(func() error { panic("bad") })
	}()
	if err := p.Do(func() error { return nil }); err != nil {
		t.Fatalf("after a panic: %v", err)
	}

	p.Close()
	waitGoroutines(t, base)
	if err := p.Do(func() error { return boom }); !errors.Is(err, boom) {
		t.Fatalf("Do after Close: %v", err)
	}
	waitGoroutines(t, base)

	short := warm.New(20 * time.Millisecond)
	_ = short.Do(func() error { return nil })
	waitGoroutines(t, base) // idle past its time
}

func waitGoroutines(t *testing.T, want int) {
	t.Helper()
	for deadline := time.Now().Add(5 * time.Second); runtime.NumGoroutine() > want; time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("%d goroutines, want %d", runtime.NumGoroutine(), want)
		}
	}
}
