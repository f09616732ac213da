package handlers_test

// Benchmarks behind docs/BENCHMARKS.md (end to end through in-process consumers). Every
// Flightdeck figure has its bare watermill-redisstream twin in the same benchmark run: the same
// number of consumers with the same number of subscribers each, on the same Redis, with a
// handler that only acks (or, for the model-latency row, one that runs the same model on every
// task). They run only with -bench; see docs/BENCHMARKS.md for the commands.

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill-redisstream/pkg/redisstream"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/redis/go-redis/v9"
	"github.com/rs/zerolog"

	"github.com/flightdeck-ai/flightdeck/handlers"
	"github.com/flightdeck-ai/flightdeck/handlers/model"
	"github.com/flightdeck-ai/flightdeck/internal/redisconn"
	"github.com/flightdeck-ai/flightdeck/internal/testkit/redistest"
	"github.com/flightdeck-ai/flightdeck/topics"
)

const (
	repStage = "interview-evaluation"
	// repSubs is the number of subscribers of every consumer, Flightdeck and bare alike.
	repSubs = 8
)

// repQuiet drops go-redis's internal log lines (reconnects while a consumer shuts down),
// which would otherwise split benchmark result lines.
type repQuiet struct{}

func (repQuiet) Printf(context.Context, string, ...any) {}

// repClock matches task ids to the time they were enqueued and records the latency of the
// first terminal event (or bare handler call) of each.
type repClock struct {
	mu     sync.Mutex
	sent   map[string]time.Time
	lat    []time.Duration
	byID   map[string]time.Duration // kept only when non-nil
	shared map[topics.Shared]int
	notify chan struct{}
}

func newRepClock() *repClock {
	return &repClock{sent: map[string]time.Time{}, shared: map[topics.Shared]int{}, notify: make(chan struct{}, 1)}
}

// sending registers ids as enqueued now; call it just before the XADDs are sent.
func (c *repClock) sending(ids []string) {
	now := time.Now()
	c.mu.Lock()
	for _, id := range ids {
		c.sent[id] = now
	}
	c.mu.Unlock()
}

// finished records id's end at t (the first end only).
func (c *repClock) finished(id string, shared topics.Shared, t time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	at, ok := c.sent[id]
	if !ok {
		return
	}
	delete(c.sent, id)
	c.lat = append(c.lat, t.Sub(at))
	if c.byID != nil {
		c.byID[id] = t.Sub(at)
	}
	c.shared[shared]++
	if len(c.sent) == 0 {
		select {
		case c.notify <- struct{}{}:
		default:
		}
	}
}

// wait blocks until every registered id finished.
func (c *repClock) wait(tb testing.TB, timeout time.Duration) {
	tb.Helper()
	deadline := time.After(timeout)
	for {
		c.mu.Lock()
		left := len(c.sent)
		c.mu.Unlock()
		if left == 0 {
			return
		}
		select {
		case <-c.notify:
		case <-time.After(50 * time.Millisecond): // the notify may predate the last check
		case <-deadline:
			tb.Fatalf("stalled: %d tasks without an end after %v", left, timeout)
		}
	}
}

// report adds p50-ms and p99-ms of the recorded latencies, and the share of follower and hit
// events when there are any.
func (c *repClock) report(b *testing.B) {
	c.mu.Lock()
	defer c.mu.Unlock()
	b.ReportMetric(repPercentile(c.lat, 50).Seconds()*1e3, "p50-ms")
	b.ReportMetric(repPercentile(c.lat, 99).Seconds()*1e3, "p99-ms")
	if n := len(c.lat); n > 0 && len(c.shared) > 1 {
		b.ReportMetric(float64(c.shared[topics.SharedFollower])/float64(n), "follower-frac")
		b.ReportMetric(float64(c.shared[topics.SharedHit])/float64(n), "hit-frac")
	}
}

func repPercentile(d []time.Duration, p float64) time.Duration {
	if len(d) == 0 {
		return 0
	}
	s := slices.Clone(d)
	slices.Sort(s)
	i := int(math.Ceil(p/100*float64(len(s)))) - 1
	return s[max(i, 0)]
}

// repInput is the task input of key k in run run; latencyMs > 0 asks the sim model to sleep.
func repInput(run, k, latencyMs int) json.RawMessage {
	if latencyMs > 0 {
		return json.RawMessage(fmt.Sprintf(`{"run":%d,"k":%d,"sim":{"latencyMs":%d}}`, run, k, latencyMs))
	}
	return json.RawMessage(fmt.Sprintf(`{"run":%d,"k":%d}`, run, k))
}

// repEnqueue appends tasks first..first+n-1 of run (task i has key i/perKey: the duplicates of
// a key arrive together) in pipelines of 500, registering each with clock just before its
// pipeline is sent. The watermill uuid field is the task id, so a bare handler knows it too.
func repEnqueue(tb testing.TB, rdb *redis.Client, ks topics.Keyspace, clock *repClock, run, first, n, perKey, latencyMs int) {
	tb.Helper()
	ctx := context.Background()
	for start := first; start < first+n; start += 500 {
		end := min(start+500, first+n)
		ids := make([]string, 0, end-start)
		payloads := make([][]byte, 0, end-start)
		for i := start; i < end; i++ {
			id := "r" + strconv.Itoa(run) + "-t" + strconv.Itoa(i)
			p, err := json.Marshal(topics.Task{TaskID: id, Stage: repStage, Tenant: "bench", Input: repInput(run, i/perKey, latencyMs)})
			if err != nil {
				tb.Fatal(err)
			}
			ids = append(ids, id)
			payloads = append(payloads, p)
		}
		clock.sending(ids)
		_, err := rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
			for j, id := range ids {
				p.XAdd(ctx, &redis.XAddArgs{Stream: ks.Tasks(repStage), Values: []any{topics.FieldUUID, id, topics.FieldPayload, payloads[j]}})
			}
			return nil
		})
		if err != nil {
			tb.Fatal(err)
		}
	}
}

// repReadEvents reads the stage's result stream of ks from the start until ctx ends and calls
// seen for every event with the time its XREAD returned (taken before decoding, so that a
// large batch does not delay its own timestamps).
func repReadEvents(ctx context.Context, rdb redis.UniversalClient, ks topics.Keyspace, seen func(id string, shared topics.Shared, at time.Time)) {
	stream, last := ks.Results(repStage), "0"
	for ctx.Err() == nil {
		res, err := rdb.XRead(ctx, &redis.XReadArgs{Streams: []string{stream, last}, Count: 5000, Block: 100 * time.Millisecond}).Result()
		now := time.Now()
		if err != nil {
			continue
		}
		for _, xs := range res {
			for _, m := range xs.Messages {
				last = m.ID
				p, _ := m.Values[topics.FieldPayload].(string)
				var ev struct {
					TaskID string        `json:"taskId"`
					Shared topics.Shared `json:"shared"`
				}
				if json.Unmarshal([]byte(p), &ev) == nil {
					seen(ev.TaskID, ev.Shared, now)
				}
			}
		}
	}
}

// repFlightdeck starts n in-process consumers (each with its own clients and name, repSubs
// subscribers) on ks with model m, and a reader that feeds every terminal event to clock.
// The returned function stops them all.
func repFlightdeck(tb testing.TB, r *redistest.Target, ks topics.Keyspace, n int, m model.Model, clock *repClock) func() {
	tb.Helper()
	stages, err := handlers.LoadStages("", []string{repStage})
	if err != nil {
		tb.Fatal(err)
	}
	stages[0].Concurrency = repSubs
	stages[0].MaxParked = 20000
	log := zerolog.Nop()
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	for i := range n {
		name := "rep" + strconv.Itoa(i)
		c, err := handlers.NewConsumer(handlers.Config{NewClient: redisconn.Factory(r.Client.Options()), Keyspace: ks,
			Name: name, Stages: stages, Models: map[string]model.Model{"sim": m}, Logger: &log,
			SpoolDir: tb.TempDir()})
		if err != nil {
			tb.Fatal(err)
		}
		done := make(chan error, 1)
		wg.Add(1)
		go func() { defer wg.Done(); done <- c.Run(ctx) }()
		select {
		case <-c.Started():
		case err := <-done:
			tb.Fatalf("consumer %s: %v", name, err)
		}
	}
	if clock != nil {
		rdb := redisconn.NewClient(r.Client.Options())
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer rdb.Close()
			repReadEvents(ctx, rdb, ks, clock.finished)
		}()
	}
	return func() { cancel(); wg.Wait() }
}

// repBare starts n bare watermill-redisstream routers on ks, each with repSubs subscribers
// (each with its own client) in the consumer group, calling handle on every message and
// acking it.
func repBare(tb testing.TB, r *redistest.Target, ks topics.Keyspace, n int, handle func(*message.Message)) func() {
	tb.Helper()
	var routers []*message.Router
	var wg sync.WaitGroup
	for i := range n {
		router, err := message.NewRouter(message.RouterConfig{}, nil)
		if err != nil {
			tb.Fatal(err)
		}
		for j := range repSubs {
			sub, err := redisstream.NewSubscriber(redisstream.SubscriberConfig{
				Client: redisconn.NewClient(r.Client.Options()), Consumer: fmt.Sprintf("bare%d/%d", i, j),
				ConsumerGroup: topics.ConsumerGroup, DisableIndefiniteInitialBlock: true}, nil)
			if err != nil {
				tb.Fatal(err)
			}
			router.AddNoPublisherHandler(fmt.Sprintf("h%d", j), ks.Tasks(repStage), sub,
				func(m *message.Message) error { handle(m); return nil })
		}
		wg.Add(1)
		go func() { defer wg.Done(); _ = router.Run(context.Background()) }()
		<-router.Running()
		routers = append(routers, router)
	}
	return func() {
		for _, rt := range routers {
			_ = rt.Close()
		}
		wg.Wait()
	}
}

// repCountingSim is the zero-latency sim model that counts its runs.
func repCountingSim(runs *atomic.Int64) *model.Sim {
	return &model.Sim{OnRun: func(model.Request) { runs.Add(1) }}
}

// repBurstRun measures tasks/s and enqueue-to-end latency of bursts of perOp tasks (each op
// one burst, fresh keys per op) through n consumers of impl: "flightdeck" (sim model),
// "bare" (no-op handler) or "bare-model" (a handler that runs the same sim model).
func repBurstRun(b *testing.B, r *redistest.Target, n int, impl string, perKey, perOp, latencyMs int) {
	ks := topics.Keyspace{Prefix: redistest.Prefix()}
	clock := newRepClock()
	var runs atomic.Int64
	sim := repCountingSim(&runs)
	var stop func()
	switch impl {
	case "flightdeck":
		stop = repFlightdeck(b, r, ks, n, sim, clock)
	case "bare":
		stop = repBare(b, r, ks, n, func(m *message.Message) { clock.finished(m.UUID, "", time.Now()) })
	case "bare-model":
		stop = repBare(b, r, ks, n, func(m *message.Message) {
			var t topics.Task
			if err := json.Unmarshal(m.Payload, &t); err == nil {
				_, _ = sim.Call(m.Context(), model.Request{Stage: t.Stage, TaskID: t.TaskID, Tenant: t.Tenant, Input: t.Input}, nil)
			}
			clock.finished(m.UUID, "", time.Now())
		})
	default:
		b.Fatalf("impl %q", impl)
	}
	defer stop()
	run := 0
	b.ResetTimer()
	for range b.N {
		run++
		repEnqueue(b, r.Client, ks, clock, run, 0, perOp, perKey, latencyMs)
		clock.wait(b, 2*time.Minute)
	}
	b.StopTimer()
	b.ReportMetric(float64(b.N*perOp)/b.Elapsed().Seconds(), "tasks/s")
	clock.report(b)
	if impl != "bare" {
		b.ReportMetric(float64(runs.Load())/float64(b.N*perOp), "runs/task")
	}
}

// BenchmarkReportThroughput: bursts of 1,000 tasks (unique keys, or 10 tasks per key arriving
// together) through 1, 2 and 4 in-process consumers of 8 subscribers each, zero-latency sim
// model, beside the same number of bare watermill consumers with a no-op handler. Reports
// tasks/s and enqueue-to-terminal-event latency (p50, p99) under the burst.
func BenchmarkReportThroughput(b *testing.B) {
	redis.SetLogger(repQuiet{})
	r := redistest.New(b)
	for _, n := range []int{1, 2, 4} {
		for _, load := range []struct {
			name   string
			perKey int
		}{{"unique", 1}, {"dup10", 10}} {
			for _, impl := range []string{"flightdeck", "bare"} {
				b.Run(fmt.Sprintf("consumers=%d/load=%s/impl=%s", n, load.name, impl), func(b *testing.B) {
					repBurstRun(b, r, n, impl, load.perKey, 1000, 0)
				})
			}
		}
	}
}

// BenchmarkReportModelLatency: the same as BenchmarkReportThroughput with one consumer and a
// sim model that takes 50 ms, bursts of 400 tasks; beside a bare consumer with a no-op handler
// and a bare consumer whose handler runs the same 50 ms model on every task.
func BenchmarkReportModelLatency(b *testing.B) {
	redis.SetLogger(repQuiet{})
	r := redistest.New(b)
	for _, load := range []struct {
		name   string
		perKey int
	}{{"unique", 1}, {"dup10", 10}} {
		for _, impl := range []string{"flightdeck", "bare", "bare-model"} {
			b.Run(fmt.Sprintf("consumers=1/load=%s/impl=%s", load.name, impl), func(b *testing.B) {
				repBurstRun(b, r, 1, impl, load.perKey, 400, 50)
			})
		}
	}
}

// repRate is the offered load of BenchmarkReportLatency, tasks per second.
const repRate = 1000

// BenchmarkReportLatency: enqueue-to-terminal-event latency at a steady 1,000 tasks/s (well
// below every configuration's capacity), one op per task, through 1, 2 and 4 consumers,
// beside the bare consumers. ns/op is suppressed: it is the pacing interval.
func BenchmarkReportLatency(b *testing.B) {
	redis.SetLogger(repQuiet{})
	r := redistest.New(b)
	for _, n := range []int{1, 2, 4} {
		for _, load := range []struct {
			name   string
			perKey int
		}{{"unique", 1}, {"dup10", 10}} {
			for _, impl := range []string{"flightdeck", "bare"} {
				b.Run(fmt.Sprintf("consumers=%d/load=%s/impl=%s", n, load.name, impl), func(b *testing.B) {
					ks := topics.Keyspace{Prefix: redistest.Prefix()}
					clock := newRepClock()
					var runs atomic.Int64
					var stop func()
					if impl == "flightdeck" {
						stop = repFlightdeck(b, r, ks, n, repCountingSim(&runs), clock)
					} else {
						stop = repBare(b, r, ks, n, func(m *message.Message) { clock.finished(m.UUID, "", time.Now()) })
					}
					defer stop()
					b.ResetTimer()
					repSteady(b, r.Client, ks, clock, load.perKey)
				})
			}
		}
	}
}

// repGate is a model whose calls block until released; started receives each call's task id.
type repGate struct {
	started chan string
	release chan struct{}
}

func (g *repGate) Name() string { return "sim" }

func (g *repGate) Call(ctx context.Context, req model.Request, _ model.ProgressFunc) (json.RawMessage, error) {
	select {
	case g.started <- req.TaskID:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	select {
	case <-g.release:
		return json.RawMessage(`{"answer":"gated"}`), nil
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// repWaitParked waits until n follower tasks of the flight of key are parked (a parked task
// is a field of the flight's waiters hash, "<entry id> <stream>" -> "<parked at> <task id>",
// and its entry stays pending under the group's parking consumer). owners is the number of
// entries the owners hold; it is kept for the callers' sake. It answers the parked task ids.
func repWaitParked(tb testing.TB, rdb *redis.Client, ks topics.Keyspace, key string, n, owners int64) []string {
	tb.Helper()
	_ = owners
	ctx := context.Background()
	deadline := time.Now().Add(time.Minute)
	for {
		parked, err := rdb.HLen(ctx, ks.Waiters(key)).Result()
		if err != nil {
			tb.Fatal(err)
		}
		if parked >= n {
			break
		}
		if time.Now().After(deadline) {
			tb.Fatalf("%d of %d followers parked", parked, n)
		}
		time.Sleep(time.Millisecond)
	}
	vals, err := rdb.HVals(ctx, ks.Waiters(key)).Result()
	if err != nil {
		tb.Fatal(err)
	}
	ids := make([]string, 0, len(vals))
	for _, v := range vals {
		if _, id, ok := strings.Cut(v, " "); ok {
			ids = append(ids, id)
		}
	}
	return ids
}

// repKey is the flight key of the task of key k in run run.
func repKey(tb testing.TB, run, k int) string {
	key, err := handlers.TaskKey(topics.Task{Stage: repStage, Tenant: "bench", Input: repInput(run, k, 0)})
	if err != nil {
		tb.Fatal(err)
	}
	return key
}

// BenchmarkReportFollowerNotify: one consumer; an owner task whose model blocks, P follower
// tasks of its key parked on the flight; then the model returns. Measured at a client reading
// the result stream: follower event arrival minus the owner's own event arrival (notify-*),
// and model return to the owner's event (owner-event-µs); unparked/op counts the followers
// that were not parked when the model returned. The bare twin is one watermill
// delivery hop (XADD to a bare subscriber's handler), the unit of any stream notification.
func BenchmarkReportFollowerNotify(b *testing.B) {
	redis.SetLogger(repQuiet{})
	r := redistest.New(b)
	for _, parked := range []int{1, 10, 100, 1000} {
		b.Run(fmt.Sprintf("parked=%d/impl=flightdeck", parked), func(b *testing.B) {
			ks := topics.Keyspace{Prefix: redistest.Prefix()}
			gate := &repGate{started: make(chan string, 1), release: make(chan struct{})}
			var mu sync.Mutex
			arrived := map[string]time.Time{}
			evCh := make(chan struct{}, 1)
			stop := repFlightdeck(b, r, ks, 1, gate, nil)
			defer stop()
			rdb := redisconn.NewClient(r.Client.Options())
			defer rdb.Close()
			rctx, rcancel := context.WithCancel(context.Background())
			readerDone := make(chan struct{})
			go func() {
				defer close(readerDone)
				repReadEvents(rctx, rdb, ks, func(id string, _ topics.Shared, at time.Time) {
					mu.Lock()
					arrived[id] = at
					mu.Unlock()
					select {
					case evCh <- struct{}{}:
					default:
					}
				})
			}()
			defer func() { rcancel(); <-readerDone }()
			var notify, last []time.Duration
			var ownerEv []time.Duration
			var unparked float64
			for run := range b.N {
				clock := newRepClock() // only to stamp ids; ends are read from arrived
				repEnqueue(b, r.Client, ks, clock, run, 0, 1, 1, 0)
				<-gate.started
				owner := "r" + strconv.Itoa(run) + "-t0"
				for i := 1; i <= parked; i++ { // followers: the same input as the owner's
					id := "r" + strconv.Itoa(run) + "-f" + strconv.Itoa(i)
					p, _ := json.Marshal(topics.Task{TaskID: id, Stage: repStage, Tenant: "bench", Input: repInput(run, 0, 0)})
					if err := r.Client.XAdd(context.Background(), &redis.XAddArgs{Stream: ks.Tasks(repStage),
						Values: []any{topics.FieldUUID, id, topics.FieldPayload, p}}).Err(); err != nil {
						b.Fatal(err)
					}
				}
				ids := repWaitParked(b, r.Client, ks, repKey(b, run, 0), int64(parked), 1)
				unparked += float64(parked - len(ids))
				released := time.Now()
				gate.release <- struct{}{}
				for {
					mu.Lock()
					n := 0
					for _, id := range append(ids, owner) {
						if _, ok := arrived[id]; ok {
							n++
						}
					}
					mu.Unlock()
					if n == len(ids)+1 {
						break
					}
					select {
					case <-evCh:
					case <-time.After(10 * time.Millisecond):
					}
				}
				mu.Lock()
				o := arrived[owner]
				ownerEv = append(ownerEv, o.Sub(released))
				var worst time.Duration
				for _, id := range ids {
					d := arrived[id].Sub(o)
					notify = append(notify, d)
					worst = max(worst, d)
				}
				last = append(last, worst)
				mu.Unlock()
			}
			b.ReportMetric(0, "ns/op")
			b.ReportMetric(float64(repPercentile(notify, 50).Microseconds()), "notify-p50-µs")
			b.ReportMetric(float64(repPercentile(notify, 99).Microseconds()), "notify-p99-µs")
			b.ReportMetric(float64(repPercentile(last, 50).Microseconds()), "notify-last-µs")
			b.ReportMetric(float64(repPercentile(ownerEv, 50).Microseconds()), "owner-event-µs")
			b.ReportMetric(unparked/float64(b.N), "unparked/op")
		})
	}
	b.Run("impl=bare-hop", func(b *testing.B) {
		ks := topics.Keyspace{Prefix: redistest.Prefix()}
		clock := newRepClock()
		stop := repBare(b, r, ks, 1, func(m *message.Message) { clock.finished(m.UUID, "", time.Now()) })
		defer stop()
		b.ResetTimer()
		for run := range b.N {
			repEnqueue(b, r.Client, ks, clock, run, 0, 1, 1, 0)
			clock.wait(b, 10*time.Second)
			time.Sleep(time.Millisecond) // one message at a time, like an owner's completion
		}
		b.StopTimer()
		b.ReportMetric(0, "ns/op")
		clock.mu.Lock()
		b.ReportMetric(float64(repPercentile(clock.lat, 50).Microseconds()), "hop-p50-µs")
		b.ReportMetric(float64(repPercentile(clock.lat, 99).Microseconds()), "hop-p99-µs")
		clock.mu.Unlock()
	})
}

// repHeap returns the live heap after two forced collections, and the goroutine count.
func repHeap() (uint64, int) {
	var ms runtime.MemStats
	runtime.GC()
	runtime.GC()
	runtime.ReadMemStats(&ms)
	return ms.HeapAlloc, runtime.NumGoroutine()
}

// repParkedN is the number of parked followers of the memory benchmarks.
const repParkedN = 10000

// repEnqueueQuiet appends tasks first..first+n-1 of run with key k each, without a clock
// (so that the benchmark process itself allocates nothing that outlives the call).
func repEnqueueQuiet(tb testing.TB, rdb *redis.Client, ks topics.Keyspace, run, first, n, k int) {
	tb.Helper()
	ctx := context.Background()
	p, err := json.Marshal(topics.Task{TaskID: "x", Stage: repStage, Tenant: "bench", Input: repInput(run, k, 0)})
	if err != nil {
		tb.Fatal(err)
	}
	for start := first; start < first+n; start += 500 {
		_, err := rdb.Pipelined(ctx, func(pl redis.Pipeliner) error {
			for i := start; i < min(start+500, first+n); i++ {
				id := "r" + strconv.Itoa(run) + "-t" + strconv.Itoa(i)
				payload := strings.Replace(string(p), `"taskId":"x"`, `"taskId":"`+id+`"`, 1)
				pl.XAdd(ctx, &redis.XAddArgs{Stream: ks.Tasks(repStage), Values: []any{topics.FieldUUID, id, topics.FieldPayload, payload}})
			}
			return nil
		})
		if err != nil {
			tb.Fatal(err)
		}
	}
}

// BenchmarkReportParkedConsumerMemory: the consumer's own memory per parked follower. One
// in-process consumer (8 subscribers) whose owner's model blocks; 10,000 follower tasks of its
// key arrive and are parked. Live heap (after forced GC) and goroutines before and after,
// divided by the number parked; pending-entries is the stream's pending count with everything
// parked (the owner's entry and the entries read ahead by its subscriber: parked tasks are
// acked and hold no handler slot). Each op first runs the same round once unmeasured, so that
// the Redis connection pools have grown to what a burst of 10,000 tasks needs (about 1 MB of
// connection buffers, whatever the number parked). The bare twin is a bare consumer that acks
// 10,000 messages (also after one unmeasured round): what processing alone leaves behind.
func BenchmarkReportParkedConsumerMemory(b *testing.B) {
	redis.SetLogger(repQuiet{})
	r := redistest.New(b)
	b.Run("impl=flightdeck", func(b *testing.B) {
		ks := topics.Keyspace{Prefix: redistest.Prefix()}
		gate := &repGate{started: make(chan string, 1), release: make(chan struct{})}
		stop := repFlightdeck(b, r, ks, 1, gate, nil)
		defer stop()
		var perTask, gor, pending, parkedN float64
		round := func(run int, measure bool) {
			key := repKey(b, run, 0)
			repEnqueueQuiet(b, r.Client, ks, run, 0, 1, 0)
			<-gate.started
			time.Sleep(200 * time.Millisecond)
			h0, g0 := repHeap()
			repEnqueueQuiet(b, r.Client, ks, run, 1, repParkedN, 0)
			ids := repWaitParked(b, r.Client, ks, key, repParkedN, 1)
			time.Sleep(200 * time.Millisecond)
			h1, g1 := repHeap()
			xp, err := r.Client.XPending(context.Background(), ks.Tasks(repStage), topics.ConsumerGroup).Result()
			if err != nil {
				b.Fatal(err)
			}
			if measure {
				perTask += (float64(h1) - float64(h0)) / float64(len(ids))
				gor += float64(g1 - g0)
				pending += float64(xp.Count)
				parkedN += float64(len(ids))
			}
			gate.release <- struct{}{}
			for deadline := time.Now().Add(time.Minute); ; time.Sleep(10 * time.Millisecond) {
				n, _ := r.Client.HLen(context.Background(), ks.Waiters(key)).Result()
				xp, _ := r.Client.XPending(context.Background(), ks.Tasks(repStage), topics.ConsumerGroup).Result()
				if n == 0 && xp != nil && xp.Count == 0 {
					break
				}
				if time.Now().After(deadline) {
					b.Fatalf("followers not answered: %d parked, %+v pending", n, xp)
				}
			}
		}
		for run := range b.N {
			round(2*run, false)
			round(2*run+1, true)
		}
		b.ReportMetric(0, "ns/op")
		b.ReportMetric(perTask/float64(b.N), "heap-B/parked")
		b.ReportMetric(gor/float64(b.N), "goroutines-delta")
		b.ReportMetric(pending/float64(b.N), "pending-entries")
		b.ReportMetric(parkedN/float64(b.N), "parked")
	})
	b.Run("impl=bare", func(b *testing.B) {
		ks := topics.Keyspace{Prefix: redistest.Prefix()}
		var acked atomic.Int64
		stop := repBare(b, r, ks, 1, func(*message.Message) { acked.Add(1) })
		defer stop()
		var perTask, gor float64
		round := func(run int, measure bool) {
			time.Sleep(200 * time.Millisecond)
			h0, g0 := repHeap()
			want := acked.Load() + repParkedN
			repEnqueueQuiet(b, r.Client, ks, run, 0, repParkedN, 0)
			for deadline := time.Now().Add(time.Minute); acked.Load() < want; time.Sleep(time.Millisecond) {
				if time.Now().After(deadline) {
					b.Fatalf("stalled at %d of %d", acked.Load(), want)
				}
			}
			time.Sleep(200 * time.Millisecond)
			h1, g1 := repHeap()
			if measure {
				perTask += (float64(h1) - float64(h0)) / repParkedN
				gor += float64(g1 - g0)
			}
		}
		for run := range b.N {
			round(2*run, false)
			round(2*run+1, true)
		}
		b.ReportMetric(0, "ns/op")
		b.ReportMetric(perTask/float64(b.N), "heap-B/msg")
		b.ReportMetric(gor/float64(b.N), "goroutines-delta")
	})
}

// BenchmarkReportReadAhead: head-of-line blocking behind a long model call. One consumer of 8
// subscribers runs one task with a 3 s model call; then 16 tasks of other keys (zero-latency
// model) arrive 20 ms apart, while 7 subscribers are idle. A watermill-redisstream subscriber
// (the bare twin, which runs the same model in its handler) reads entries ahead of its handler,
// so one of them can be read by the busy subscriber and wait for the long call to end;
// Flightdeck's subscriber reads only for free handlers. Reports the 16 tasks' p50 and max
// enqueue-to-end latency.
func BenchmarkReportReadAhead(b *testing.B) {
	redis.SetLogger(repQuiet{})
	r := redistest.New(b)
	for _, impl := range []string{"flightdeck", "bare-model"} {
		b.Run("impl="+impl, func(b *testing.B) {
			ks := topics.Keyspace{Prefix: redistest.Prefix()}
			clock := newRepClock()
			clock.byID = map[string]time.Duration{}
			var runs atomic.Int64
			sim := repCountingSim(&runs)
			var stop func()
			if impl == "flightdeck" {
				stop = repFlightdeck(b, r, ks, 1, sim, clock)
			} else {
				stop = repBare(b, r, ks, 1, func(m *message.Message) {
					var t topics.Task
					if err := json.Unmarshal(m.Payload, &t); err == nil {
						_, _ = sim.Call(m.Context(), model.Request{Stage: t.Stage, TaskID: t.TaskID, Tenant: t.Tenant, Input: t.Input}, nil)
					}
					clock.finished(m.UUID, "", time.Now())
				})
			}
			defer stop()
			var quick []time.Duration
			for run := range b.N {
				repEnqueue(b, r.Client, ks, clock, run, 0, 1, 1, 3000)
				time.Sleep(100 * time.Millisecond)
				for i := 1; i <= 16; i++ {
					repEnqueue(b, r.Client, ks, clock, run, i, 1, 1, 0)
					time.Sleep(20 * time.Millisecond)
				}
				clock.wait(b, time.Minute)
				clock.mu.Lock()
				for i := 1; i <= 16; i++ {
					quick = append(quick, clock.byID["r"+strconv.Itoa(run)+"-t"+strconv.Itoa(i)])
				}
				clock.mu.Unlock()
			}
			b.ReportMetric(0, "ns/op")
			b.ReportMetric(repPercentile(quick, 50).Seconds()*1e3, "p50-ms")
			b.ReportMetric(repPercentile(quick, 100).Seconds()*1e3, "max-ms")
		})
	}
}
