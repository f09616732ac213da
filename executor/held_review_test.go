package executor_test

import (
	"context"
	"path/filepath"
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
	"github.com/flightdeck-ai/flightdeck/internal/testkit/redistest"
	"github.com/flightdeck-ai/flightdeck/topics"
)

// memArchive is an in-memory flight.Archive: the last outcome recorded per key.
type memArchive struct {
	mu sync.Mutex
	m  map[string]flight.Archived
}

func (a *memArchive) Lookup(_ context.Context, key string) (flight.Archived, bool, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	v, ok := a.m[key]
	return v, ok, nil
}

func (a *memArchive) Record(v flight.Archived) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.m == nil {
		a.m = map[string]flight.Archived{}
	}
	a.m[v.Key] = v
}

// TestExecutorDoesNotStoreACancelledRunsHeldResult: the flight is cancelled while its owner's
// function runs; the function answers anyway, Redis goes away before the result's write, and
// the outcome is spooled (and, with an archive, archived at once). Redis comes back with its
// data (AOF): the CANCELLED record has ended, the fence still closes the owner's token. The
// next caller owns a new flight: it must not complete it with the cancelled run's result,
// held or archived (that result can never be stored, DESIGN.md section 3); it runs the
// function.
func TestExecutorDoesNotStoreACancelledRunsHeldResult(t *testing.T) {
	for _, withArchive := range []bool{false, true} {
		t.Run(map[bool]string{false: "held", true: "held and archived"}[withArchive], func(t *testing.T) {
			srv := redistest.Start(t, &redistest.Options{Args: []string{"--appendonly", "yes", "--appendfsync", "always"}})
			prefix := redistest.Prefix()
			rdb := redisconn.NewClient(&redis.Options{Addr: srv.Addr(), MaxRetries: -1, DialTimeout: 200 * time.Millisecond})
			t.Cleanup(func() { _ = rdb.Close() })
			coord, err := flight.NewCoordinator(flight.Config{Client: rdb, Keyspace: topics.Keyspace{Prefix: prefix}})
			if err != nil {
				t.Fatal(err)
			}
			log := zerolog.New(&syncBuf{})
			cfg := executor.Config{Coordinator: coord, NodeID: "n1",
				Stages:  map[string]executor.StageOptions{stage: fastPolicy()},
				Breaker: executor.BreakerConfig{FailureThreshold: 1000}, SpoolDir: filepath.Join(t.TempDir(), "spool"),
				FlushInterval: time.Hour, // the write-back would be refused; the caller comes first
				Logger:        &log, Registry: prometheus.NewRegistry()}
			archived := &memArchive{}
			if withArchive {
				cfg.Archive = archived
			}
			e, err := executor.New(cfg)
			if err != nil {
				t.Fatal(err)
			}
			e.Start(context.Background())
			t.Cleanup(func() { _ = e.Close() })

			key, err := flight.NamespacedKey(stage, "acme", "cancelled", 1)
			if err != nil {
				t.Fatal(err)
			}
			var runs atomic.Int64
			fn := func(context.Context, func()) ([]byte, error) {
				if runs.Add(1) == 1 {
					// The client cancels the key; its record lives 1 ms, the fence much longer.
					if _, err := coord.Cancel(context.Background(), key, "client", flight.CancelParams{TTL: time.Millisecond}); err != nil {
						t.Errorf("cancel: %v", err)
					}
					srv.Stop() // the result write fails: the outcome is spooled
					return []byte(`{"run":"cancelled"}`), nil
				}
				return []byte(`{"run":"fresh"}`), nil
			}
			first, err := e.Do(context.Background(), stage, key, fn)
			if err != nil || !first.Uncertain || e.Spooled() != 1 {
				t.Fatalf("first call: %+v, %v, spooled %d; want an uncertain outcome in the spool", first, err, e.Spooled())
			}
			if a, ok, _ := archived.Lookup(context.Background(), key); withArchive && (!ok || a.Status != flight.StatusSucceeded) {
				t.Fatalf("archived %+v %v, want the spooled result", a, ok)
			}
			srv.Restart() // AOF: the fence of the cancelled run is back
			second, err := e.Do(context.Background(), stage, key, fn)
			if err != nil {
				t.Fatalf("second call: %v", err)
			}
			if string(second.Value) != `{"run":"fresh"}` {
				t.Errorf("second call: %s (%s, ran %d times); want a fresh run: the cancelled run's result was stored under a new token",
					second.Value, second.Shared, runs.Load())
			}
			d, err := coord.Acquire(context.Background(), flight.AcquireParams{Key: key, OwnerID: "other", WantResult: true})
			if err != nil || d.Action != flight.ActionResultHit || string(d.Result) == `{"run":"cancelled"}` {
				t.Errorf("stored flight: %+v, %v; the cancelled run's result may not be stored", d, err)
			}
		})
	}
}
