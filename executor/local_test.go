package executor_test

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/flightdeck-ai/flightdeck/executor"
)

// localWaitFor polls cond until it holds, failing the test after 5 s.
func localWaitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(time.Millisecond)
	}
}

// localClock is a settable clock for LocalConfig.Now.
type localClock struct {
	mu  sync.Mutex
	now time.Time
}

func newLocalClock() *localClock { return &localClock{now: time.Unix(1_700_000_000, 0)} }

func (c *localClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *localClock) Advance(d time.Duration) {
	c.mu.Lock()
	c.now = c.now.Add(d)
	c.mu.Unlock()
}

// localCounted returns fn that counts its runs in calls and answers v.
func localCounted(calls *atomic.Int32, v string) func(context.Context) (string, error) {
	return func(context.Context) (string, error) {
		calls.Add(1)
		return v, nil
	}
}

func TestLocalConcurrentCallersRunOnce(t *testing.T) {
	const n = 50
	l := executor.NewLocal[string](executor.LocalConfig{})
	var calls atomic.Int32
	release := make(chan struct{})
	fn := func(context.Context) (string, error) {
		calls.Add(1)
		<-release
		return "v", nil
	}

	results := make([]executor.LocalResult[string], n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() { results[i], errs[i] = l.Do(context.Background(), "k", fn) })
	}
	localWaitFor(t, "all callers to join", func() bool { return l.Waiting() == n })
	close(release)
	wg.Wait()

	if got := calls.Load(); got != 1 {
		t.Errorf("fn ran %d times, want 1", got)
	}
	leaders := 0
	for i := range n {
		if errs[i] != nil || results[i].Value != "v" || !results[i].Shared || results[i].Replayed {
			t.Errorf("caller %d: got %+v, %v; want shared v", i, results[i], errs[i])
		}
		if results[i].Leader {
			leaders++
		}
	}
	if leaders != 1 {
		t.Errorf("%d leaders, want 1", leaders)
	}
	if got := l.Waiting(); got != 0 {
		t.Errorf("Waiting() = %d after all returned, want 0", got)
	}
}

func TestLocalZeroValue(t *testing.T) {
	var l executor.Local[int]
	var calls atomic.Int32
	for range 2 {
		res, err := l.Do(context.Background(), "k", func(context.Context) (int, error) {
			calls.Add(1)
			return 7, nil
		})
		if err != nil || res.Value != 7 || !res.Leader || res.Replayed {
			t.Fatalf("got %+v, %v; want leader 7", res, err)
		}
	}
	if got := calls.Load(); got != 2 {
		t.Errorf("fn ran %d times, want 2 (the zero value does not replay)", got)
	}
	l.Forget("k") // must not panic on the zero value
}

func TestLocalErrorSharedNotReplayed(t *testing.T) {
	const n = 10
	errBoom := errors.New("boom")
	l := executor.NewLocal[string](executor.LocalConfig{Replay: time.Hour})
	var calls atomic.Int32
	release := make(chan struct{})
	fn := func(context.Context) (string, error) {
		calls.Add(1)
		<-release
		return "", errBoom
	}

	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() { _, errs[i] = l.Do(context.Background(), "k", fn) })
	}
	localWaitFor(t, "all callers to join", func() bool { return l.Waiting() == n })
	close(release)
	wg.Wait()
	for i, err := range errs {
		if !errors.Is(err, errBoom) {
			t.Errorf("caller %d: err = %v, want %v", i, err, errBoom)
		}
	}
	if got := calls.Load(); got != 1 {
		t.Fatalf("fn ran %d times, want 1", got)
	}

	if _, err := l.Do(context.Background(), "k", fn); !errors.Is(err, errBoom) {
		t.Fatalf("err = %v, want %v", err, errBoom)
	}
	if got := calls.Load(); got != 2 {
		t.Errorf("fn ran %d times after a later call, want 2 (errors are not replayed)", got)
	}
}

func TestLocalReplayWithinWindow(t *testing.T) {
	clk := newLocalClock()
	l := executor.NewLocal[string](executor.LocalConfig{Replay: time.Minute, Now: clk.Now})
	var calls atomic.Int32
	if _, err := l.Do(context.Background(), "k", localCounted(&calls, "v1")); err != nil {
		t.Fatal(err)
	}
	clk.Advance(time.Minute - time.Nanosecond)
	res, err := l.Do(context.Background(), "k", localCounted(&calls, "v2"))
	if err != nil || res.Value != "v1" || !res.Replayed || res.Leader || res.Shared {
		t.Fatalf("got %+v, %v; want replayed v1", res, err)
	}
	if got := calls.Load(); got != 1 {
		t.Errorf("fn ran %d times, want 1", got)
	}
}

func TestLocalReplayExpires(t *testing.T) {
	clk := newLocalClock()
	l := executor.NewLocal[string](executor.LocalConfig{Replay: time.Minute, Now: clk.Now})
	var calls atomic.Int32
	if _, err := l.Do(context.Background(), "k", localCounted(&calls, "v1")); err != nil {
		t.Fatal(err)
	}
	clk.Advance(time.Minute)
	res, err := l.Do(context.Background(), "k", localCounted(&calls, "v2"))
	if err != nil || res.Value != "v2" || res.Replayed || !res.Leader {
		t.Fatalf("got %+v, %v; want a new run with v2", res, err)
	}
	if got := calls.Load(); got != 2 {
		t.Errorf("fn ran %d times, want 2", got)
	}
}

func TestLocalReplayRealClock(t *testing.T) {
	l := executor.NewLocal[string](executor.LocalConfig{Replay: 200 * time.Millisecond})
	var calls atomic.Int32
	if _, err := l.Do(context.Background(), "k", localCounted(&calls, "v")); err != nil {
		t.Fatal(err)
	}
	if res, _ := l.Do(context.Background(), "k", localCounted(&calls, "v")); !res.Replayed {
		t.Errorf("second call within the window: got %+v, want replayed", res)
	}
	time.Sleep(250 * time.Millisecond)
	if res, _ := l.Do(context.Background(), "k", localCounted(&calls, "v")); res.Replayed {
		t.Errorf("call after the window: got %+v, want a new run", res)
	}
	if got := calls.Load(); got != 2 {
		t.Errorf("fn ran %d times, want 2", got)
	}
}

func TestLocalForgetEndsReplay(t *testing.T) {
	l := executor.NewLocal[string](executor.LocalConfig{Replay: time.Hour})
	var calls atomic.Int32
	if _, err := l.Do(context.Background(), "k", localCounted(&calls, "v1")); err != nil {
		t.Fatal(err)
	}
	l.Forget("k")
	res, err := l.Do(context.Background(), "k", localCounted(&calls, "v2"))
	if err != nil || res.Value != "v2" || res.Replayed || !res.Leader {
		t.Fatalf("got %+v, %v; want a new run with v2", res, err)
	}
	if got := calls.Load(); got != 2 {
		t.Errorf("fn ran %d times, want 2", got)
	}
}

func TestLocalForgetDuringFlight(t *testing.T) {
	l := executor.NewLocal[string](executor.LocalConfig{Replay: time.Hour})
	release := make(chan struct{})
	old := make(chan executor.LocalResult[string], 1)
	go func() {
		res, _ := l.Do(context.Background(), "k", func(context.Context) (string, error) {
			<-release
			return "stale", nil
		})
		old <- res
	}()
	localWaitFor(t, "the first flight", func() bool { return l.Waiting() == 1 })

	l.Forget("k")
	res, err := l.Do(context.Background(), "k", func(context.Context) (string, error) { return "fresh", nil })
	if err != nil || res.Value != "fresh" || !res.Leader {
		t.Fatalf("call after Forget: got %+v, %v; want a new run with fresh", res, err)
	}
	close(release)
	if res := <-old; res.Value != "stale" {
		t.Fatalf("caller of the forgotten flight: got %+v, want stale", res)
	}
	// The forgotten flight ended last but must not have replaced the fresh result.
	res, err = l.Do(context.Background(), "k", func(context.Context) (string, error) { return "third", nil })
	if err != nil || res.Value != "fresh" || !res.Replayed {
		t.Fatalf("got %+v, %v; want replayed fresh", res, err)
	}
}

func TestLocalMaxReplayEvictsOldest(t *testing.T) {
	l := executor.NewLocal[string](executor.LocalConfig{Replay: time.Hour, MaxReplay: 2})
	var calls atomic.Int32
	for _, k := range []string{"a", "b", "c"} {
		if _, err := l.Do(context.Background(), k, localCounted(&calls, k)); err != nil {
			t.Fatal(err)
		}
	}
	for _, k := range []string{"b", "c"} {
		if res, _ := l.Do(context.Background(), k, localCounted(&calls, k)); !res.Replayed || res.Value != k {
			t.Errorf("key %s: got %+v, want replayed", k, res)
		}
	}
	if res, _ := l.Do(context.Background(), "a", localCounted(&calls, "a")); res.Replayed {
		t.Errorf("key a: got %+v, want a new run (evicted as the oldest)", res)
	}
	if got := calls.Load(); got != 4 {
		t.Errorf("fn ran %d times, want 4", got)
	}
}

func TestLocalWaiterCancelled(t *testing.T) {
	l := executor.NewLocal[string](executor.LocalConfig{})
	release := make(chan struct{})
	fnErr := make(chan error, 1)
	fn := func(ctx context.Context) (string, error) {
		<-release
		fnErr <- ctx.Err()
		return "v", nil
	}

	var wg sync.WaitGroup
	var res [2]executor.LocalResult[string]
	var errs [2]error
	for i := range 2 {
		wg.Go(func() { res[i], errs[i] = l.Do(context.Background(), "k", fn) })
	}
	localWaitFor(t, "two callers to join", func() bool { return l.Waiting() == 2 })

	ctx, cancel := context.WithCancel(context.Background())
	gaveUp := make(chan error, 1)
	go func() {
		_, err := l.Do(ctx, "k", fn)
		gaveUp <- err
	}()
	localWaitFor(t, "the third caller to join", func() bool { return l.Waiting() == 3 })
	cancel()
	select {
	case err := <-gaveUp:
		if !errors.Is(err, context.Canceled) {
			t.Errorf("cancelled waiter: err = %v, want context.Canceled", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("cancelled waiter did not return while fn still ran")
	}

	close(release)
	wg.Wait()
	for i := range 2 {
		if errs[i] != nil || res[i].Value != "v" {
			t.Errorf("caller %d: got %+v, %v; want v", i, res[i], errs[i])
		}
	}
	if err := <-fnErr; err != nil {
		t.Errorf("fn's ctx.Err() = %v, want nil", err)
	}
}

type localCtxKey struct{}

func TestLocalLeaderLeavingDoesNotCancelFn(t *testing.T) {
	l := executor.NewLocal[string](executor.LocalConfig{})
	release := make(chan struct{})
	started := make(chan struct{})
	type seen struct {
		err   error
		value any
	}
	fnSaw := make(chan seen, 1)
	fn := func(ctx context.Context) (string, error) {
		close(started)
		<-release
		fnSaw <- seen{ctx.Err(), ctx.Value(localCtxKey{})}
		return "v", nil
	}

	ctx, cancel := context.WithCancel(context.WithValue(context.Background(), localCtxKey{}, "leader"))
	leaderErr := make(chan error, 1)
	go func() {
		res, err := l.Do(ctx, "k", fn)
		if err == nil {
			err = fmt.Errorf("leader got %+v, want an error", res)
		}
		leaderErr <- err
	}()
	<-started // the leader's call started the flight
	waiter := make(chan executor.LocalResult[string], 1)
	go func() {
		res, _ := l.Do(context.Background(), "k", fn)
		waiter <- res
	}()
	localWaitFor(t, "the waiter to join", func() bool { return l.Waiting() == 2 })

	cancel()
	if err := <-leaderErr; !errors.Is(err, context.Canceled) {
		t.Errorf("leader: err = %v, want context.Canceled", err)
	}
	close(release)
	if res := <-waiter; res.Value != "v" || res.Leader {
		t.Errorf("waiter: got %+v, want v as a follower", res)
	}
	s := <-fnSaw
	if s.err != nil {
		t.Errorf("fn's ctx.Err() = %v, want nil", s.err)
	}
	if s.value != "leader" {
		t.Errorf("fn's ctx value = %v, want the leader's value", s.value)
	}
}

func TestLocalDoneContextDoesNotStartFlight(t *testing.T) {
	l := executor.NewLocal[string](executor.LocalConfig{})
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	var calls atomic.Int32
	if _, err := l.Do(ctx, "k", localCounted(&calls, "v")); !errors.Is(err, context.Canceled) {
		t.Errorf("err = %v, want context.Canceled", err)
	}
	time.Sleep(10 * time.Millisecond)
	if got := calls.Load(); got != 0 {
		t.Errorf("fn ran %d times, want 0", got)
	}
}

// localDoRecovering runs n concurrent callers of fn on one key once all have joined, and returns
// what each recovered in its own goroutine (nil if it did not panic).
func localDoRecovering(t *testing.T, l *executor.Local[string], n int, fn func(context.Context) (string, error)) []any {
	t.Helper()
	release := make(chan struct{})
	gated := func(ctx context.Context) (string, error) {
		<-release
		return fn(ctx)
	}
	recovered := make([]any, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			defer func() { recovered[i] = recover() }()
			_, _ = l.Do(context.Background(), "k", gated)
		})
	}
	localWaitFor(t, "all callers to join", func() bool { return l.Waiting() == n })
	close(release)
	wg.Wait()
	return recovered
}

func TestLocalPanicDo(t *testing.T) {
	const n = 10
	l := executor.NewLocal[string](executor.LocalConfig{Replay: time.Hour})
	errOriginal := errors.New("original panic value")
	recovered := localDoRecovering(t, l, n, func(context.Context) (string, error) {
		localPanicInFn(errOriginal)
		return "", nil
	})
	for i, r := range recovered {
		pe, ok := r.(*executor.PanicError)
		if !ok {
			t.Errorf("caller %d recovered %T %v, want *executor.PanicError", i, r, r)
			continue
		}
		if pe.Value != errOriginal || !errors.Is(pe, errOriginal) {
			t.Errorf("caller %d: Value = %v, want the original value", i, pe.Value)
		}
		if !strings.Contains(pe.Error(), "localPanicInFn") {
			t.Errorf("caller %d: message lacks the original stack:\n%s", i, pe.Error())
		}
	}
	// The process survived; the key is usable again and the panic was not replayed.
	res, err := l.Do(context.Background(), "k", func(context.Context) (string, error) { return "v", nil })
	if err != nil || res.Value != "v" || res.Replayed {
		t.Errorf("after the panic: got %+v, %v; want a new run", res, err)
	}
}

//go:noinline
func localPanicInFn(v any) { panic(v) }

func TestLocalPanicNil(t *testing.T) {
	l := executor.NewLocal[string](executor.LocalConfig{})
	recovered := localDoRecovering(t, l, 2, func(context.Context) (string, error) {
		panic(nil)
	})
	for i, r := range recovered {
		pe, ok := r.(*executor.PanicError)
		if !ok {
			t.Fatalf("caller %d recovered %T %v, want *executor.PanicError", i, r, r)
		}
		var pn *runtime.PanicNilError
		if !errors.As(pe, &pn) {
			t.Errorf("caller %d: Value = %T, want *runtime.PanicNilError", i, pe.Value)
		}
	}
}

func TestLocalGoexitDo(t *testing.T) {
	const n = 10
	l := executor.NewLocal[string](executor.LocalConfig{Replay: time.Hour})
	recovered := localDoRecovering(t, l, n, func(context.Context) (string, error) {
		runtime.Goexit()
		return "", nil
	})
	for i, r := range recovered {
		pe, ok := r.(*executor.PanicError)
		if !ok {
			t.Errorf("caller %d recovered %T %v, want *executor.PanicError", i, r, r)
			continue
		}
		if !errors.Is(pe, executor.ErrGoexit) {
			t.Errorf("caller %d: Value = %v, want executor.ErrGoexit", i, pe.Value)
		}
		if !strings.Contains(pe.Error(), "runtime.Goexit") {
			t.Errorf("caller %d: message lacks the Goexit stack:\n%s", i, pe.Error())
		}
	}
	res, err := l.Do(context.Background(), "k", func(context.Context) (string, error) { return "v", nil })
	if err != nil || res.Value != "v" || res.Replayed {
		t.Errorf("after Goexit: got %+v, %v; want a new run", res, err)
	}
}

func TestLocalPanicAfterAllCallersLeft(t *testing.T) {
	l := executor.NewLocal[string](executor.LocalConfig{})
	release := make(chan struct{})
	done := make(chan struct{})
	ctx, cancel := context.WithCancel(context.Background())
	go func() {
		defer close(done)
		_, err := l.Do(ctx, "k", func(context.Context) (string, error) {
			<-release
			panic("nobody is listening")
		})
		if !errors.Is(err, context.Canceled) {
			t.Errorf("err = %v, want context.Canceled", err)
		}
	}()
	localWaitFor(t, "the caller to join", func() bool { return l.Waiting() == 1 })
	cancel()
	<-done
	close(release)
	// Had the panic been raised in a goroutine of Local's, the test binary would die here.
	// A call that still joins the ending flight recovers its panic and tries again.
	localWaitFor(t, "the flight to end", func() (ok bool) {
		defer func() {
			if r := recover(); r != nil {
				ok = false
			}
		}()
		res, err := l.Do(context.Background(), "k", func(context.Context) (string, error) { return "v", nil })
		return err == nil && res.Leader
	})
}

func TestLocalNoGoroutineLeak(t *testing.T) {
	before := runtime.NumGoroutine()

	l := executor.NewLocal[string](executor.LocalConfig{Replay: time.Hour, MaxReplay: 4})
	errBoom := errors.New("boom")
	var wg sync.WaitGroup
	for i := range 20 {
		key := fmt.Sprint("k", i%5)
		ctx, cancel := context.WithTimeout(context.Background(), time.Duration(i%3)*time.Millisecond)
		wg.Go(func() {
			defer cancel()
			defer func() { _ = recover() }()
			_, _ = l.Do(ctx, key, func(context.Context) (string, error) {
				time.Sleep(2 * time.Millisecond)
				switch i % 4 {
				case 0:
					return "", errBoom
				case 1:
					panic("boom")
				case 2:
					runtime.Goexit()
				}
				return "v", nil
			})
		})
		if i%7 == 0 {
			l.Forget(key)
		}
	}
	wg.Wait()

	deadline := time.Now().Add(5 * time.Second)
	for {
		after := runtime.NumGoroutine()
		if after <= before {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d goroutines before, %d after", before, after)
		}
		time.Sleep(5 * time.Millisecond)
	}
	if got := l.Waiting(); got != 0 {
		t.Errorf("Waiting() = %d, want 0", got)
	}
}

func TestNewLocalRejectsNegativeConfig(t *testing.T) {
	for _, cfg := range []executor.LocalConfig{{Replay: -time.Second}, {MaxReplay: -1}} {
		func() {
			defer func() {
				if recover() == nil {
					t.Errorf("NewLocal(%+v) did not panic", cfg)
				}
			}()
			executor.NewLocal[int](cfg)
		}()
	}
}
