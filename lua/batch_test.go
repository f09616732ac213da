package lua_test

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/flightdeck-ai/flightdeck/internal/testkit/redistest"
	"github.com/flightdeck-ai/flightdeck/lua"
)

// echoLib is a function library for the tests: echo returns its first argument; slow spins
// for about as many milliseconds as its first argument says.
const echoLib = `#!lua name=batchtest
redis.register_function('echo', function(keys, args) return args[1] end)
redis.register_function('slow', function(keys, args)
  local t = redis.call('TIME')
  local stop = tonumber(t[1]) * 1000000 + tonumber(t[2]) + tonumber(args[1]) * 1000
  repeat t = redis.call('TIME') until tonumber(t[1]) * 1000000 + tonumber(t[2]) >= stop
  return 1
end)`

// countingHook counts the pipelines and single commands a client sends.
type countingHook struct{ pipelines, singles atomic.Int64 }

func (h *countingHook) DialHook(next redis.DialHook) redis.DialHook { return next }
func (h *countingHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error { h.singles.Add(1); return next(ctx, cmd) }
}
func (h *countingHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error { h.pipelines.Add(1); return next(ctx, cmds) }
}

func newBatcher(t *testing.T) (*lua.Batcher, *countingHook, *redis.Client) {
	t.Helper()
	r := redistest.New(t)
	if err := r.Client.FunctionLoadReplace(context.Background(), echoLib).Err(); err != nil {
		t.Fatal(err)
	}
	c := redis.NewClient(r.Client.Options())
	h := &countingHook{}
	c.AddHook(h)
	t.Cleanup(func() { _ = c.Close() })
	b := lua.NewBatcher(c)
	t.Cleanup(func() { _ = b.Close() })
	return b, h, r.Client
}

// TestBatcherRepliesToEachCaller: concurrent calls each get their own reply, and they share
// pipelines (fewer pipelines than calls) while one is in flight.
func TestBatcherRepliesToEachCaller(t *testing.T) {
	b, h, _ := newBatcher(t)
	ctx := context.Background()
	// Keep a pipeline in flight while the others queue behind it.
	slow := make(chan error, 1)
	go func() { slow <- b.FCall(ctx, "slow", nil, 200).Err() }()
	time.Sleep(50 * time.Millisecond)
	const n = 64
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			got, err := b.FCall(ctx, "echo", nil, "v"+strconv.Itoa(i)).Text()
			if err != nil || got != "v"+strconv.Itoa(i) {
				errs <- fmt.Errorf("call %d: %q %v", i, got, err)
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if err := <-slow; err != nil {
		t.Fatal(err)
	}
	if p := h.pipelines.Load(); p >= n/2 {
		t.Errorf("%d calls behind a pipeline in flight went out in %d pipelines, want them to share", n, p)
	}
}

// TestBatcherHonoursTheCallersContext: a caller whose context ends stops waiting (the others
// still get their replies), and a call whose context ended before it left is not sent.
func TestBatcherHonoursTheCallersContext(t *testing.T) {
	b, _, _ := newBatcher(t)
	ctx := context.Background()
	slow := make(chan error, 1)
	go func() { slow <- b.FCall(ctx, "slow", nil, 2000).Err() }()
	time.Sleep(50 * time.Millisecond) // usually in flight by now; if not, both share a pipeline: same test
	short, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
	defer cancel()
	err := b.FCall(short, "echo", nil, "late").Err()
	select {
	case <-slow:
		t.Errorf("the call with a 50 ms deadline returned only after the 2 s pipeline: %v", err)
	default: // it gave up while the pipeline was still out: the order this test is about
	}
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("call with a 50 ms deadline behind a 2 s pipeline: %v, want its deadline", err)
	}
	if err := <-slow; err != nil {
		t.Errorf("the pipeline in flight: %v", err)
	}
	if got, err := b.FCall(ctx, "echo", nil, "next").Text(); err != nil || got != "next" {
		t.Errorf("next call: %q %v", got, err)
	}
}

// TestBatcherClose: calls after Close fail with ErrBatcherClosed instead of hanging.
func TestBatcherClose(t *testing.T) {
	b, _, _ := newBatcher(t)
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	if err := b.FCall(ctx, "echo", nil, "x").Err(); !errors.Is(err, lua.ErrBatcherClosed) {
		t.Errorf("call after Close: %v", err)
	}
}

// TestBatcherMergesLibraryCalls: concurrent calls of the flight library leave as one FCALL of
// its batch function per pipeline, each gets its own reply, and a call that raises an error
// gets that error while the calls beside it in the same FCALL get theirs.
func TestBatcherMergesLibraryCalls(t *testing.T) {
	// A private server: the FCALLs are counted, and a shared one counts other tests' too.
	rdb := redistest.Start(t, nil).Client()
	ctx := context.Background()
	if err := rdb.FunctionLoadReplace(ctx, echoLib).Err(); err != nil {
		t.Fatal(err)
	}
	if err := lua.EnsureLibrary(ctx, rdb); err != nil {
		t.Fatal(err)
	}
	c := redis.NewClient(rdb.Options())
	h := &countingHook{}
	c.AddHook(h)
	t.Cleanup(func() { _ = c.Close() })
	b := lua.NewBatcher(c)
	t.Cleanup(func() { _ = b.Close() })
	slow := make(chan error, 1)
	go func() { slow <- b.FCall(ctx, "slow", nil, 200).Err() }()
	time.Sleep(50 * time.Millisecond)
	fcalls0 := fcallCount(t, rdb)
	const n = 64
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			key := "merge-" + strconv.Itoa(i)
			if i == n/2 {
				// No keys: the start function fails reading its record.
				if err := lua.Start.RunVia(ctx, b, rdb, nil, "1").Err(); err == nil {
					errs <- fmt.Errorf("call %d without keys: no error", i)
				}
				return
			}
			got, err := lua.Start.RunVia(ctx, b, rdb, []string{key, key + ":w", key + ":f"}, "1").StringSlice()
			if err != nil || len(got) != 2 || got[0] != "GONE" {
				errs <- fmt.Errorf("call %d: %q %v", i, got, err)
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if err := <-slow; err != nil {
		t.Fatal(err)
	}
	if p := h.pipelines.Load(); p >= n/2 {
		t.Errorf("%d calls went out in %d pipelines, want them to share", n, p)
	}
	if f := fcallCount(t, rdb) - fcalls0; f >= n/2 {
		t.Errorf("%d library calls took %d FCALLs, want them merged", n, f)
	}
}

// fcallCount is how many FCALLs Redis ran so far.
func fcallCount(t *testing.T, rdb *redis.Client) int64 {
	t.Helper()
	n, err := redistest.InfoNumber(context.Background(), rdb, "commandstats", "cmdstat_fcall", "calls")
	if err != nil {
		t.Fatal(err)
	}
	return int64(n)
}
