package lua_test

import (
	"context"
	"errors"
	"fmt"
	"runtime"
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
// for about as many milliseconds as its first argument says, then returns 1; slowerr and
// slownil spin the same, then return an error reply and a nil reply.
const echoLib = `#!lua name=batchtest
redis.register_function('echo', function(keys, args) return args[1] end)
local function spin(ms)
  local t = redis.call('TIME')
  local stop = tonumber(t[1]) * 1000000 + tonumber(t[2]) + tonumber(ms) * 1000
  repeat t = redis.call('TIME') until tonumber(t[1]) * 1000000 + tonumber(t[2]) >= stop
end
redis.register_function('slow', function(keys, args) spin(args[1]); return 1 end)
redis.register_function('slowerr', function(keys, args) spin(args[1]); return redis.error_reply('STATE stale token') end)
redis.register_function('slownil', function(keys, args) spin(args[1]); return nil end)`

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

// TestBatcherRunsNoGoroutine: a batcher has no goroutine of its own; its callers send the
// pipelines, so an idle batcher costs nothing and a call finds no goroutine to wake.
func TestBatcherRunsNoGoroutine(t *testing.T) {
	r := redistest.New(t)
	before := runtime.NumGoroutine()
	b := lua.NewBatcher(r.Client)
	if d := runtime.NumGoroutine() - before; d > 0 {
		t.Errorf("NewBatcher started %d goroutines, want none", d)
	}
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
}

// TestBatcherCallsMadeTogetherShareOnePipeline: calls made together on an idle batcher leave
// in one pipeline, not the first alone and the rest in the next: the caller that finds the
// lane idle lets the goroutines ready to run queue their calls before it sends. One processor
// makes the order of the goroutines certain.
func TestBatcherCallsMadeTogetherShareOnePipeline(t *testing.T) {
	b, h, _ := newBatcher(t)
	ctx := context.Background()
	if err := b.FCall(ctx, "echo", nil, "warm").Err(); err != nil { // dials the connection
		t.Fatal(err)
	}
	prev := runtime.GOMAXPROCS(1)
	defer runtime.GOMAXPROCS(prev)
	const rounds, n = 20, 8
	before := h.pipelines.Load()
	for range rounds {
		start := make(chan struct{})
		errs := make(chan error, n)
		var wg sync.WaitGroup
		for i := range n {
			wg.Add(1)
			go func() {
				defer wg.Done()
				<-start
				if got, err := b.FCall(ctx, "echo", nil, strconv.Itoa(i)).Text(); err != nil || got != strconv.Itoa(i) {
					errs <- fmt.Errorf("call %d: %q, %v", i, got, err)
				}
			}()
		}
		runtime.Gosched() // let every caller reach <-start
		close(start)
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Error(err)
		}
	}
	// The scheduler now and then runs a yielding goroutine before the others (it looks at its
	// global queue first every 61st time), which splits a round in two; a sender that does
	// not yield splits every round, into 2 to 8 pipelines.
	if p := h.pipelines.Load() - before; p > rounds+rounds/4 {
		t.Errorf("%d rounds of %d calls made together went out in %d pipelines, want about %d", rounds, n, p, rounds)
	}
}

// TestBatcherSenderKeepsItsDeadline: the caller that sends a pipeline waits for it no longer
// than its deadline when it is the pipeline's only call, as a plain client call would: the
// pipeline carries the latest deadline of its calls.
func TestBatcherSenderKeepsItsDeadline(t *testing.T) {
	b := lua.NewBatcher(consumerClient(t))
	t.Cleanup(func() { _ = b.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	start := time.Now()
	err := b.FCall(ctx, "slow", nil, 1000).Err()
	if took := time.Since(start); took > 600*time.Millisecond {
		t.Errorf("a call with a 100 ms deadline that sent its own pipeline returned after %v", took)
	}
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("a call with a 100 ms deadline against a 1 s script: %v, want its deadline", err)
	}
}

// TestBatcherCloseWhileTheSenderYields: Close that runs while the caller that found the lane
// idle yields before sending fails that call with ErrBatcherClosed and returns; nothing hangs
// and nothing is answered twice. One processor puts Close in that window.
func TestBatcherCloseWhileTheSenderYields(t *testing.T) {
	_, _, rdb := newBatcher(t)
	prev := runtime.GOMAXPROCS(1)
	defer runtime.GOMAXPROCS(prev)
	for range 20 {
		b := lua.NewBatcher(rdb)
		called := make(chan error, 1)
		go func() { called <- b.FCall(context.Background(), "echo", nil, "x").Err() }()
		runtime.Gosched() // the caller runs until it yields
		closed := make(chan error, 1)
		go func() { closed <- b.Close() }()
		select {
		case err := <-closed:
			if err != nil {
				t.Fatal(err)
			}
		case <-time.After(5 * time.Second):
			t.Fatal("Close did not return while a sender yielded")
		}
		select {
		case err := <-called:
			if err != nil && !errors.Is(err, lua.ErrBatcherClosed) {
				t.Fatalf("the yielding caller got %v, want its reply or ErrBatcherClosed", err)
			}
		case <-time.After(5 * time.Second):
			t.Fatal("the yielding caller did not return")
		}
	}
}

// TestBatcherCloseWithCallsQueued: Close fails the calls queued behind the pipeline in flight
// and returns once that pipeline has, whose caller gets its reply; nothing hangs.
func TestBatcherCloseWithCallsQueued(t *testing.T) {
	b, _, _ := newBatcher(t)
	ctx := context.Background()
	slow := make(chan error, 1)
	go func() { slow <- b.FCall(ctx, "slow", nil, 300).Err() }()
	time.Sleep(50 * time.Millisecond)
	const n = 16
	errs := make(chan error, n)
	for i := range n {
		go func() { errs <- b.FCall(ctx, "echo", nil, "q"+strconv.Itoa(i)).Err() }()
	}
	time.Sleep(50 * time.Millisecond) // all queued behind the slow pipeline
	start := time.Now()
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	if took := time.Since(start); took < 100*time.Millisecond {
		t.Errorf("Close returned after %v, before the pipeline in flight (about 200 ms more)", took)
	}
	select {
	case err := <-slow:
		if err != nil {
			t.Errorf("the pipeline in flight at Close: %v, want its reply", err)
		}
	case <-time.After(5 * time.Second):
		t.Error("the caller of the pipeline in flight at Close still waits")
	}
	for range n {
		select {
		case err := <-errs:
			if !errors.Is(err, lua.ErrBatcherClosed) {
				t.Errorf("a call queued at Close: %v, want ErrBatcherClosed", err)
			}
		case <-time.After(5 * time.Second):
			t.Fatal("a call queued at Close still waits")
		}
	}
}

// TestBatcherCallersComeAndGo: many callers, many of whose deadlines end while they are
// queued, sending or handed the next pipeline, all return, every caller that waits gets its
// own reply, and the batcher still answers afterwards (no lane is left without a sender).
func TestBatcherCallersComeAndGo(t *testing.T) {
	b := lua.NewBatcher(consumerClient(t)) // closed below: a lane left busy would make Close hang
	// A round takes a fraction of a second; a lane left without a sender shows in one round
	// of a few, as the calls without a deadline (every fifth) then never return.
	for round := range 6 {
		if !comeAndGo(t, b, round) {
			break
		}
	}
	answersThenCloses(t, b, "after callers that came and went")
}

// comeAndGo runs one round of TestBatcherCallersComeAndGo and reports whether it ended well.
func comeAndGo(t *testing.T, b *lua.Batcher, round int) bool {
	t.Helper()
	const callers, calls = 32, 200
	var wg sync.WaitGroup
	var answered, cut atomic.Int64
	errs := make(chan error, callers)
	for g := range callers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range calls {
				want := fmt.Sprintf("%d-%d", g, i)
				ctx, cancel := context.WithTimeout(context.Background(), time.Duration((g*7+i*13+round*31)%400)*time.Microsecond)
				if i%5 == 0 {
					ctx, cancel = context.WithCancel(context.Background())
				}
				got, err := b.FCall(ctx, "echo", nil, want).Text()
				cancel()
				switch {
				case err == nil && got == want:
					answered.Add(1)
				case err == nil:
					errs <- fmt.Errorf("caller %d got %q, want %q", g, got, want)
					return
				case errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled):
					cut.Add(1)
				default:
					errs <- fmt.Errorf("caller %d: %v", g, err)
					return
				}
			}
		}()
	}
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Errorf("round %d: callers still wait after 10 s: a lane was left without a sender", round)
		return false
	}
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if answered.Load() == 0 || cut.Load() == 0 {
		t.Errorf("round %d: answered %d, cut short %d: want both kinds", round, answered.Load(), cut.Load())
	}
	return !t.Failed()
}
