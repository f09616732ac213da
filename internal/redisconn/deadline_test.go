package redisconn_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/flightdeck-ai/flightdeck/internal/redisconn"
)

// lateTimer is a context whose deadline has passed while its own error is not set yet, as
// between a read cut at the deadline and the context's timer.
type lateTimer struct {
	context.Context
	deadline time.Time
}

func (c lateTimer) Deadline() (time.Time, bool) { return c.deadline, true }

// TestContextErr: DeadlineExceeded once the deadline has passed, even before the context says
// so; the context's own error first; nil before the deadline and without one.
func TestContextErr(t *testing.T) {
	bg := context.Background()
	if err := redisconn.ContextErr(lateTimer{bg, time.Now().Add(-time.Millisecond)}); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("deadline passed, timer not fired: %v, want DeadlineExceeded", err)
	}
	if err := redisconn.ContextErr(lateTimer{bg, time.Now().Add(time.Hour)}); err != nil {
		t.Errorf("deadline ahead: %v, want nil", err)
	}
	if err := redisconn.ContextErr(bg); err != nil {
		t.Errorf("no deadline: %v, want nil", err)
	}
	cancelled, cancel := context.WithCancel(bg)
	cancel()
	if err := redisconn.ContextErr(lateTimer{cancelled, time.Now().Add(-time.Millisecond)}); !errors.Is(err, context.Canceled) {
		t.Errorf("cancelled: %v, want Canceled", err)
	}
}
