package archive_test

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/flightdeck-ai/flightdeck/archive"
	"github.com/flightdeck-ai/flightdeck/archive/postgres"
	"github.com/flightdeck-ai/flightdeck/executor"
	"github.com/flightdeck-ai/flightdeck/flight"
	"github.com/flightdeck-ai/flightdeck/internal/testkit/pgtest"
	"github.com/flightdeck-ai/flightdeck/internal/testkit/redistest"
	"github.com/flightdeck-ai/flightdeck/topics"
)

// execArchive starts what the executor tests share: a private Redis (skipping when REDIS_URL
// is set: the tests wipe it), a private PostgreSQL with the archive, and its running writer,
// stopped and closed at the end of the test. ctx ends then too.
func execArchive(t *testing.T) (context.Context, *redistest.Target, *postgres.Store, *archive.Writer) {
	t.Helper()
	pg := pgtest.New(t)
	r := redistest.New(t)
	if r.Server == nil {
		t.Skip("needs a private Redis to wipe (REDIS_URL is set)")
	}
	store := open(t, pg.URL)
	w, err := archive.NewWriter(archive.WriterConfig{Store: store, SpoolDir: t.TempDir(), Name: "exec"})
	if err != nil {
		t.Fatal(err)
	}
	ctx, stop := context.WithCancel(context.Background())
	ran := make(chan struct{})
	go func() { w.Run(ctx); close(ran) }()
	t.Cleanup(func() { stop(); <-ran; _ = w.Close(context.Background()) }) // Close after Run returned
	return ctx, r, store, w
}

// TestExecutorRehydrate: an in-process Executor with the archive. A key finished once is
// answered from the archive after Redis lost everything: 20 concurrent callers of the key
// get the same value from the archive (they share one rebuild in process), and the function
// does not run again. A final failure is answered the same
// way within the failure TTL.
func TestExecutorRehydrate(t *testing.T) {
	ctx, r, store, w := execArchive(t)

	coord, err := flight.NewCoordinator(flight.Config{Client: r.Client, Keyspace: topics.Keyspace{Prefix: r.Prefix}})
	if err != nil {
		t.Fatal(err)
	}
	opt := executor.StageOptions{Mode: executor.ModeDistributedOnly, Policy: flight.Policy{Lease: time.Second, MaxAttempts: 1}}
	e, err := executor.New(executor.Config{Coordinator: coord, NodeID: "n1", Archive: w,
		Stages: map[string]executor.StageOptions{"s": opt}, SpoolDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	e.Start(ctx)
	defer e.Close()

	var runs atomic.Int64
	ok := func(context.Context, func()) ([]byte, error) { runs.Add(1); return []byte(`{"v":1}`), nil }
	bad := func(context.Context, func()) ([]byte, error) {
		runs.Add(1)
		return nil, errors.New("boom")
	}
	keyOK, _ := flight.SemanticKey(flight.KeyParams{Stage: "s", Tenant: "acme", Input: []byte(`1`)})
	keyBad, _ := flight.SemanticKey(flight.KeyParams{Stage: "s", Tenant: "acme", Input: []byte(`2`)})
	if res, err := e.Do(ctx, "s", keyOK, ok); err != nil || res.Shared != topics.SharedOwner {
		t.Fatalf("first run: %+v %v", res, err)
	}
	if _, err := e.Do(ctx, "s", keyBad, bad); err == nil {
		t.Fatal("the failing function succeeded")
	}
	waitFor(t, "both outcomes archived", func() bool {
		_, a, _ := store.Get(context.Background(), keyOK)
		_, b, _ := store.Get(context.Background(), keyBad)
		return a && b
	})
	if err := r.Client.FlushAll(ctx).Err(); err != nil {
		t.Fatal(err)
	}

	var wg sync.WaitGroup
	shared := make(chan topics.Shared, 20)
	for range 20 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			res, err := e.Do(ctx, "s", keyOK, ok)
			if err != nil || string(res.Value) != `{"v":1}` {
				t.Errorf("after the loss: %+v %v", res, err)
			}
			shared <- res.Shared
		}()
	}
	wg.Wait()
	close(shared)
	count := map[topics.Shared]int{}
	for s := range shared {
		count[s]++
	}
	if count[topics.SharedArchive] == 0 || count[topics.SharedOwner] != 0 {
		t.Errorf("shared %v: want answers from the archive (in-process callers share one), none from a run", count)
	}
	_, err = e.Do(ctx, "s", keyBad, bad)
	var oe *flight.OutcomeError
	if !errors.As(err, &oe) || oe.Status != flight.StatusFailed {
		t.Errorf("failed key after the loss: %v, want its archived failure", err)
	}
	if n := runs.Load(); n != 2 {
		t.Errorf("the function ran %d times in all, want 2 (once per key)", n)
	}
}

// TestExecutorArchivesFinalDecisions: an in-process caller whose acquire ends a flight for
// good (a cancelled flight, or one whose owner lapsed with its attempts spent) archives that
// outcome under the flight's token, as a consumer does.
func TestExecutorArchivesFinalDecisions(t *testing.T) {
	ctx, r, store, w := execArchive(t)
	coord, err := flight.NewCoordinator(flight.Config{Client: r.Client, Keyspace: topics.Keyspace{Prefix: r.Prefix}})
	if err != nil {
		t.Fatal(err)
	}
	pol := flight.Policy{Lease: 50 * time.Millisecond, MaxAttempts: 1}
	e, err := executor.New(executor.Config{Coordinator: coord, NodeID: "n1", Archive: w,
		Stages: map[string]executor.StageOptions{"s": {Mode: executor.ModeDistributedOnly, Policy: pol}}, SpoolDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	e.Start(ctx)
	defer e.Close()
	never := func(context.Context, func()) ([]byte, error) {
		t.Error("the function ran on a flight that had ended")
		return nil, errors.New("ran")
	}
	for _, c := range []struct {
		input string
		end   func(key string)
		want  flight.Status
	}{
		{"1", func(key string) {
			if _, err := coord.Cancel(ctx, key, "stop", flight.CancelParams{Stage: "s"}); err != nil {
				t.Fatal(err)
			}
		}, flight.StatusCancelled},
		{"2", func(string) { time.Sleep(3 * pol.Lease) }, flight.StatusExpired},
	} {
		key, _ := flight.SemanticKey(flight.KeyParams{Stage: "s", Tenant: "acme", Input: []byte(c.input)})
		d, err := coord.Acquire(ctx, flight.AcquireParams{Key: key, OwnerID: "other", Stage: "s", Tenant: "acme",
			Policy: pol, Start: true})
		if err != nil || d.Action != flight.ActionOwner {
			t.Fatalf("acquire: %+v %v", d, err)
		}
		c.end(key)
		var oe *flight.OutcomeError
		if _, err := e.Do(ctx, "s", key, never); !errors.As(err, &oe) || oe.Status != c.want {
			t.Fatalf("Do: %v, want %s", err, c.want)
		}
		waitFor(t, string(c.want)+" archived", func() bool {
			a, ok, _ := store.Get(context.Background(), key)
			return ok && a.Status == c.want && a.Token == d.Token
		})
	}
}

// TestExecutorTakeoverClaim: an in-process owner takes over a flight whose owner stopped
// heartbeating; Redis loses its data while the function runs; the old owner's complete is
// then refused by the new owner's claim in the archive, and the caller gets the new run's
// value.
func TestExecutorTakeoverClaim(t *testing.T) {
	ctx, r, store, w := execArchive(t)

	ks := topics.Keyspace{Prefix: r.Prefix}
	coord, err := flight.NewCoordinator(flight.Config{Client: r.Client, Keyspace: ks, WriteBackFence: flight.ArchiveFence(w.Fence, nil)})
	if err != nil {
		t.Fatal(err)
	}
	e, err := executor.New(executor.Config{Coordinator: coord, NodeID: "n1", Archive: w,
		Stages:   map[string]executor.StageOptions{"s": {Mode: executor.ModeDistributedOnly, Policy: flight.Policy{Lease: 2 * time.Second}}},
		SpoolDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	e.Start(ctx)
	defer e.Close()

	key, _ := flight.SemanticKey(flight.KeyParams{Stage: "s", Tenant: "acme", Input: []byte(`1`)})
	d, err := coord.Acquire(ctx, flight.AcquireParams{Key: key, OwnerID: "zombie", Stage: "s", Tenant: "acme",
		Policy: flight.Policy{Lease: 200 * time.Millisecond}, Start: true})
	if err != nil || d.Action != flight.ActionOwner {
		t.Fatalf("zombie acquire: %+v %v", d, err)
	}
	time.Sleep(300 * time.Millisecond) // its lease lapses
	var zombieErr error
	res, err := e.Do(ctx, "s", key, func(ctx context.Context, _ func()) ([]byte, error) {
		if err := r.Client.FlushAll(ctx).Err(); err != nil {
			return nil, err
		}
		_, zombieErr = coord.Complete(ctx, *d.Owner, []byte(`"zombie"`), time.Second)
		return []byte(`"taker"`), nil
	})
	if err != nil || string(res.Value) != `"taker"` || res.Token <= d.Owner.Token {
		t.Fatalf("Do: %+v %v, want the taker's value under a larger token than %d", res, err, d.Owner.Token)
	}
	if !errors.Is(zombieErr, flight.ErrStaleToken) {
		t.Errorf("the zombie's complete after the data loss answered %v, want ErrStaleToken", zombieErr)
	}
	if tok, ok, err := store.Fence(ctx, key); err != nil || !ok || tok != res.Token {
		t.Errorf("archive fence %d %v %v, want the taker's claim %d", tok, ok, err, res.Token)
	}
}
