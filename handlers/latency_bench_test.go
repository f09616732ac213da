package handlers_test

import (
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/flightdeck-ai/flightdeck/internal/testkit/redistest"
	"github.com/flightdeck-ai/flightdeck/topics"
)

// Latency targets of docs/BENCHMARKS.md ("Latency beside long tasks", "First task after
// idle"), on 2 in-process consumers of repSubs subscribers each and a sim model.

// BenchmarkLatencyBesideLongTasks: 4 tasks of 60 s occupy 4 of the fleet's 16 handlers; then
// quick tasks (unique keys, zero-latency model) arrive at a steady 1,000/s, b.N of them.
// Reports enqueue-to-terminal-event latency (p50, p99) of the quick tasks: no quick task may
// wait behind a long one while a handler is free.
//
//	go test -run '^$' -bench LatencyBesideLongTasks -benchtime 3000x ./handlers/
func BenchmarkLatencyBesideLongTasks(b *testing.B) {
	redis.SetLogger(repQuiet{})
	r := redistest.New(b)
	ks := topics.Keyspace{Prefix: redistest.Prefix()}
	clock := newRepClock()
	var runs atomic.Int64
	stop := repFlightdeck(b, r, ks, 2, repCountingSim(&runs), clock)
	defer stop()
	// The long tasks: their own clock, so that they do not count.
	long := newRepClock()
	repEnqueue(b, r.Client, ks, long, 0, 0, 4, 1, 60000)
	deadline := time.Now().Add(10 * time.Second)
	for runs.Load() < 4 {
		if time.Now().After(deadline) {
			b.Fatalf("only %d long tasks started", runs.Load())
		}
		time.Sleep(10 * time.Millisecond)
	}
	b.ResetTimer()
	repSteady(b, r.Client, ks, clock, 1)
}

// repSteady sends b.N tasks (run 1, perKey tasks per key) at a steady repRate per second,
// waits for every event and reports the latencies clock measured.
func repSteady(b *testing.B, rdb *redis.Client, ks topics.Keyspace, clock *repClock, perKey int) {
	b.Helper()
	start := time.Now()
	for sent := 0; sent < b.N; {
		due := min(b.N, int(time.Since(start).Seconds()*repRate)+1)
		if due > sent {
			repEnqueue(b, rdb, ks, clock, 1, sent, due-sent, perKey, 0)
			sent = due
			continue
		}
		time.Sleep(time.Until(start.Add(time.Duration(sent) * time.Second / repRate)))
	}
	clock.wait(b, time.Minute)
	b.StopTimer()
	b.ReportMetric(0, "ns/op")
	clock.report(b)
}

// BenchmarkFirstTaskAfterIdle: the fleet has been idle for 2 s (its reads block on an empty
// stream); one task arrives. Reports enqueue-to-terminal-event latency over b.N such tasks.
//
//	go test -run '^$' -bench FirstTaskAfterIdle -benchtime 20x ./handlers/
func BenchmarkFirstTaskAfterIdle(b *testing.B) {
	redis.SetLogger(repQuiet{})
	r := redistest.New(b)
	ks := topics.Keyspace{Prefix: redistest.Prefix()}
	clock := newRepClock()
	var runs atomic.Int64
	stop := repFlightdeck(b, r, ks, 2, repCountingSim(&runs), clock)
	defer stop()
	b.ResetTimer()
	for i := range b.N {
		b.StopTimer()
		time.Sleep(2 * time.Second)
		b.StartTimer()
		repEnqueue(b, r.Client, ks, clock, 2, i, 1, 1, 0)
		clock.wait(b, 10*time.Second)
	}
	b.StopTimer()
	b.ReportMetric(0, "ns/op")
	clock.report(b)
	clock.mu.Lock()
	var worst time.Duration
	for _, d := range clock.lat {
		worst = max(worst, d)
	}
	clock.mu.Unlock()
	b.ReportMetric(worst.Seconds()*1e3, "max-ms")
}
