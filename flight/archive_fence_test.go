package flight_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/flightdeck-ai/flightdeck/flight"
)

// TestArchiveFence: the fence answers what the archive knows; a failure tells nothing and is
// reported; a caller with no time left asks nothing; the question is bounded by half the
// caller's remaining time.
func TestArchiveFence(t *testing.T) {
	var calls int
	var lastBound time.Duration
	var reported []error
	fence := func(ctx context.Context, key string) (int64, bool, error) {
		calls++
		dl, _ := ctx.Deadline()
		lastBound = time.Until(dl)
		switch key {
		case "known":
			return 42, true, nil
		case "broken":
			return 0, false, errors.New("archive down")
		}
		return 0, false, nil
	}
	f := flight.ArchiveFence(fence, func(_ string, err error) { reported = append(reported, err) })
	ctx := context.Background()
	if tok, ok := f(ctx, "known"); !ok || tok != 42 || lastBound > time.Second {
		t.Errorf("known: %d %v (bound %v)", tok, ok, lastBound)
	}
	if _, ok := f(ctx, "none"); ok || len(reported) != 0 {
		t.Errorf("none: %v, reported %v", ok, reported)
	}
	if _, ok := f(ctx, "broken"); ok || len(reported) != 1 {
		t.Errorf("broken: %v, reported %v", ok, reported)
	}
	short, cancel := context.WithTimeout(ctx, 400*time.Millisecond)
	defer cancel()
	f(short, "known")
	if lastBound > 200*time.Millisecond {
		t.Errorf("bound %v with 400 ms left, want at most half", lastBound)
	}
	n := calls
	done, cancel2 := context.WithTimeout(ctx, time.Millisecond)
	defer cancel2()
	time.Sleep(2 * time.Millisecond)
	if _, ok := f(done, "known"); ok || calls != n || len(reported) != 2 || !errors.Is(reported[1], context.DeadlineExceeded) {
		t.Errorf("no time left: ok %v, %d calls (want %d), reported %v", ok, calls, n, reported)
	}
}
