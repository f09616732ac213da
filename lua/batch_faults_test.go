package lua_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/flightdeck-ai/flightdeck/internal/testkit/redistest"
	"github.com/flightdeck-ai/flightdeck/lua"
)

// consumerClient returns a client with echoLib loaded, set up as the consumer's clients are:
// context deadlines bound its reads and writes (ContextTimeoutEnabled).
func consumerClient(t *testing.T, hooks ...redis.Hook) *redis.Client {
	t.Helper()
	r := redistest.New(t)
	if err := r.Client.FunctionLoadReplace(context.Background(), echoLib).Err(); err != nil {
		t.Fatal(err)
	}
	opt := *r.Client.Options()
	opt.ContextTimeoutEnabled = true
	c := redis.NewClient(&opt)
	for _, h := range hooks {
		c.AddHook(h)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// panicHook panics in the next pipeline once armed.
type panicHook struct{ armed atomic.Bool }

func (h *panicHook) DialHook(next redis.DialHook) redis.DialHook          { return next }
func (h *panicHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook { return next }
func (h *panicHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		if h.armed.CompareAndSwap(true, false) {
			panic("hook panicked")
		}
		return next(ctx, cmds)
	}
}

// TestBatcherSenderPanicReleasesTheLane: a panic while a caller sends a pipeline goes up that
// caller's stack (a handler's recovers it), and the lane does not stay busy without a sender:
// the next call is answered and Close returns.
func TestBatcherSenderPanicReleasesTheLane(t *testing.T) {
	h := &panicHook{}
	b := lua.NewBatcher(consumerClient(t, h))
	h.armed.Store(true)
	panicked := func() (p any) {
		defer func() { p = recover() }() // as the handlers' guard does
		b.FCall(context.Background(), "echo", nil, "x")
		return nil
	}()
	if panicked == nil {
		t.Error("the sender's panic did not reach its caller")
	}
	answersThenCloses(t, b, "after a recovered panic in a sender")
}

// answersThenCloses checks that b answers a call within 5 s and then closes within 5 s, as a
// batcher does whose lanes were left with a sender or idle; when says what came before.
func answersThenCloses(t *testing.T, b *lua.Batcher, when string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if got, err := b.FCall(ctx, "echo", nil, "after").Text(); err != nil || got != "after" {
		t.Errorf("a call %s: %q %v (a lane left busy without a sender?)", when, got, err)
	}
	closed := make(chan struct{})
	go func() { _ = b.Close(); close(closed) }()
	select {
	case <-closed:
	case <-time.After(5 * time.Second):
		t.Errorf("Close still waits 5 s %s", when)
	}
}

// TestBatcherAnswerReadAfterTheDeadline: a call handed the lane sends its pipeline beside a
// call without a deadline, so the pipeline runs past the sender's deadline. What Redis
// answered, an error reply or a nil reply too, is still the sender's reply.
func TestBatcherAnswerReadAfterTheDeadline(t *testing.T) {
	b := lua.NewBatcher(consumerClient(t))
	t.Cleanup(func() { _ = b.Close() })
	bg := context.Background()
	for _, fn := range []string{"slow", "slowerr", "slownil"} {
		first := make(chan error, 1)
		go func() { first <- b.FCall(bg, "slow", nil, 150).Err() }()
		time.Sleep(30 * time.Millisecond)
		ctx, cancel := context.WithTimeout(bg, 250*time.Millisecond)
		res := make(chan error, 1)
		go func() { res <- b.FCall(ctx, fn, nil, 300).Err() }() // handed the lane next
		time.Sleep(20 * time.Millisecond)
		other := make(chan error, 1)
		go func() { other <- b.FCall(bg, "echo", nil, "o").Err() }() // no deadline: the pipeline has none
		err := <-res
		cancel()
		switch fn {
		case "slow":
			if err != nil {
				t.Errorf("%s: %v, want the reply read after the deadline", fn, err)
			}
		case "slowerr":
			if err == nil || !strings.Contains(err.Error(), "stale token") {
				t.Errorf("%s: %v, want the script's error reply", fn, err)
			}
		case "slownil":
			if !errors.Is(err, redis.Nil) {
				t.Errorf("%s: %v, want the script's nil reply", fn, err)
			}
		}
		<-first
		<-other
	}
}

// TestBatcherWaiterCutByItsDeadline: a caller waiting in someone else's pipeline that its own
// deadline (the latest of the pipeline's) cut short gets DeadlineExceeded, as the sender does,
// not the client's i/o timeout, whichever of its reply and its deadline it sees first.
func TestBatcherWaiterCutByItsDeadline(t *testing.T) {
	prev := runtime.GOMAXPROCS(1) // the reply and the deadline come close together more often
	defer runtime.GOMAXPROCS(prev)
	b := lua.NewBatcher(consumerClient(t))
	t.Cleanup(func() { _ = b.Close() })
	bg := context.Background()
	for i := range 8 {
		// The first call spins 150 ms, so that the sender and the waiter queue behind it and
		// leave in one pipeline, even when their goroutines start late under load.
		first := make(chan error, 1)
		go func() { first <- b.FCall(bg, "slow", nil, 150).Err() }()
		time.Sleep(10 * time.Millisecond)
		// Deadlines well past the first call's end, so that the sender's call is still live when
		// the lane is handed to it and goes out: a call whose deadline ended before is not sent,
		// and the waiter's would then leave alone and be answered.
		sctx, scancel := context.WithTimeout(bg, 300*time.Millisecond)
		sent := make(chan error, 1)
		go func() { sent <- b.FCall(sctx, "slow", nil, 800).Err() }() // handed the lane next
		time.Sleep(5 * time.Millisecond)
		wctx, wcancel := context.WithTimeout(bg, 400*time.Millisecond)
		werr := b.FCall(wctx, "echo", nil, "w").Err() // waits in that pipeline
		serr := <-sent
		<-first
		scancel()
		wcancel()
		if !errors.Is(werr, context.DeadlineExceeded) || !errors.Is(serr, context.DeadlineExceeded) {
			t.Errorf("round %d: waiter %v, sender %v; want both DeadlineExceeded", i, werr, serr)
		}
		time.Sleep(800 * time.Millisecond) // the slow script ends
	}
}

// TestBatcherMoreThanABatchQueued: 300 calls queued behind a pipeline in flight, more than one
// pipeline carries, all get their own replies (those whose deadline ended, theirs); then Close
// with 300 queued fails them all and returns after the pipeline in flight.
func TestBatcherMoreThanABatchQueued(t *testing.T) {
	b := lua.NewBatcher(consumerClient(t))
	bg := context.Background()
	for phase := range 2 {
		first := make(chan error, 1)
		go func() { first <- b.FCall(bg, "slow", nil, 150).Err() }()
		time.Sleep(30 * time.Millisecond)
		const n = 300
		var wg sync.WaitGroup
		for i := range n {
			wg.Add(1)
			go func() {
				defer wg.Done()
				ctx, cancel := context.WithCancel(bg)
				if i%7 == 0 {
					ctx, cancel = context.WithTimeout(bg, time.Duration(100+i)*time.Millisecond)
				}
				defer cancel()
				want := fmt.Sprint(i)
				got, err := b.FCall(ctx, "echo", nil, want).Text()
				switch {
				case errors.Is(err, context.DeadlineExceeded):
				case phase == 0 && err == nil && got == want:
				case phase == 1 && errors.Is(err, lua.ErrBatcherClosed):
				default:
					t.Errorf("phase %d, call %d: %q %v", phase, i, got, err)
				}
			}()
		}
		time.Sleep(60 * time.Millisecond)
		if phase == 1 {
			start := time.Now()
			if err := b.Close(); err != nil {
				t.Fatal(err)
			}
			if took := time.Since(start); took < 20*time.Millisecond {
				t.Errorf("Close returned after %v, before the pipeline in flight (about 60 ms more)", took)
			}
		}
		if err := <-first; err != nil {
			t.Errorf("phase %d: the pipeline in flight: %v", phase, err)
		}
		wg.Wait()
	}
}

// TestBatcherCloseUnderLoad: callers on both lanes with tiny, missing or cancelled deadlines,
// and Close at a random moment: every caller returns, each reply is its own, Close returns.
func TestBatcherCloseUnderLoad(t *testing.T) {
	c := consumerClient(t)
	for round := range 10 {
		b := lua.NewBatcher(c)
		var wg sync.WaitGroup
		stop := time.Now().Add(time.Duration(100+rand.IntN(200)) * time.Millisecond)
		for g := range 48 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := 0; ; i++ {
					want := fmt.Sprintf("%d-%d-%d", round, g, i)
					ctx, cancel := context.WithTimeout(context.Background(), time.Duration(rand.IntN(600))*time.Microsecond)
					if i%4 == 0 {
						ctx, cancel = context.WithCancel(context.Background())
						if rand.IntN(3) == 0 {
							go func() { time.Sleep(time.Duration(rand.IntN(300)) * time.Microsecond); cancel() }()
						}
					}
					var got string
					var err error
					if g%3 == 0 {
						cmd, _, _ := b.FCallReplicated(ctx, time.Millisecond, "echo", nil, want)
						got, err = cmd.Text()
					} else {
						got, err = b.FCall(ctx, "echo", nil, want).Text()
					}
					cancel()
					switch {
					case err == nil && got != want:
						t.Errorf("round %d: got %q, want %q", round, got, want)
					case err == nil, errors.Is(err, context.DeadlineExceeded), errors.Is(err, context.Canceled):
					case errors.Is(err, lua.ErrBatcherClosed):
						return
					default:
						t.Errorf("round %d: %v", round, err)
					}
				}
			}()
		}
		time.Sleep(time.Until(stop))
		closed := make(chan struct{})
		go func() { _ = b.Close(); close(closed) }()
		done := make(chan struct{})
		go func() { wg.Wait(); close(done) }()
		for _, w := range []struct {
			ch   chan struct{}
			what string
		}{{done, "callers"}, {closed, "Close"}} {
			select {
			case <-w.ch:
			case <-time.After(10 * time.Second):
				t.Fatalf("round %d: %s still wait after 10 s", round, w.what)
			}
		}
	}
}
