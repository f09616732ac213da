package executor_test

// Benchmarks behind docs/BENCHMARKS.md: in-process follower notification through the Executor
// and Redis memory per parked follower, each beside its bare Redis Streams / watermill twin in
// the same run. They run only with -bench; see docs/BENCHMARKS.md for the commands.

import (
	"context"
	"fmt"
	"math"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill-redisstream/pkg/redisstream"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/redis/go-redis/v9"

	"github.com/flightdeck-ai/flightdeck/executor"
	"github.com/flightdeck-ai/flightdeck/flight"
	"github.com/flightdeck-ai/flightdeck/internal/redisconn"
	"github.com/flightdeck-ai/flightdeck/internal/testkit/redistest"
	"github.com/flightdeck-ai/flightdeck/topics"
)

// repQuiet drops go-redis's internal log lines (reconnects after a test server stopped),
// which would otherwise split benchmark result lines.
type repQuiet struct{}

func (repQuiet) Printf(context.Context, string, ...any) {}

func repPct(d []time.Duration, p float64) time.Duration {
	if len(d) == 0 {
		return 0
	}
	s := slices.Clone(d)
	slices.Sort(s)
	return s[max(int(math.Ceil(p/100*float64(len(s))))-1, 0)]
}

func repMicros(b *testing.B, d []time.Duration, name string) {
	b.ReportMetric(float64(repPct(d, 50).Microseconds()), name+"-p50-µs")
	b.ReportMetric(float64(repPct(d, 99).Microseconds()), name+"-p99-µs")
}

// repExecutor is one node: an executor with its own client on srv.
func repExecutor(b *testing.B, srv *redistest.Server, prefix, name string) *executor.Executor {
	rdb := redisconn.NewClient(&redis.Options{Addr: srv.Addr()})
	b.Cleanup(func() { _ = rdb.Close() })
	coord, err := flight.NewCoordinator(flight.Config{Client: rdb, Keyspace: topics.Keyspace{Prefix: prefix}})
	if err != nil {
		b.Fatal(err)
	}
	if err := coord.Load(context.Background()); err != nil {
		b.Fatal(err)
	}
	e, err := executor.New(executor.Config{Coordinator: coord, NodeID: name,
		Stages:   map[string]executor.StageOptions{stage: {Policy: flight.Policy{Lease: 5 * time.Second}}},
		SpoolDir: filepath.Join(b.TempDir(), "spool")})
	if err != nil {
		b.Fatal(err)
	}
	e.Start(context.Background())
	b.Cleanup(func() { _ = e.Close() })
	return e
}

// BenchmarkReportExecutorFollower: two executors on two "nodes" (each its own client and
// result dispatcher). Node A owns a key and its function blocks; node B calls Do on the same
// key and waits (FOLLOWER_WAIT, woken by A's event on the result stream, then RESULT_HIT);
// then A's function returns. Per op: A's Do return minus the function's return (owner-done:
// complete, publish, release), B's Do return minus A's Do return (follower-after-owner: the
// notification), and B's Do return minus the function's return (follower-done). The bare
// twins are one hop of the same transport: XADD to a bare watermill-redisstream subscriber's
// handler (bare-hop), and XADD to a plain XREAD BLOCK returning (xread-hop).
func BenchmarkReportExecutorFollower(b *testing.B) {
	redis.SetLogger(repQuiet{})
	srv := redistest.Start(b, nil)
	ctx := context.Background()
	b.Run("impl=flightdeck", func(b *testing.B) {
		prefix := redistest.Prefix()
		owner := repExecutor(b, srv, prefix, "node-a")
		follower := repExecutor(b, srv, prefix, "node-b")
		var ownerDone, notify, followerDone []time.Duration
		for i := range b.N {
			key := "rep-" + prefix[:9] + "-" + strconv.Itoa(i)
			started, release := make(chan struct{}), make(chan struct{})
			var fnEnd, oEnd, fEnd time.Time
			var oErr, fErr error
			var fRes executor.Result
			var wg sync.WaitGroup
			wg.Add(2)
			go func() {
				defer wg.Done()
				_, oErr = owner.Do(ctx, stage, key, func(context.Context, func()) ([]byte, error) {
					close(started)
					<-release
					fnEnd = time.Now()
					return []byte(`{"answer":42}`), nil
				})
				oEnd = time.Now()
			}()
			<-started
			go func() {
				defer wg.Done()
				fRes, fErr = follower.Do(ctx, stage, key, func(context.Context, func()) ([]byte, error) {
					return nil, fmt.Errorf("the follower ran the function")
				})
				fEnd = time.Now()
			}()
			time.Sleep(20 * time.Millisecond) // B acquires (FOLLOWER_WAIT) and registers
			close(release)
			wg.Wait()
			if oErr != nil || fErr != nil {
				b.Fatal(oErr, fErr)
			}
			if fRes.Shared != topics.SharedHit || !fEnd.After(fnEnd) {
				b.Fatalf("follower: %+v, returned %v after the function", fRes, fEnd.Sub(fnEnd))
			}
			ownerDone = append(ownerDone, oEnd.Sub(fnEnd))
			notify = append(notify, fEnd.Sub(oEnd))
			followerDone = append(followerDone, fEnd.Sub(fnEnd))
		}
		b.ReportMetric(0, "ns/op")
		repMicros(b, ownerDone, "owner-done")
		repMicros(b, notify, "follower-after-owner")
		repMicros(b, followerDone, "follower-done")
	})
	b.Run("impl=bare-hop", func(b *testing.B) {
		stream := redistest.Prefix() + ":hop"
		got := make(chan time.Time, 1)
		sub, err := redisstream.NewSubscriber(redisstream.SubscriberConfig{
			Client: redisconn.NewClient(&redis.Options{Addr: srv.Addr()}), Consumer: "bare",
			ConsumerGroup: "bare", DisableIndefiniteInitialBlock: true}, nil)
		if err != nil {
			b.Fatal(err)
		}
		router, _ := message.NewRouter(message.RouterConfig{}, nil)
		router.AddNoPublisherHandler("h", stream, sub, func(*message.Message) error { got <- time.Now(); return nil })
		done := make(chan struct{})
		go func() { defer close(done); _ = router.Run(ctx) }()
		<-router.Running()
		defer func() { _ = router.Close(); <-done }()
		rdb := srv.Client()
		var hop []time.Duration
		b.ResetTimer()
		for i := range b.N {
			time.Sleep(2 * time.Millisecond) // one notification at a time, subscriber idle
			sent := time.Now()
			if err := rdb.XAdd(ctx, &redis.XAddArgs{Stream: stream,
				Values: []any{topics.FieldUUID, strconv.Itoa(i), topics.FieldPayload, `{"answer":42}`}}).Err(); err != nil {
				b.Fatal(err)
			}
			hop = append(hop, (<-got).Sub(sent))
		}
		b.StopTimer()
		b.ReportMetric(0, "ns/op")
		repMicros(b, hop, "hop")
	})
	b.Run("impl=xread-hop", func(b *testing.B) {
		stream := redistest.Prefix() + ":hop"
		reader, writer := srv.Client(), srv.Client()
		var hop []time.Duration
		last := "0"
		b.ResetTimer()
		for range b.N {
			type read struct {
				at  time.Time
				id  string
				err error
			}
			ch := make(chan read, 1)
			go func() {
				res, err := reader.XRead(ctx, &redis.XReadArgs{Streams: []string{stream, last}, Block: 5 * time.Second}).Result()
				r := read{at: time.Now(), err: err}
				if err == nil {
					r.id = res[0].Messages[0].ID
				}
				ch <- r
			}()
			time.Sleep(2 * time.Millisecond) // the reader is blocked
			sent := time.Now()
			if err := writer.XAdd(ctx, &redis.XAddArgs{Stream: stream, Values: []any{"payload", `{"answer":42}`}}).Err(); err != nil {
				b.Fatal(err)
			}
			r := <-ch
			if r.err != nil {
				b.Fatal(r.err)
			}
			last = r.id
			hop = append(hop, r.at.Sub(sent))
		}
		b.StopTimer()
		b.ReportMetric(0, "ns/op")
		repMicros(b, hop, "hop")
	})
}

// repUsedMemory is INFO memory's used_memory minus the memory of client connections (query
// and output buffers), so that the reply to a large command does not count.
func repUsedMemory(b *testing.B, rdb *redis.Client) float64 {
	info, err := rdb.Info(context.Background(), "memory").Result()
	if err != nil {
		b.Fatal(err)
	}
	field := func(name string) float64 {
		for _, line := range strings.Split(info, "\r\n") {
			if v, ok := strings.CutPrefix(line, name+":"); ok {
				f, err := strconv.ParseFloat(v, 64)
				if err != nil {
					b.Fatal(err)
				}
				return f
			}
		}
		b.Fatalf("no %s in INFO memory", name)
		return 0
	}
	return field("used_memory") - field("mem_clients_normal")
}

// repParkedN is the number of parked followers of BenchmarkReportParkedRedisMemory.
const repParkedN = 10000

// BenchmarkReportParkedRedisMemory: Redis memory per parked follower task, on a private
// redis-server flushed before each op. A parked task is its stream entry kept pending under
// the parking consumer plus one field of the flight's waiters hash. shape=one-flight: 10,000
// tasks parked on one running flight; shape=10k-flights: 10,000 running flights, one task
// parked on each (each flight gains a waiters hash). B/parked is the used_memory delta (minus
// client buffers) per task between its entry sitting unread in the stream and the task parked
// (delivered, moved to the parking consumer, recorded in the waiters); usage-B/parked is
// MEMORY USAGE of the waiters hash(es) per task. The bare twin holds 10,000 tasks the way a
// bare watermill consumer that waits in its handler holds them: delivered and
// unacknowledged; B/pending is the same delta for it.
func BenchmarkReportParkedRedisMemory(b *testing.B) {
	redis.SetLogger(repQuiet{})
	srv := redistest.Start(b, nil)
	rdb := srv.Client()
	ctx := context.Background()
	ks := topics.Keyspace{Prefix: "ai"}
	coord, err := flight.NewCoordinator(flight.Config{Client: rdb, Keyspace: ks})
	if err != nil {
		b.Fatal(err)
	}
	pol := flight.Policy{Lease: time.Hour, RunningTTL: time.Hour}
	key := func(i int) string { k, _ := flight.NamespacedKey(stage, "acme", "req-"+strconv.Itoa(i), 1); return k }
	taskID := func(i int) string { return fmt.Sprintf("task-%08d", i) }
	stream := ks.Tasks(stage)
	// enqueue appends repParkedN task entries, unread.
	enqueue := func(b *testing.B) {
		if err := rdb.XGroupCreateMkStream(ctx, stream, topics.ConsumerGroup, "0").Err(); err != nil {
			b.Fatal(err)
		}
		for start := 0; start < repParkedN; start += 500 {
			_, err := rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
				for i := start; i < start+500; i++ {
					p.XAdd(ctx, &redis.XAddArgs{Stream: stream, Values: []any{topics.FieldUUID, taskID(i),
						topics.FieldPayload, `{"taskId":"` + taskID(i) + `","stage":"` + stage + `","tenant":"acme","input":{"k":0}}`}})
				}
				return nil
			})
			if err != nil {
				b.Fatal(err)
			}
		}
	}
	// read delivers every entry to consumer c1 and returns the tasks in order.
	read := func(b *testing.B) []flight.Task {
		var out []flight.Task
		for len(out) < repParkedN {
			res, err := rdb.XReadGroup(ctx, &redis.XReadGroupArgs{Group: topics.ConsumerGroup, Consumer: "c1",
				Streams: []string{stream, ">"}, Count: 1000}).Result()
			if err != nil {
				b.Fatal(err)
			}
			for _, m := range res[0].Messages {
				out = append(out, flight.Task{ID: taskID(len(out)), Stream: stream, Entry: m.ID})
			}
		}
		return out
	}
	own := func(b *testing.B, k string) {
		d, err := coord.Acquire(ctx, flight.AcquireParams{Key: k, OwnerID: "node-1", Task: flight.Task{ID: "owner-" + k[len(k)-8:]},
			Stage: stage, Tenant: "acme", Policy: pol, Start: true})
		if err != nil || d.Action != flight.ActionOwner {
			b.Fatal(d, err)
		}
	}
	park := func(b *testing.B, k string, tk flight.Task) {
		d, err := coord.Acquire(ctx, flight.AcquireParams{Key: k, OwnerID: "node-2", Task: tk, Stage: stage, Tenant: "acme", Policy: pol})
		if err != nil || d.Action != flight.ActionFollowerWait || d.Reason != flight.ReasonParked {
			b.Fatal(d, err)
		}
	}
	usage := func(b *testing.B, k string) float64 {
		n, err := rdb.MemoryUsage(ctx, ks.Waiters(k), 0).Result()
		if err != nil {
			b.Fatal(err)
		}
		return float64(n)
	}
	b.Run("shape=one-flight", func(b *testing.B) {
		var delta, use float64
		for range b.N {
			rdb.FlushAll(ctx)
			k := key(0)
			own(b, k)
			enqueue(b)
			m0 := repUsedMemory(b, rdb)
			for _, tk := range read(b) {
				park(b, k, tk)
			}
			m1 := repUsedMemory(b, rdb)
			delta += (m1 - m0) / repParkedN
			use += usage(b, k) / repParkedN
		}
		b.ReportMetric(0, "ns/op")
		b.ReportMetric(delta/float64(b.N), "B/parked")
		b.ReportMetric(use/float64(b.N), "usage-B/parked")
	})
	b.Run("shape=10k-flights", func(b *testing.B) {
		var delta, use float64
		for range b.N {
			rdb.FlushAll(ctx)
			for i := range repParkedN {
				own(b, key(i))
			}
			enqueue(b)
			m0 := repUsedMemory(b, rdb)
			for i, tk := range read(b) {
				park(b, key(i), tk)
			}
			m1 := repUsedMemory(b, rdb)
			delta += (m1 - m0) / repParkedN
			for i := range 100 { // MEMORY USAGE of a sample of the waiters hashes
				use += usage(b, key(i*(repParkedN/100))) / 100
			}
		}
		b.ReportMetric(0, "ns/op")
		b.ReportMetric(delta/float64(b.N), "B/parked")
		b.ReportMetric(use/float64(b.N), "usage-B/parked")
	})
	b.Run("impl=bare-pending", func(b *testing.B) {
		var delta float64
		for range b.N {
			rdb.FlushAll(ctx)
			stream := ks.Tasks(stage)
			if err := rdb.XGroupCreateMkStream(ctx, stream, topics.ConsumerGroup, "0").Err(); err != nil {
				b.Fatal(err)
			}
			for start := 0; start < repParkedN; start += 500 {
				_, err := rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
					for i := start; i < start+500; i++ {
						p.XAdd(ctx, &redis.XAddArgs{Stream: stream, Values: []any{topics.FieldUUID, taskID(i),
							topics.FieldPayload, `{"taskId":"` + taskID(i) + `","stage":"` + stage + `","tenant":"acme","input":{"k":0}}`}})
					}
					return nil
				})
				if err != nil {
					b.Fatal(err)
				}
			}
			m0 := repUsedMemory(b, rdb)
			for read := 0; read < repParkedN; {
				res, err := rdb.XReadGroup(ctx, &redis.XReadGroupArgs{Group: topics.ConsumerGroup, Consumer: "bare/0",
					Streams: []string{stream, ">"}, Count: 1000}).Result()
				if err != nil {
					b.Fatal(err)
				}
				read += len(res[0].Messages)
			}
			m1 := repUsedMemory(b, rdb)
			delta += (m1 - m0) / repParkedN
		}
		b.ReportMetric(0, "ns/op")
		b.ReportMetric(delta/float64(b.N), "B/pending")
	})
}
