package flight_test

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

	"github.com/flightdeck-ai/flightdeck/flight"
	"github.com/flightdeck-ai/flightdeck/internal/redisconn"
	"github.com/flightdeck-ai/flightdeck/internal/redistest"
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
			cfg := flight.ExecutorConfig{Coordinator: coord, NodeID: "n1",
				Stages:  map[string]flight.StageOptions{stage: fastPolicy()},
				Breaker: flight.BreakerConfig{FailureThreshold: 1000}, SpoolDir: filepath.Join(t.TempDir(), "spool"),
				FlushInterval: time.Hour, // the write-back would be refused; the caller comes first
				Logger:        &log, Registry: prometheus.NewRegistry()}
			archived := &memArchive{}
			if withArchive {
				cfg.Archive = archived
			}
			e, err := flight.NewExecutor(cfg)
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

// TestClosedWriteBackIsNotHeld: a spooled outcome whose write-back Redis refuses because its
// run was cancelled leaves the spool and is not held for an active caller: its result may
// never be stored, and the refusal is not that caller's takeover.
func TestClosedWriteBackIsNotHeld(t *testing.T) {
	b := setup(t)
	sp := openSpool(t, filepath.Join(t.TempDir(), "s.jsonl"))
	d, _ := b.own("k-closed")
	if err := sp.Add(flight.Outcome{Stage: testStage, Key: "k-closed", Token: d.Token, Result: []byte(`"cancelled run"`)}); err != nil {
		t.Fatal(err)
	}
	if _, err := b.c.Cancel(b.ctx, "k-closed", "client", flight.CancelParams{}); err != nil {
		t.Fatal(err)
	}
	leave := sp.Enter("k-closed")
	defer leave()
	rep, err := sp.Flush(b.ctx, b.c)
	if err != nil || rep.Refused != 1 || sp.Len() != 0 {
		t.Fatalf("flush: %+v, %v, Len %d; want the write-back refused and settled", rep, err, sp.Len())
	}
	if got := held(sp, "k-closed"); got != "" {
		t.Fatalf("held = %q, want nothing: a cancelled run's result is not held for anyone", got)
	}
	if closed, err := b.c.RunClosed(b.ctx, "k-closed", d.Token); err != nil || !closed {
		t.Fatalf("RunClosed = %v, %v; want the cancelled run closed", closed, err)
	}
	for _, tok := range []int64{d.Token - 1, d.Token + 1} {
		if closed, err := b.c.RunClosed(b.ctx, "k-closed", tok); err != nil || closed {
			t.Fatalf("RunClosed of another token %d = %v, %v; want false (the fence records its own run)", tok, closed, err)
		}
	}
}

// TestWrittenBackRemembersAnsweredTasks: the spool remembers the tasks a write-back answered,
// so that they do not acquire again when they come back: those of an accepted write-back, of
// one refused because the run was closed (answered with that outcome), and of one refused
// because another token owns the flight when it answered them from the flight's outcome; not
// those it did not answer (the owner's entry no longer pending, as a data loss leaves it:
// nothing was written, and its joined tasks were left to acquire).
func TestWrittenBackRemembersAnsweredTasks(t *testing.T) {
	b := setup(t)
	sp := openSpool(t, filepath.Join(t.TempDir(), "s.jsonl"))
	spool := func(key string, d flight.Decision, task flight.Task, joined ...flight.Task) {
		t.Helper()
		o := d.Owner.Outcome([]byte(`"spooled"`))
		o.Stage, o.Task, o.Joined = testStage, task, joined
		if err := sp.Add(o); err != nil {
			t.Fatal(err)
		}
	}
	own := func(key, task string) (flight.Decision, flight.Task) {
		tk := b.task(task)
		d := b.acquireWith(flight.AcquireParams{Key: key, OwnerID: "A", Task: tk, Start: true})
		if d.Action != flight.ActionOwner {
			t.Fatalf("own %s: %+v", key, d)
		}
		return d, tk
	}
	// Accepted.
	dw, tw := own("wb-ok", "w0")
	jw := b.task("w1")
	spool("wb-ok", dw, tw, jw)
	// Refused: cancelled.
	dc, tc := own("wb-cancelled", "c0")
	jc := b.task("c1")
	spool("wb-cancelled", dc, tc, jc)
	if _, err := b.c.Cancel(b.ctx, "wb-cancelled", "client", flight.CancelParams{}); err != nil {
		t.Fatal(err)
	}
	// Refused: the flight was lost (its keys deleted) and a new owner's result is stored.
	newer := func(key string) {
		t.Helper()
		if err := b.rdb.Del(b.ctx, b.ks.FlightKeys(key)...).Err(); err != nil {
			t.Fatal(err)
		}
		d := b.acquireWith(flight.AcquireParams{Key: key, OwnerID: "B", Start: true})
		if d.Action != flight.ActionOwner {
			t.Fatalf("new owner of %s: %+v", key, d)
		}
		if _, err := b.complete(*d.Owner, `"newer"`); err != nil {
			t.Fatal(err)
		}
	}
	ds, ts := own("wb-stale", "s0")
	js := b.task("s1")
	spool("wb-stale", ds, ts, js)
	newer("wb-stale")
	// The same, its entries gone too (acknowledged by hand, as a data loss leaves them): the
	// refusal writes nothing for them.
	dl, tl := own("wb-lost", "l0")
	jl := b.task("l1")
	spool("wb-lost", dl, tl, jl)
	newer("wb-lost")
	for _, tk := range []flight.Task{tl, jl} {
		if err := b.rdb.XAck(b.ctx, tk.Stream, topics.ConsumerGroup, tk.Entry).Err(); err != nil {
			t.Fatal(err)
		}
	}

	rep, err := sp.Flush(b.ctx, b.c)
	if err != nil || rep.Written != 1 || rep.Refused != 3 {
		t.Fatalf("flush: %+v, %v", rep, err)
	}
	for _, c := range []struct {
		task flight.Task
		want bool
	}{{tw, true}, {jw, true}, {tc, true}, {jc, true}, {ts, true}, {js, true}, {tl, false}, {jl, false}} {
		if got := sp.WrittenBack(c.task); got != c.want {
			t.Errorf("WrittenBack(%s) = %v, want %v", c.task.ID, got, c.want)
		}
		if sp.WrittenBack(c.task) {
			t.Errorf("WrittenBack(%s) answered twice: it forgets once asked", c.task.ID)
		}
	}
}
