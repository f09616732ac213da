package executor_test

import (
	"context"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"
	"github.com/rs/zerolog"

	"github.com/flightdeck-ai/flightdeck/executor"
	"github.com/flightdeck-ai/flightdeck/flight"
	"github.com/flightdeck-ai/flightdeck/internal/redisconn"
	"github.com/flightdeck-ai/flightdeck/internal/testkit/redistest"
	"github.com/flightdeck-ai/flightdeck/topics"
)

// TestExecutorNeverRunsAHeldOutcomeAgain: the function answered, Redis died before the result
// was stored, and the outcome sits in this executor's spool. A later caller of the same key,
// before any write-back (the flush loop is off), is answered with that outcome and the
// function does not run again: when Redis came back without its data (the caller owns a new
// flight and completes it with the held result), and while Redis is still down (the fallback
// of every mode answers from it).
func TestExecutorNeverRunsAHeldOutcomeAgain(t *testing.T) {
	for _, tc := range []struct {
		name    string
		mode    executor.Mode
		restart bool
		shared  topics.Shared
	}{
		{"RedisBackWithoutItsData", executor.ModeHybrid, true, topics.SharedOwner},
		{"RedisStillDownHybrid", executor.ModeHybrid, false, topics.SharedLocal},
		{"RedisStillDownDistributedOnly", executor.ModeDistributedOnly, false, topics.SharedLocal},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv := redistest.Start(t, nil)
			prefix := redistest.Prefix()
			rdb := redisconn.NewClient(&redis.Options{Addr: srv.Addr(), MaxRetries: -1, DialTimeout: 200 * time.Millisecond})
			t.Cleanup(func() { _ = rdb.Close() })
			coord, err := flight.NewCoordinator(flight.Config{Client: rdb, Keyspace: topics.Keyspace{Prefix: prefix}})
			if err != nil {
				t.Fatal(err)
			}
			opt := fastPolicy()
			opt.Mode = tc.mode
			log := zerolog.New(&syncBuf{})
			e, err := executor.New(executor.Config{Coordinator: coord, NodeID: "n1",
				Stages:  map[string]executor.StageOptions{stage: opt},
				Breaker: executor.BreakerConfig{FailureThreshold: 1000}, SpoolDir: filepath.Join(t.TempDir(), "spool"),
				FlushInterval: time.Hour, // no write-back: only the held outcome can answer
				Logger:        &log, Registry: prometheus.NewRegistry()})
			if err != nil {
				t.Fatal(err)
			}
			e.Start(context.Background())
			t.Cleanup(func() { _ = e.Close() })

			var runs atomic.Int64
			fn := func(context.Context, func()) ([]byte, error) {
				if runs.Add(1) == 1 {
					srv.Stop() // the result write fails
				}
				return []byte(`{"score":9}`), nil
			}
			key, err := flight.NamespacedKey(stage, "acme", "held", 1)
			if err != nil {
				t.Fatal(err)
			}
			first, err := e.Do(context.Background(), stage, key, fn)
			if err != nil || !first.Uncertain || e.Spooled() != 1 {
				t.Fatalf("first call: %+v, %v, spooled %d; want an uncertain outcome in the spool", first, err, e.Spooled())
			}
			if tc.restart {
				srv.Restart() // without persistence: only the spool knows the result
			}
			second, err := e.Do(context.Background(), stage, key, fn)
			if err != nil || string(second.Value) != `{"score":9}` || second.Shared != tc.shared {
				t.Fatalf("second call: %+v, %v; want the held result, shared %s", second, err, tc.shared)
			}
			if runs.Load() != 1 {
				t.Fatalf("the function ran %d times, want 1", runs.Load())
			}
			if !tc.restart {
				return
			}
			// The second caller's flight stored the held result.
			d, err := coord.Acquire(context.Background(), flight.AcquireParams{Key: key, OwnerID: "other", WantResult: true})
			if err != nil || d.Action != flight.ActionResultHit || string(d.Result) != `{"score":9}` {
				t.Fatalf("after the second call: %+v, %v; want a hit on the held result", d, err)
			}
		})
	}
}
