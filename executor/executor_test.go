package executor_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"
	"github.com/rs/zerolog"

	"github.com/flightdeck-ai/flightdeck/executor"
	"github.com/flightdeck-ai/flightdeck/flight"
	"github.com/flightdeck-ai/flightdeck/internal/redisconn"
	"github.com/flightdeck-ai/flightdeck/internal/testkit/flighttest"
	"github.com/flightdeck-ai/flightdeck/internal/testkit/redistest"
	"github.com/flightdeck-ai/flightdeck/lua"
	"github.com/flightdeck-ai/flightdeck/topics"
)

const stage = "interview-evaluation"

// counter is a go-redis hook that counts the commands a client sends, and apart its GETRANGEs:
// a follower's look at the flight's record, once it listens for the owner's event.
type counter struct{ n, hgets atomic.Int64 }

func (c *counter) DialHook(next redis.DialHook) redis.DialHook { return next }
func (c *counter) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		c.n.Add(1)
		if cmd.Name() == "getrange" {
			c.hgets.Add(1)
		}
		return next(ctx, cmd)
	}
}
func (c *counter) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error { c.n.Add(int64(len(cmds))); return next(ctx, cmds) }
}

// syncBuf is a goroutine-safe log sink.
type syncBuf struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuf) Write(p []byte) (int, error) { s.mu.Lock(); defer s.mu.Unlock(); return s.b.Write(p) }
func (s *syncBuf) String() string              { s.mu.Lock(); defer s.mu.Unlock(); return s.b.String() }

// node is one executor with its own client, log and metrics on a private Redis.
type node struct {
	e    *executor.Executor
	cmds *counter
	log  *syncBuf
	reg  *prometheus.Registry
}

func newNode(t *testing.T, srv *redistest.Server, prefix, name string, opt executor.StageOptions) *node {
	t.Helper()
	rdb := redisconn.NewClient(&redis.Options{Addr: srv.Addr(), MaxRetries: -1, DialTimeout: 200 * time.Millisecond})
	t.Cleanup(func() { _ = rdb.Close() })
	n := &node{cmds: &counter{}, log: &syncBuf{}, reg: prometheus.NewRegistry()}
	rdb.AddHook(n.cmds)
	coord, err := flight.NewCoordinator(flight.Config{Client: rdb, Keyspace: topics.Keyspace{Prefix: prefix}})
	if err != nil {
		t.Fatal(err)
	}
	log := zerolog.New(n.log)
	e, err := executor.New(executor.Config{Coordinator: coord, NodeID: name,
		Stages:        map[string]executor.StageOptions{stage: opt},
		Breaker:       executor.BreakerConfig{FailureThreshold: 3, OpenTimeout: 300 * time.Millisecond, Jitter: time.Millisecond},
		SpoolDir:      filepath.Join(t.TempDir(), "spool"),
		FlushInterval: 100 * time.Millisecond, Logger: &log, Registry: n.reg})
	if err != nil {
		t.Fatal(err)
	}
	e.Start(context.Background())
	t.Cleanup(func() { _ = e.Close() })
	n.e = e
	return n
}

// metric returns the value of a counter or gauge with the given stage label (summed).
func (n *node) metric(t *testing.T, name string) float64 {
	t.Helper()
	mfs, err := n.reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	sum := 0.0
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			if m.Counter != nil {
				sum += m.Counter.GetValue()
			}
			if m.Gauge != nil {
				sum += m.Gauge.GetValue()
			}
		}
	}
	return sum
}

func fastPolicy() executor.StageOptions {
	return executor.StageOptions{Policy: flight.Policy{Lease: time.Second, RunningTTL: 10 * time.Second, MaxAttempts: 1},
		HeartbeatInterval: 100 * time.Millisecond, Budget: executor.Budget{Coordination: 200 * time.Millisecond}}
}

// burst runs n concurrent Do calls on key and returns their results; fn counts its runs.
func burst(t *testing.T, e *executor.Executor, n int, key string, fn executor.Fn) []executor.Result {
	t.Helper()
	results := make([]executor.Result, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() { defer wg.Done(); results[i], errs[i] = e.Do(context.Background(), stage, key, fn) }()
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Fatalf("call %d: %v", i, err)
		}
	}
	return results
}

func slowFn(runs *atomic.Int64, d time.Duration, v string) executor.Fn {
	return func(ctx context.Context, progress func()) ([]byte, error) {
		runs.Add(1)
		select {
		case <-time.After(d):
		case <-ctx.Done():
			return nil, ctx.Err()
		}
		return []byte(v), nil
	}
}

// TestHybridKeepsWorkingWhileRedisIsDown: 50 concurrent identical calls run the function once
// while Redis is up and once per process while it is down; a log line and a metric say so.
func TestHybridKeepsWorkingWhileRedisIsDown(t *testing.T) {
	srv := redistest.Start(t, nil)
	n := newNode(t, srv, redistest.Prefix(), "n1", fastPolicy())
	var runs atomic.Int64
	res := burst(t, n.e, 50, "k-up", slowFn(&runs, 100*time.Millisecond, `"up"`))
	shared := map[topics.Shared]int{}
	for _, r := range res {
		shared[r.Shared]++
	}
	if runs.Load() != 1 || shared[topics.SharedOwner] != 1 || shared[topics.SharedFollower] != 49 {
		t.Fatalf("Redis up: %d runs, shared %v", runs.Load(), shared)
	}

	srv.Stop()
	runs.Store(0)
	res = burst(t, n.e, 50, "k-down", slowFn(&runs, 100*time.Millisecond, `"down"`))
	if runs.Load() != 1 {
		t.Errorf("Redis down: %d runs of 50 identical calls, want 1", runs.Load())
	}
	for _, r := range res {
		if r.Shared != topics.SharedLocal || string(r.Value) != `"down"` {
			t.Fatalf("Redis down: %+v", r)
		}
	}
	if !strings.Contains(n.log.String(), "node degraded to in-process single-flight") {
		t.Errorf("no degraded log line:\n%s", n.log.String())
	}
	if n.metric(t, "singleflight_degraded") != 1 || n.metric(t, "singleflight_local_fallback_total") < 1 ||
		n.metric(t, "singleflight_fallback_execution_total") != 1 {
		t.Errorf("metrics: degraded %v, local_fallback %v, fallback_execution %v", n.metric(t, "singleflight_degraded"),
			n.metric(t, "singleflight_local_fallback_total"), n.metric(t, "singleflight_fallback_execution_total"))
	}
}

// TestDistributedOnlyFailsFast: with Redis stopped, or paused so that connections hang,
// DISTRIBUTED_ONLY answers ErrCoordinationUnavailable within the coordination budget.
func TestDistributedOnlyFailsFast(t *testing.T) {
	for _, fault := range []string{"stopped", "paused"} {
		t.Run(fault, func(t *testing.T) {
			srv := redistest.Start(t, nil)
			opt := fastPolicy()
			opt.Mode = executor.ModeDistributedOnly
			n := newNode(t, srv, redistest.Prefix(), "n1", opt)
			var runs atomic.Int64
			if _, err := n.e.Do(context.Background(), stage, "warm", slowFn(&runs, 0, "1")); err != nil {
				t.Fatal(err) // connections are open before the fault
			}
			if fault == "stopped" {
				srv.Stop()
			} else {
				srv.Pause()
				defer srv.Resume()
			}
			// The caller's own deadline is ten budgets away, and below the client's 3 s read
			// timeout: failing fast means the budget, not either of those, ends the call.
			ctx, cancel := context.WithTimeout(context.Background(), 10*opt.Budget.Coordination)
			defer cancel()
			_, err := n.e.Do(ctx, stage, "k", slowFn(&runs, 0, "1"))
			if !errors.Is(err, flight.ErrCoordinationUnavailable) || ctx.Err() != nil {
				t.Fatalf("err = %v (caller's context: %v), want ErrCoordinationUnavailable within the coordination budget %v",
					err, ctx.Err(), opt.Budget.Coordination)
			}
			if runs.Load() != 1 {
				t.Errorf("the function ran %d times", runs.Load())
			}
		})
	}
}

func TestBypassRunsEveryCall(t *testing.T) {
	srv := redistest.Start(t, nil)
	opt := fastPolicy()
	opt.Mode = executor.ModeBypass
	opt.DegradedConcurrency = 50
	n := newNode(t, srv, redistest.Prefix(), "n1", opt)
	var runs atomic.Int64
	before := n.cmds.n.Load()
	burst(t, n.e, 20, "k", slowFn(&runs, 20*time.Millisecond, "1"))
	if runs.Load() != 20 {
		t.Errorf("%d runs of 20 calls", runs.Load())
	}
	if n.cmds.n.Load() != before {
		t.Errorf("BYPASS sent %d Redis commands", n.cmds.n.Load()-before)
	}
}

func TestLocalOnly(t *testing.T) {
	srv := redistest.Start(t, nil)
	opt := fastPolicy()
	opt.Mode = executor.ModeLocalOnly
	n := newNode(t, srv, redistest.Prefix(), "n1", opt)
	var runs atomic.Int64
	before := n.cmds.n.Load()
	res := burst(t, n.e, 30, "k", slowFn(&runs, 50*time.Millisecond, "1"))
	if runs.Load() != 1 || res[0].Shared != topics.SharedLocal || n.cmds.n.Load() != before {
		t.Errorf("runs %d, shared %s, commands %d", runs.Load(), res[0].Shared, n.cmds.n.Load()-before)
	}
}

// TestBreaker: once the breaker opens no command reaches Redis; after Redis restarts, half-open
// probes close it and calls are coordinated again.
func TestBreaker(t *testing.T) {
	srv := redistest.Start(t, nil)
	n := newNode(t, srv, redistest.Prefix(), "n1", fastPolicy())
	var runs atomic.Int64
	fn := slowFn(&runs, 0, `"v"`)
	srv.Stop()
	for i := 0; n.metric(t, "singleflight_circuit_open_total") == 0; i++ {
		if i > 20 {
			t.Fatal("breaker did not open")
		}
		if _, err := n.e.Do(context.Background(), stage, fmt.Sprint("trip-", i), fn); err != nil {
			t.Fatal(err)
		}
	}
	sent := n.cmds.n.Load()
	for i := range 20 {
		r, err := n.e.Do(context.Background(), stage, fmt.Sprint("open-", i), fn)
		if err != nil || r.Shared != topics.SharedLocal {
			t.Fatalf("call while open: %+v %v", r, err)
		}
	}
	if d := n.cmds.n.Load() - sent; d != 0 {
		t.Errorf("%d commands reached the client while the breaker was open", d)
	}
	srv.Restart()
	deadline := time.Now().Add(5 * time.Second)
	for i := 0; ; i++ {
		r, err := n.e.Do(context.Background(), stage, fmt.Sprint("back-", i), fn)
		if err != nil {
			t.Fatal(err)
		}
		// Coordinated again, and the half-open probes closed the breaker.
		if r.Shared == topics.SharedOwner && n.metric(t, "singleflight_breaker_state") == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("calls were not coordinated again after Redis restarted (last %s, breaker %v)",
				r.Shared, n.metric(t, "singleflight_breaker_state"))
		}
		time.Sleep(50 * time.Millisecond)
	}
	if n.metric(t, "singleflight_breaker_state") != 0 {
		t.Errorf("breaker state %v, want closed", n.metric(t, "singleflight_breaker_state"))
	}
	if n.metric(t, "singleflight_degraded") != 0 {
		t.Error("still degraded after coordinating again")
	}
}

// TestModelErrorNeverRerunLocally: a model failure fails the flight; it is not run again in
// degraded mode, also when recording the failure itself fails because Redis went away.
func TestModelErrorNeverRerunLocally(t *testing.T) {
	srv := redistest.Start(t, nil)
	n := newNode(t, srv, redistest.Prefix(), "n1", fastPolicy())
	var runs atomic.Int64
	boom := errors.New("model said no")
	_, err := n.e.Do(context.Background(), stage, "k1", func(context.Context, func()) ([]byte, error) {
		runs.Add(1)
		return nil, boom
	})
	if !errors.Is(err, boom) || runs.Load() != 1 {
		t.Fatalf("err %v runs %d", err, runs.Load())
	}
	// The flight remembers the failure: a second call does not run the model either.
	if _, err := n.e.Do(context.Background(), stage, "k1", slowFn(&runs, 0, "x")); !errors.Is(err, flight.ErrFailed) || runs.Load() != 1 {
		t.Fatalf("second call: err %v runs %d", err, runs.Load())
	}
	// Redis dies during the run; the failure cannot be recorded; still no local re-run.
	_, err = n.e.Do(context.Background(), stage, "k2", func(context.Context, func()) ([]byte, error) {
		runs.Add(1)
		srv.Stop()
		return nil, boom
	})
	if !errors.Is(err, boom) || runs.Load() != 2 {
		t.Fatalf("err %v runs %d", err, runs.Load())
	}
}

// TestUncertainOutcome: the model answered, the result write failed because Redis died: the
// value reaches every local waiter, is spooled, and is written back after the restart; the
// function ran once.
func TestUncertainOutcome(t *testing.T) {
	srv := redistest.Start(t, nil)
	prefix := redistest.Prefix()
	n := newNode(t, srv, prefix, "n1", fastPolicy())
	var runs atomic.Int64
	res := burst(t, n.e, 10, "k", func(ctx context.Context, _ func()) ([]byte, error) {
		runs.Add(1)
		time.Sleep(50 * time.Millisecond) // let the other nine join
		srv.Stop()
		return []byte(`{"score":9}`), nil
	})
	for _, r := range res {
		if string(r.Value) != `{"score":9}` || !r.Uncertain {
			t.Fatalf("result %+v", r)
		}
	}
	if n.e.Spooled() != 1 || n.metric(t, "singleflight_result_write_failure_total") != 1 {
		t.Fatalf("spooled %d, write failures %v", n.e.Spooled(), n.metric(t, "singleflight_result_write_failure_total"))
	}
	srv.Restart() // without persistence: the flight is gone, only the spool has the result
	deadline := time.Now().Add(10 * time.Second)
	for n.e.Spooled() > 0 {
		if time.Now().After(deadline) {
			t.Fatal("the spool was not written back")
		}
		time.Sleep(50 * time.Millisecond)
	}
	c, _ := flight.NewCoordinator(flight.Config{Client: srv.Client(), Keyspace: topics.Keyspace{Prefix: prefix}})
	d, err := c.Acquire(context.Background(), flight.AcquireParams{Key: "k", OwnerID: "other", WantResult: true})
	if err != nil || d.Action != flight.ActionResultHit || string(d.Result) != `{"score":9}` {
		t.Fatalf("after write-back: %+v %v", d, err)
	}
	if runs.Load() != 1 {
		t.Errorf("the function ran %d times", runs.Load())
	}
}

// TestStalledProgressIsTakenOver: an owner whose heartbeat is fresh but whose function stopped
// reporting progress loses the flight once the stall timeout passes: its run is aborted, the
// next attempt (on either node) produces the result, and both nodes get that one result.
func TestStalledProgressIsTakenOver(t *testing.T) {
	srv := redistest.Start(t, nil)
	prefix := redistest.Prefix()
	opt := fastPolicy()
	opt.Policy.StallTimeout = 400 * time.Millisecond
	opt.Policy.MaxAttempts = 3
	opt.WaitTimeout = 200 * time.Millisecond
	a := newNode(t, srv, prefix, "a", opt)
	b := newNode(t, srv, prefix, "b", opt)
	var first atomic.Bool
	var later atomic.Int64
	stuck := make(chan struct{})
	aborted := make(chan time.Time, 1)
	fn := func(name string) executor.Fn {
		return func(ctx context.Context, progress func()) ([]byte, error) {
			if first.CompareAndSwap(false, true) {
				progress()
				close(stuck)
				<-ctx.Done() // hangs without progress, heartbeat still fresh
				aborted <- time.Now()
				return nil, ctx.Err()
			}
			later.Add(1)
			return []byte(`"` + name + `"`), nil
		}
	}
	var aRes executor.Result
	var aErr error
	done := make(chan struct{})
	go func() { defer close(done); aRes, aErr = a.e.Do(context.Background(), stage, "k", fn("a")) }()
	<-stuck
	start := time.Now()
	bRes, bErr := b.e.Do(context.Background(), stage, "k", fn("b"))
	<-done
	if aErr != nil || bErr != nil || string(aRes.Value) != string(bRes.Value) || len(aRes.Value) == 0 {
		t.Fatalf("a: %+v %v; b: %+v %v", aRes, aErr, bRes, bErr)
	}
	if at := <-aborted; at.Sub(start) < 300*time.Millisecond {
		t.Errorf("stalled run aborted after %v, before the stall timeout", at.Sub(start))
	}
	if later.Load() != 1 {
		t.Errorf("%d runs after the stalled one, want 1", later.Load())
	}
}

// TestWaiterLeavesOnContext: an in-process follower whose context ends returns at once.
func TestWaiterLeavesOnContext(t *testing.T) {
	srv := redistest.Start(t, nil)
	n := newNode(t, srv, redistest.Prefix(), "n1", fastPolicy())
	started, release := make(chan struct{}), make(chan struct{})
	leader := make(chan error, 1)
	go func() {
		_, err := n.e.Do(context.Background(), stage, "k", func(context.Context, func()) ([]byte, error) {
			close(started)
			<-release
			return []byte("1"), nil
		})
		leader <- err
	}()
	<-started
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	var runs atomic.Int64
	if _, err := n.e.Do(ctx, stage, "k", slowFn(&runs, 0, "2")); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("err %v", err)
	}
	select {
	case err := <-leader:
		t.Errorf("the waiter left only after the run it waited for ended (%v)", err)
	default: // it left while the run still went on
	}
	close(release)
	if err := <-leader; err != nil || runs.Load() != 0 {
		t.Errorf("the leader: %v; the waiter's function ran %d times", err, runs.Load())
	}
}

// TestCrossNodeFollower: a follower on another node is woken by the owner's event through the
// result dispatcher and gets the owner's value without running the function.
func TestCrossNodeFollower(t *testing.T) {
	srv := redistest.Start(t, nil)
	prefix := redistest.Prefix()
	opt := fastPolicy()
	// The event, not the timeout, must wake the follower: its wait would outlast the test's
	// deadline.
	opt.WaitTimeout = 10 * time.Minute
	opt.Policy.Lease = 10 * time.Minute
	opt.HeartbeatInterval = time.Second
	a := newNode(t, srv, prefix, "a", opt)
	b := newNode(t, srv, prefix, "b", opt)
	var runs atomic.Int64
	started, release := make(chan struct{}), make(chan struct{})
	go func() {
		_, _ = a.e.Do(context.Background(), stage, "k", func(context.Context, func()) ([]byte, error) {
			runs.Add(1)
			close(started)
			<-release
			return []byte(`"a"`), nil
		})
	}()
	<-started
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	got := make(chan error, 1)
	var r executor.Result
	go func() {
		var err error
		r, err = b.e.Do(ctx, stage, "k", slowFn(&runs, 0, `"b"`))
		got <- err
	}()
	// b follows: it listens for the owner's event, then looks at the flight's status.
	for b.cmds.hgets.Load() == 0 {
		if ctx.Err() != nil {
			t.Fatal("b never followed the flight")
		}
		time.Sleep(5 * time.Millisecond)
	}
	close(release)
	if err := <-got; err != nil || string(r.Value) != `"a"` || runs.Load() != 1 {
		t.Fatalf("b: %+v %v runs %d (a context error: the owner's event did not wake the follower)", r, err, runs.Load())
	}
}

// TestMaxWaiters: past MaxWaiters in-process followers, Do answers ErrTooManyWaiters instead
// of queueing without bound, and never runs the function for it.
func TestMaxWaiters(t *testing.T) {
	srv := redistest.Start(t, nil)
	prefix := redistest.Prefix()
	a := newNode(t, srv, prefix, "a", fastPolicy())
	rdb := redisconn.NewClient(&redis.Options{Addr: srv.Addr()})
	t.Cleanup(func() { _ = rdb.Close() })
	coord, _ := flight.NewCoordinator(flight.Config{Client: rdb, Keyspace: topics.Keyspace{Prefix: prefix}})
	opt := fastPolicy()
	opt.WaitTimeout = 5 * time.Second
	b, err := executor.New(executor.Config{Coordinator: coord, NodeID: "b", MaxWaiters: 2,
		Stages: map[string]executor.StageOptions{stage: opt}, SpoolDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	b.Start(context.Background())
	t.Cleanup(func() { _ = b.Close() })
	var runs atomic.Int64
	for i := range 3 { // node a owns three slow flights
		go func() {
			_, _ = a.e.Do(context.Background(), stage, fmt.Sprint("w", i), slowFn(&runs, time.Second, "1"))
		}()
	}
	time.Sleep(100 * time.Millisecond)
	errs := make(chan error, 3)
	for i := range 3 {
		go func() {
			_, err := b.Do(context.Background(), stage, fmt.Sprint("w", i), slowFn(&runs, 0, "2"))
			errs <- err
		}()
		time.Sleep(30 * time.Millisecond)
	}
	var refused, ok int
	for range 3 {
		switch err := <-errs; {
		case errors.Is(err, flight.ErrTooManyWaiters):
			refused++
		case err == nil:
			ok++
		default:
			t.Errorf("err %v", err)
		}
	}
	if refused != 1 || ok != 2 || runs.Load() != 3 {
		t.Errorf("refused %d, ok %d, runs %d; want 1, 2, 3", refused, ok, runs.Load())
	}
}

// streamTasks parks stream tasks on a flight the way consumers do: entries of the stage's task
// stream, read by consumer c1, acquired as followers.
type streamTasks struct {
	t   *testing.T
	rdb *redis.Client
	ks  topics.Keyspace
	c   *flight.Coordinator
}

func newStreamTasks(t *testing.T, srv *redistest.Server, prefix string) *streamTasks {
	t.Helper()
	ks := topics.Keyspace{Prefix: prefix}
	c, err := flight.NewCoordinator(flight.Config{Client: srv.Client(), Keyspace: ks})
	if err != nil {
		t.Fatal(err)
	}
	if err := srv.Client().XGroupCreateMkStream(context.Background(), ks.Tasks(stage), topics.ConsumerGroup, "$").Err(); err != nil {
		t.Fatal(err)
	}
	return &streamTasks{t: t, rdb: srv.Client(), ks: ks, c: c}
}

// park enqueues task id, reads it as c1 and acquires key for it; it must end parked.
func (s *streamTasks) park(key, id string) flight.Task {
	s.t.Helper()
	ctx := context.Background()
	stream := s.ks.Tasks(stage)
	s.rdb.XAdd(ctx, &redis.XAddArgs{Stream: stream, Values: []any{"task", id}})
	res, err := s.rdb.XReadGroup(ctx, &redis.XReadGroupArgs{Group: topics.ConsumerGroup, Consumer: "c1",
		Streams: []string{stream, ">"}, Count: 1, Block: -1}).Result()
	if err != nil {
		s.t.Fatal(err)
	}
	tk := flight.Task{ID: id, Stream: stream, Entry: res[0].Messages[0].ID}
	d, err := s.c.Acquire(ctx, flight.AcquireParams{Key: key, OwnerID: "consumer", Task: tk, Stage: stage, Tenant: "t"})
	if err != nil || d.Reason != flight.ReasonParked {
		s.t.Fatalf("park %s: %+v %v", id, d, err)
	}
	return tk
}

// answered returns the events of task id and whether its entry is still pending.
func (s *streamTasks) answered(tk flight.Task) ([]topics.Event, bool) {
	s.t.Helper()
	ctx := context.Background()
	msgs, _ := s.rdb.XRange(ctx, s.ks.Results(stage), "-", "+").Result()
	var out []topics.Event
	for _, m := range msgs {
		p, _ := m.Values[topics.FieldPayload].(string)
		if ev, err := topics.DecodeEvent([]byte(p)); err == nil && ev.TaskID == tk.ID {
			out = append(out, ev)
		}
	}
	p, _ := s.rdb.XPendingExt(ctx, &redis.XPendingExtArgs{Stream: tk.Stream, Group: topics.ConsumerGroup,
		Start: tk.Entry, End: tk.Entry, Count: 1}).Result()
	return out, len(p) > 0
}

// TestExecutorAnswersParkedStreamTasks: in-process callers and stream tasks share keys; whatever
// path the executor's call takes, the stream tasks parked on the key are answered and their
// entries acknowledged.
func TestExecutorAnswersParkedStreamTasks(t *testing.T) {
	srv := redistest.Start(t, nil)
	prefix := redistest.Prefix()
	n := newNode(t, srv, prefix, "n1", fastPolicy())
	s := newStreamTasks(t, srv, prefix)
	ctx := context.Background()
	var runs atomic.Int64

	t.Run("Owner", func(t *testing.T) {
		hold := make(chan struct{})
		done := make(chan error, 1)
		go func() {
			_, err := n.e.Do(ctx, stage, "own", func(ctx context.Context, _ func()) ([]byte, error) {
				<-hold
				return []byte(`"mine"`), nil
			})
			done <- err
		}()
		for s.rdb.Exists(ctx, s.ks.Flight("own")).Val() == 0 {
			time.Sleep(5 * time.Millisecond)
		}
		tk := s.park("own", "stream-own")
		close(hold)
		if err := <-done; err != nil {
			t.Fatal(err)
		}
		if ev, pending := s.answered(tk); len(ev) != 1 || pending || string(ev[0].Result) != `"mine"` {
			t.Errorf("parked task: %+v pending %v", ev, pending)
		}
	})
	// A flight that ended while tasks stayed parked (their answerer crashed): the executor's
	// acquire answers them on each final path.
	for _, c := range []struct {
		name   string
		end    func(key string, o flight.Ownership)
		status topics.Status
		check  func(err error) bool
	}{
		{"ResultHit", func(key string, o flight.Ownership) {
			set(t, s.rdb, s.ks.Flight(key), "status", "SUCCEEDED", "inline", "1", "result", `"r"`)
		}, topics.StatusSucceeded, func(err error) bool { return err == nil }},
		{"FailedFinal", func(key string, o flight.Ownership) {
			set(t, s.rdb, s.ks.Flight(key), "status", "FAILED", "retryable", "", "errorCode", "400")
		}, topics.StatusFailed, func(err error) bool { return errors.Is(err, flight.ErrFailed) }},
		{"Cancelled", func(key string, o flight.Ownership) {
			set(t, s.rdb, s.ks.Flight(key), "status", "CANCELLED", "error", "stop")
		}, topics.StatusCancelled, func(err error) bool { return errors.Is(err, flight.ErrCancelled) }},
		{"Expired", func(key string, o flight.Ownership) {
			set(t, s.rdb, s.ks.Flight(key), "status", "EXPIRED", "attempts", "9", "errorCode", "lease_lost")
		}, topics.StatusExpired, func(err error) bool { return errors.Is(err, flight.ErrExpired) }},
	} {
		t.Run(c.name, func(t *testing.T) {
			key := "end-" + c.name
			d, err := s.c.Acquire(ctx, flight.AcquireParams{Key: key, OwnerID: "x", Stage: stage, Start: true,
				Policy: flight.Policy{Lease: time.Hour, RunningTTL: time.Hour}})
			if err != nil {
				t.Fatal(err)
			}
			tk := s.park(key, "stream-"+c.name)
			c.end(key, *d.Owner)
			_, err = n.e.Do(ctx, stage, key, slowFn(&runs, 0, `"never"`))
			if !c.check(err) {
				t.Errorf("Do: %v", err)
			}
			ev, pending := s.answered(tk)
			if len(ev) != 1 || ev[0].Status != c.status || pending {
				t.Errorf("parked task: %+v pending %v", ev, pending)
			}
		})
	}
	if runs.Load() != 0 {
		t.Errorf("the function ran %d times on ended flights", runs.Load())
	}
}

// TestExecutorCompleteRefusedIsNotSuccess: a run whose flight expired for good (answered as
// EXPIRED to everybody) or was cancelled returns that outcome, not its own value.
func TestExecutorCompleteRefusedIsNotSuccess(t *testing.T) {
	srv := redistest.Start(t, nil)
	prefix := redistest.Prefix()
	n := newNode(t, srv, prefix, "n1", fastPolicy())
	s := newStreamTasks(t, srv, prefix)
	ctx := context.Background()
	for _, c := range []struct {
		name string
		end  func(key string)
		want error
	}{
		{"ExpiredForGood", func(key string) {
			set(t, s.rdb, s.ks.Flight(key), "expireAt", "1", "attempts", "9")
			if d, _ := s.c.Acquire(ctx, flight.AcquireParams{Key: key, OwnerID: "y", Stage: stage}); d.Action != flight.ActionExpired {
				t.Fatalf("expire: %+v", d)
			}
		}, flight.ErrExpired},
		{"Cancelled", func(key string) {
			if _, err := s.c.Cancel(ctx, key, "stop", flight.CancelParams{Stage: stage}); err != nil {
				t.Fatal(err)
			}
		}, flight.ErrCancelled},
	} {
		t.Run(c.name, func(t *testing.T) {
			key := "refused-" + c.name
			_, err := n.e.Do(ctx, stage, key, func(context.Context, func()) ([]byte, error) {
				c.end(key)
				return []byte(`"late"`), nil
			})
			if !errors.Is(err, c.want) {
				t.Errorf("Do = %v, want %v", err, c.want)
			}
			if _, err := s.c.Result(ctx, key); !errors.Is(err, flight.ErrNotFound) {
				t.Errorf("the refused result was stored: %v", err)
			}
		})
	}
}

// dropReply loses the reply of the first complete script it sees: the script ran, the caller
// gets a connection error, as when a connection breaks after Redis executed the command.
type dropReply struct {
	dropped atomic.Bool
	fn      string
}

func (d *dropReply) DialHook(next redis.DialHook) redis.DialHook { return next }
func (d *dropReply) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		err := next(ctx, cmd)
		if args := cmd.Args(); len(args) > 1 && (args[1] == d.fn) && d.dropped.CompareAndSwap(false, true) {
			cmd.SetErr(io.ErrUnexpectedEOF)
			return io.ErrUnexpectedEOF
		}
		return err
	}
}
func (d *dropReply) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

// TestExecutorLostCompleteReply: the reply of a complete that Redis executed is lost; the
// value is spooled, the write-back is accepted as the same outcome, the parked stream task is
// answered and the function ran once.
func TestExecutorLostCompleteReply(t *testing.T) {
	srv := redistest.Start(t, nil)
	prefix := redistest.Prefix()
	s := newStreamTasks(t, srv, prefix)
	rdb := redisconn.NewClient(&redis.Options{Addr: srv.Addr(), MaxRetries: -1})
	t.Cleanup(func() { _ = rdb.Close() })
	rdb.AddHook(&dropReply{fn: lua.Complete.Name()})
	coord, _ := flight.NewCoordinator(flight.Config{Client: rdb, Keyspace: topics.Keyspace{Prefix: prefix}, AnswerAfterScript: true})
	e, err := executor.New(executor.Config{Coordinator: coord, NodeID: "n1",
		Stages: map[string]executor.StageOptions{stage: fastPolicy()}, SpoolDir: t.TempDir(), FlushInterval: 50 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	e.Start(context.Background())
	t.Cleanup(func() { _ = e.Close() })
	ctx := context.Background()
	var runs atomic.Int64
	var tk flight.Task
	r, err := e.Do(ctx, stage, "lost", func(context.Context, func()) ([]byte, error) {
		runs.Add(1)
		tk = s.park("lost", "stream-lost")
		return []byte(`"v"`), nil
	})
	if err != nil || !r.Uncertain || string(r.Value) != `"v"` {
		t.Fatalf("Do = %+v %v", r, err)
	}
	deadline := time.Now().Add(5 * time.Second)
	for {
		ev, pending := s.answered(tk)
		if len(ev) >= 1 && !pending && e.Spooled() == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("parked task not answered after the lost reply: %+v pending %v spooled %d", ev, pending, e.Spooled())
		}
		time.Sleep(20 * time.Millisecond)
	}
	if runs.Load() != 1 {
		t.Errorf("ran %d times", runs.Load())
	}
}

// TestPanicFailsTheFlight: fn panicking as the fleet's owner fails the flight for good at
// once (a second node's caller gets the failure and runs nothing, well inside the lease), and
// every caller of the run panics with the *PanicError.
func TestPanicFailsTheFlight(t *testing.T) {
	srv := redistest.Start(t, nil)
	prefix := redistest.Prefix()
	opt := fastPolicy()
	opt.Policy.Lease, opt.Policy.MaxAttempts = 5*time.Second, 3
	opt.HeartbeatInterval = time.Second
	n1, n2 := newNode(t, srv, prefix, "n1", opt), newNode(t, srv, prefix, "n2", opt)
	var runs atomic.Int64
	recovered := make(chan any, 3)
	var wg sync.WaitGroup
	for range 3 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer func() { recovered <- recover() }()
			_, _ = n1.e.Do(context.Background(), stage, "k", func(context.Context, func()) ([]byte, error) {
				runs.Add(1)
				time.Sleep(50 * time.Millisecond)
				panic("fn blew up")
			})
		}()
	}
	wg.Wait()
	close(recovered)
	for r := range recovered {
		if pe, ok := r.(*executor.PanicError); !ok || pe.Value != "fn blew up" || len(pe.Stack) == 0 {
			t.Errorf("a caller recovered %T %v, want the *executor.PanicError", r, r)
		}
	}
	start := time.Now()
	_, err := n2.e.Do(context.Background(), stage, "k", slowFn(&runs, 0, "x"))
	var oe *flight.OutcomeError
	if !errors.As(err, &oe) || oe.Status != flight.StatusFailed || oe.Type != "panic" || !strings.Contains(oe.Message, "fn blew up") {
		t.Errorf("the other node's call: %v, want the flight's final panic failure", err)
	}
	if d := time.Since(start); d > 2*time.Second {
		t.Errorf("answered after %v: the panic cost a lease", d)
	}
	if n := runs.Load(); n != 1 {
		t.Errorf("fn ran %d times, want 1", n)
	}
	if !strings.Contains(n1.log.String(), "the call panicked") {
		t.Errorf("no panic line in the owner's log:\n%s", n1.log.String())
	}
}

// TestExecutorLimiter: two keys' calls on a limiter of one call a second: the second waits
// for the budget in place and runs; the calls' reported usage is charged to the limiter.
func TestExecutorLimiter(t *testing.T) {
	srv := redistest.Start(t, nil)
	opt := fastPolicy()
	opt.Policy.Lease, opt.HeartbeatInterval = 3*time.Second, 200*time.Millisecond
	opt.Limiter, opt.Limit = "exec", &flight.Limit{RequestsPerMinute: 60, Burst: time.Second}
	n := newNode(t, srv, redistest.Prefix(), "n1", opt)
	fn := func(ctx context.Context, _ func()) ([]byte, error) {
		flight.ReportUsage(ctx, flight.Usage{PromptTokens: 10, CompletionTokens: 5})
		return []byte(`"ok"`), nil
	}
	start := time.Now()
	for _, key := range []string{"k1", "k2"} {
		if res, err := n.e.Do(context.Background(), stage, key, fn); err != nil || string(res.Value) != `"ok"` {
			t.Fatalf("%s: %+v %v", key, res, err)
		}
	}
	if d := time.Since(start); d < 700*time.Millisecond {
		t.Errorf("two calls in %v on a limiter of one a second", d)
	}
}

// set sets fields of a flight's record, as flighttest.Set does.
func set(t *testing.T, rdb redis.Cmdable, key string, kv ...string) {
	t.Helper()
	if err := flighttest.Set(context.Background(), rdb, key, kv...); err != nil {
		t.Fatal(err)
	}
}
