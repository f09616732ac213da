package flight_test

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/flightdeck-ai/flightdeck/flight"
	"github.com/flightdeck-ai/flightdeck/internal/testkit/redistest"
	"github.com/flightdeck-ai/flightdeck/topics"
)

// BenchmarkReportFlightMemory measures what a finished flight keeps in Redis during its
// resultTTL, as docs/BENCHMARKS.md states it: its keys (the record, with the result) and the
// owner's terminal event on the result stream, per flight and per byte of result. Each op runs
// 2,000 owner cycles of unique keys, the way a consumer runs them (a task entry read, acquire
// with start, complete with the owner's event and the entry's acknowledgement), on a private
// Redis, and reads used_memory (INFO memory) before and after. The task entries are added and
// read before the first reading, so that only what the flights keep counts.
func BenchmarkReportFlightMemory(b *testing.B) {
	for _, size := range []int{100, 1 << 10, 16 << 10, 64 << 10} {
		b.Run("result="+strconv.Itoa(size), func(b *testing.B) {
			for range b.N {
				perFlight := flightMemory(b, size, 2000)
				b.ReportMetric(perFlight, "bytes/flight")
				b.ReportMetric(perFlight/float64(size), "bytes/result-byte")
			}
			b.ReportMetric(0, "ns/op")
		})
	}
}

// flightMemory runs n owner cycles with results of size bytes on a fresh Redis and returns
// the growth of its used_memory per flight.
func flightMemory(b *testing.B, size, n int) float64 {
	b.Helper()
	srv := redistest.Start(b, nil)
	rdb := srv.Client()
	ctx := context.Background()
	ks := topics.Keyspace{Prefix: "ai"}
	c, err := flight.NewCoordinator(flight.Config{Client: rdb, Keyspace: ks, Consumer: "bench-1"})
	if err != nil {
		b.Fatal(err)
	}
	if err := c.Load(ctx); err != nil {
		b.Fatal(err)
	}
	stream := ks.Tasks("interview-evaluation")
	if err := rdb.XGroupCreateMkStream(ctx, stream, topics.ConsumerGroup, "0").Err(); err != nil {
		b.Fatal(err)
	}
	pipe := rdb.Pipeline()
	for i := range n {
		pipe.XAdd(ctx, &redis.XAddArgs{Stream: stream, Values: map[string]any{"payload": "t" + strconv.Itoa(i)}})
	}
	if _, err := pipe.Exec(ctx); err != nil {
		b.Fatal(err)
	}
	res, err := rdb.XReadGroup(ctx, &redis.XReadGroupArgs{Group: topics.ConsumerGroup, Consumer: "bench-1",
		Streams: []string{stream, ">"}, Count: int64(n)}).Result()
	if err != nil {
		b.Fatal(err)
	}
	// A compact JSON string of size bytes, as a model's answer would be.
	result := []byte(`"` + strings.Repeat("a", size-2) + `"`)
	pol := flight.Policy{ResultTTL: 10 * time.Minute}
	before := usedMemory(b, rdb)
	for i, m := range res[0].Messages {
		d, err := c.Acquire(ctx, flight.AcquireParams{Key: "ai:interview-evaluation:v1:acme:" + strconv.Itoa(1e9+i),
			OwnerID: "bench-1", Task: flight.Task{ID: "task-" + strconv.Itoa(i), Stream: stream, Entry: m.ID},
			Stage: "interview-evaluation", Tenant: "acme", Policy: pol, Start: true})
		if err != nil || d.Action != flight.ActionOwner {
			b.Fatal(d, err)
		}
		if _, err := c.Complete(ctx, *d.Owner, result, 0); err != nil {
			b.Fatal(err)
		}
	}
	return float64(usedMemory(b, rdb)-before) / float64(n)
}

// usedMemory is Redis's used_memory, in bytes.
func usedMemory(b *testing.B, rdb redis.UniversalClient) int64 {
	b.Helper()
	v, err := redistest.InfoNumber(context.Background(), rdb, "memory", "used_memory", "")
	if err != nil {
		b.Fatal(err)
	}
	return int64(v)
}
