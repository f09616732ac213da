package flight_test

import (
	"context"
	"fmt"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"golang.org/x/sync/errgroup"

	"github.com/flightdeck-ai/flightdeck/flight"
	"github.com/flightdeck-ai/flightdeck/internal/testkit/redistest"
	"github.com/flightdeck-ai/flightdeck/lua"
	"github.com/flightdeck-ai/flightdeck/topics"
)

// BenchmarkOwnerCycle measures one full owner cycle (acquire and start in one call, then
// complete with the owner's event) on a fresh key, beside the naive lock a team would write
// first: SET NX for the lock, SET for the result.
func BenchmarkOwnerCycle(b *testing.B) {
	r := redistest.New(b)
	ctx := context.Background()
	c, _ := flight.NewCoordinator(flight.Config{Client: r.Client, Keyspace: topics.Keyspace{Prefix: r.Prefix}})
	pol := flight.Policy{ResultTTL: time.Minute}
	result := []byte(`{"score":87,"answer":"a typical short model answer of about eighty bytes"}`)
	n := 0 // keys stay fresh across the benchmark's repeated runs
	b.Run("flight", func(b *testing.B) {
		for range b.N {
			n++
			key := "own-" + strconv.Itoa(n)
			d, err := c.Acquire(ctx, flight.AcquireParams{Key: key, OwnerID: "n1", Task: flight.Task{ID: "t"},
				Stage: "s", Tenant: "t", Policy: pol, Start: true})
			if err != nil || d.Action != flight.ActionOwner {
				b.Fatal(d, err)
			}
			if _, err := c.Complete(ctx, *d.Owner, result, 0); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("setnx-set", func(b *testing.B) {
		for range b.N {
			n++
			key := r.Prefix + ":nx-" + strconv.Itoa(n)
			if ok, err := r.Client.SetNX(ctx, key, "n1", time.Minute).Result(); err != nil || !ok {
				b.Fatal(ok, err)
			}
			if err := r.Client.Set(ctx, key+":result", result, time.Minute).Err(); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// BenchmarkFollowerAcquire measures acquire on a running flight (the follower path, no
// parking), beside a SET NX that loses.
func BenchmarkFollowerAcquire(b *testing.B) {
	r := redistest.New(b)
	ctx := context.Background()
	c, _ := flight.NewCoordinator(flight.Config{Client: r.Client, Keyspace: topics.Keyspace{Prefix: r.Prefix}})
	pol := flight.Policy{Lease: time.Hour, RunningTTL: time.Hour}
	if _, err := c.Acquire(ctx, flight.AcquireParams{Key: "busy", OwnerID: "n1", Task: flight.Task{ID: "t"},
		Stage: "s", Tenant: "t", Policy: pol, Start: true}); err != nil {
		b.Fatal(err)
	}
	b.Run("flight", func(b *testing.B) {
		for range b.N {
			d, err := c.Acquire(ctx, flight.AcquireParams{Key: "busy", OwnerID: "n2", Stage: "s", Tenant: "t", Policy: pol})
			if err != nil || d.Action != flight.ActionFollowerWait {
				b.Fatal(d, err)
			}
		}
	})
	r.Client.Set(ctx, r.Prefix+":nx-busy", "n1", time.Hour)
	b.Run("setnx", func(b *testing.B) {
		for range b.N {
			if ok, err := r.Client.SetNX(ctx, r.Prefix+":nx-busy", "n2", time.Hour).Result(); err != nil || ok {
				b.Fatal(ok, err)
			}
		}
	})
}

// BenchmarkOwnerPathRedis measures what Redis spends on one consumer owner cycle: a task
// entry read by the consumer, acquire with start, complete with the owner's event and the
// entry's acknowledgement (answer mode write). fcall-us/op is the functions' own time from
// INFO commandstats (what the scripts cost, without the network); redis-us/op is
// redis-server's CPU time over the loop (user + sys, INFO cpu). callers=1 makes one call per
// round trip; callers=8 runs 8 concurrent owners whose calls share pipelines (lua.Batcher), as
// a consumer's handlers do. joined=9 is callers=1 with 9 more tasks of the key joined to each
// owner in its consumer (a burst of 10 duplicates), answered by its complete: what each joined
// task's event and acknowledgement cost.
func BenchmarkOwnerPathRedis(b *testing.B) {
	for _, callers := range []int{1, 8} {
		b.Run("callers="+strconv.Itoa(callers), func(b *testing.B) { benchOwnerPath(b, callers, 0) })
	}
	b.Run("joined=9", func(b *testing.B) { benchOwnerPath(b, 1, 9) })
}

func benchOwnerPath(b *testing.B, callers, joined int) {
	r := redistest.New(b)
	ctx := context.Background()
	ks := topics.Keyspace{Prefix: r.Prefix}
	cfg := flight.Config{Client: r.Client, Keyspace: ks, Consumer: "bench-1"}
	if callers > 1 {
		batcher := lua.NewBatcher(r.Client)
		defer batcher.Close()
		cfg.Calls = batcher
	}
	c, _ := flight.NewCoordinator(cfg)
	pol := flight.Policy{ResultTTL: time.Minute}
	result := []byte(`{"score":87,"answer":"a typical short model answer of about eighty bytes"}`)
	stream := ks.Tasks("s")
	if err := r.Client.XGroupCreateMkStream(ctx, stream, topics.ConsumerGroup, "0").Err(); err != nil {
		b.Fatal(err)
	}
	if err := c.Load(ctx); err != nil {
		b.Fatal(err)
	}
	per := 1 + joined // entries per owner cycle
	pipe := r.Client.Pipeline()
	for i := range b.N * per {
		pipe.XAdd(ctx, &redis.XAddArgs{Stream: stream, Values: map[string]any{"payload": "t" + strconv.Itoa(i)}})
	}
	if _, err := pipe.Exec(ctx); err != nil {
		b.Fatal(err)
	}
	res, err := r.Client.XReadGroup(ctx, &redis.XReadGroupArgs{Group: topics.ConsumerGroup, Consumer: "bench-1",
		Streams: []string{stream, ">"}, Count: int64(b.N * per)}).Result()
	if err != nil {
		b.Fatal(err)
	}
	entries := res[0].Messages
	var next atomic.Int64
	fcall0, cpu0 := benchRedisFcallUsec(b, r.Client), benchRedisCPU(b, r.Client)
	b.ResetTimer()
	var g errgroup.Group
	for range callers {
		g.Go(func() error {
			for {
				i := int(next.Add(1)) - 1
				if i >= b.N {
					return nil
				}
				d, err := c.Acquire(ctx, flight.AcquireParams{Key: "path-" + r.Prefix + strconv.Itoa(i), OwnerID: "bench-1",
					Task:  flight.Task{ID: "task-" + strconv.Itoa(i), Stream: stream, Entry: entries[i*per].ID},
					Stage: "s", Tenant: "acme", Policy: pol, Start: true})
				if err != nil || d.Action != flight.ActionOwner {
					return fmt.Errorf("acquire: %v %v", d.Action, err)
				}
				own := *d.Owner
				for j := 1; j < per; j++ {
					own.Joined = append(own.Joined, flight.Task{ID: "task-" + strconv.Itoa(i) + "-" + strconv.Itoa(j),
						Stream: stream, Entry: entries[i*per+j].ID})
				}
				st, err := c.Complete(ctx, own, result, 0)
				if err != nil {
					return err
				}
				if joined > 0 && !st.JoinedAnswered {
					return fmt.Errorf("complete left the joined tasks unanswered: %+v", st)
				}
			}
		})
	}
	if err := g.Wait(); err != nil {
		b.Fatal(err)
	}
	b.StopTimer()
	b.ReportMetric((benchRedisFcallUsec(b, r.Client)-fcall0)/float64(b.N), "fcall-us/op")
	b.ReportMetric((benchRedisCPU(b, r.Client)-cpu0)*1e6/float64(b.N), "redis-us/op")
	if n, _ := r.Client.XPending(ctx, stream, topics.ConsumerGroup).Result(); n.Count != 0 {
		b.Fatalf("%d entries left pending", n.Count)
	}
}

// benchRedisFcallUsec is the time Redis spent in FCALL so far (INFO commandstats), in µs.
func benchRedisFcallUsec(b *testing.B, rdb redis.UniversalClient) float64 {
	b.Helper()
	return benchInfoField(b, rdb, "commandstats", "cmdstat_fcall", "usec")
}

// benchRedisCPU is redis-server's CPU time so far (user + sys), in seconds.
func benchRedisCPU(b *testing.B, rdb redis.UniversalClient) float64 {
	b.Helper()
	return benchInfoField(b, rdb, "cpu", "used_cpu_user", "") + benchInfoField(b, rdb, "cpu", "used_cpu_sys", "")
}

// benchInfoField reads one number of an INFO section (redistest.InfoNumber).
func benchInfoField(b *testing.B, rdb redis.UniversalClient, section, line, field string) float64 {
	b.Helper()
	n, err := redistest.InfoNumber(context.Background(), rdb, section, line, field)
	if err != nil {
		b.Fatal(err)
	}
	return n
}

// BenchmarkHitPathRedis measures what Redis spends on a duplicate of a finished key, the way a
// consumer's acquire meets it: a task entry read by the consumer, then an acquire that finds
// the stored result and answers the task with it (its event and the entry's acknowledgement)
// in the same call. redis-us/op is redis-server's CPU time over the loop. short answers it
// instead as a late duplicate in the owner's consumer (Coordinator.Hit) does.
func BenchmarkHitPathRedis(b *testing.B) {
	b.Run("acquire", func(b *testing.B) { benchHitPath(b, false) })
	b.Run("short", func(b *testing.B) { benchHitPath(b, true) })
}

func benchHitPath(b *testing.B, short bool) {
	r := redistest.New(b)
	ctx := context.Background()
	ks := topics.Keyspace{Prefix: r.Prefix}
	c, _ := flight.NewCoordinator(flight.Config{Client: r.Client, Keyspace: ks, Consumer: "bench-1"})
	pol := flight.Policy{ResultTTL: time.Hour}
	stream := ks.Tasks("s")
	if err := r.Client.XGroupCreateMkStream(ctx, stream, topics.ConsumerGroup, "0").Err(); err != nil {
		b.Fatal(err)
	}
	d, err := c.Acquire(ctx, flight.AcquireParams{Key: "hit", OwnerID: "bench-1", Stage: "s", Tenant: "acme", Policy: pol, Start: true})
	if err != nil || d.Action != flight.ActionOwner {
		b.Fatal(d, err)
	}
	result := []byte(`{"score":87,"answer":"a typical short model answer of about eighty bytes"}`)
	if _, err := c.Complete(ctx, *d.Owner, result, 0); err != nil {
		b.Fatal(err)
	}
	var fin *flight.Finished // the short hit of a late duplicate in the owner's consumer
	if short {
		fin = c.Finished(*d.Owner, result)
	}
	pipe := r.Client.Pipeline()
	for i := range b.N {
		pipe.XAdd(ctx, &redis.XAddArgs{Stream: stream, Values: map[string]any{"payload": "t" + strconv.Itoa(i)}})
	}
	if _, err := pipe.Exec(ctx); err != nil {
		b.Fatal(err)
	}
	res, err := r.Client.XReadGroup(ctx, &redis.XReadGroupArgs{Group: topics.ConsumerGroup, Consumer: "bench-1",
		Streams: []string{stream, ">"}, Count: int64(b.N)}).Result()
	if err != nil {
		b.Fatal(err)
	}
	cpu0 := benchRedisCPU(b, r.Client)
	b.ResetTimer()
	for i, m := range res[0].Messages {
		task := flight.Task{ID: "dup-" + strconv.Itoa(i), Stream: stream, Entry: m.ID}
		if fin != nil {
			if _, ok, err := c.Hit(ctx, fin, task, 0); err != nil || !ok {
				b.Fatal(ok, err)
			}
			continue
		}
		d, err := c.Acquire(ctx, flight.AcquireParams{Key: "hit", OwnerID: "bench-1", Stage: "s", Tenant: "acme", Policy: pol,
			Task: task, Start: true})
		if err != nil || d.Action != flight.ActionResultHit {
			b.Fatal(d, err)
		}
	}
	b.StopTimer()
	b.ReportMetric((benchRedisCPU(b, r.Client)-cpu0)*1e6/float64(b.N), "redis-us/op")
}
