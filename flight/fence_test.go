package flight_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/flightdeck-ai/flightdeck/flight"
)

// TestArchiveFence: the fence answers what the archive knows; a failure tells nothing and is
// reported; a caller with no time left asks nothing; the question is bounded by half the
// caller's remaining time.
func TestArchiveFence(t *testing.T) {
	var calls int
	var lastBound time.Duration
	var reported []error
	fence := func(ctx context.Context, key string) (int64, bool, error) {
		calls++
		dl, _ := ctx.Deadline()
		lastBound = time.Until(dl)
		switch key {
		case "known":
			return 42, true, nil
		case "broken":
			return 0, false, errors.New("archive down")
		}
		return 0, false, nil
	}
	f := flight.ArchiveFence(fence, func(_ string, err error) { reported = append(reported, err) })
	ctx := context.Background()
	if tok, ok := f(ctx, "known"); !ok || tok != 42 || lastBound > time.Second {
		t.Errorf("known: %d %v (bound %v)", tok, ok, lastBound)
	}
	if _, ok := f(ctx, "none"); ok || len(reported) != 0 {
		t.Errorf("none: %v, reported %v", ok, reported)
	}
	if _, ok := f(ctx, "broken"); ok || len(reported) != 1 {
		t.Errorf("broken: %v, reported %v", ok, reported)
	}
	short, cancel := context.WithTimeout(ctx, 400*time.Millisecond)
	defer cancel()
	f(short, "known")
	if lastBound > 200*time.Millisecond {
		t.Errorf("bound %v with 400 ms left, want at most half", lastBound)
	}
	n := calls
	done, cancel2 := context.WithTimeout(ctx, time.Millisecond)
	defer cancel2()
	time.Sleep(2 * time.Millisecond)
	if _, ok := f(done, "known"); ok || calls != n || len(reported) != 2 || !errors.Is(reported[1], context.DeadlineExceeded) {
		t.Errorf("no time left: ok %v, %d calls (want %d), reported %v", ok, calls, n, reported)
	}
}

// TestWriteBackFence: an owner whose flight records are gone (a Redis data loss takes the
// fence with them) does not write them back, from its complete or its heartbeat, when a
// larger token of the key is known outside Redis (Config.WriteBackFence: the archive's); with
// a smaller one, or none, it does.
func TestWriteBackFence(t *testing.T) {
	modes(t, func(t *testing.T, b *bundle) {
		known := map[string]int64{}
		c, err := flight.NewCoordinator(flight.Config{Client: b.rdb, Keyspace: b.ks, Consumer: "test",
			AnswerAfterScript: b.mode == "return",
			WriteBackFence: func(_ context.Context, key string) (int64, bool) {
				tok, ok := known[key]
				return tok, ok
			}})
		if err != nil {
			t.Fatal(err)
		}
		lose := func(key string) { b.rdb.Del(b.ctx, b.ks.Flight(key), b.ks.Fence(key), b.ks.Flight(key)) }
		gone := func(key string) bool { return b.rdb.Exists(b.ctx, b.ks.Flight(key)).Val() == 0 }

		a, _ := b.own("w1")
		known["w1"] = a.Token + 1 // the owner that took over, archived
		lose("w1")
		if restored, err := c.Heartbeat(b.ctx, *a.Owner, ""); !errors.Is(err, flight.ErrStaleToken) || restored || !gone("w1") {
			t.Errorf("heartbeat with a larger archived token: restored %v, %v", restored, err)
		}
		if st, err := c.Complete(b.ctx, *a.Owner, []byte(`"stale"`), 0); !errors.Is(err, flight.ErrStaleToken) || st.Restored || !gone("w1") {
			t.Errorf("complete with a larger archived token: %+v, %v", st, err)
		}

		a2, _ := b.own("w2")
		known["w2"] = a2.Token - 1 // an older outcome of the key
		lose("w2")
		if restored, err := c.Heartbeat(b.ctx, *a2.Owner, ""); err != nil || !restored {
			t.Errorf("heartbeat with a smaller archived token: restored %v, %v", restored, err)
		}
		lose("w2")
		if st, err := c.Complete(b.ctx, *a2.Owner, []byte(`"kept"`), 0); err != nil || !st.Restored {
			t.Errorf("complete with a smaller archived token: %+v, %v", st, err)
		}

		a3, _ := b.own("w3") // none known
		lose("w3")
		if st, err := c.Complete(b.ctx, *a3.Owner, []byte(`"kept"`), 0); err != nil || !st.Restored {
			t.Errorf("complete with no archived token: %+v, %v", st, err)
		}
	})
}

// TestLapsedOwnerAsksTheFence: an owner whose flight was taken over finds its own record
// again after a failover that lost the takeover (the record rolled back): Redis would accept
// it, but the record shows what let the other owner take over (a lapsed lease; a stalled
// attempt with fresh heartbeats), so its complete, fail and heartbeat ask
// Config.WriteBackFence first and are refused by the larger token known there. An owner
// whose record lets nobody take over asks nothing.
func TestLapsedOwnerAsksTheFence(t *testing.T) {
	modes(t, func(t *testing.T, b *bundle) {
		known := map[string]int64{}
		asked := 0
		c, err := flight.NewCoordinator(flight.Config{Client: b.rdb, Keyspace: b.ks, Consumer: "test",
			AnswerAfterScript: b.mode == "return",
			WriteBackFence: func(_ context.Context, key string) (int64, bool) {
				asked++
				tok, ok := known[key]
				return tok, ok
			}})
		if err != nil {
			t.Fatal(err)
		}
		short := b.pol
		short.Lease = 200 * time.Millisecond
		a := b.acquireWith(flight.AcquireParams{Key: "l1", OwnerID: "A", Task: b.task("ta"), Start: true, Policy: short})
		snapshot, err := b.rdb.Dump(b.ctx, b.ks.Flight("l1")).Result()
		if err != nil {
			t.Fatal(err)
		}
		time.Sleep(300 * time.Millisecond) // A is paused past its lease
		bd := b.acquireWith(flight.AcquireParams{Key: "l1", OwnerID: "B", Task: b.task("tb"), Start: true, Policy: short})
		if bd.Action != flight.ActionOwner || bd.Reason != flight.ReasonTakeover {
			t.Fatalf("B: %+v, want a takeover", bd)
		}
		known["l1"] = bd.Token // B claimed the key durably
		// A failover loses B's acquire: the record rolls back to A's.
		if err := b.rdb.RestoreReplace(b.ctx, b.ks.Flight("l1"), 0, snapshot).Err(); err != nil {
			t.Fatal(err)
		}
		if _, err := c.Heartbeat(b.ctx, *a.Owner, ""); !errors.Is(err, flight.ErrStaleToken) {
			t.Errorf("lapsed heartbeat: %v, want ErrStaleToken", err)
		}
		if _, err := c.Fail(b.ctx, *a.Owner, flight.Failure{Type: "bad_request", Code: "x"}, 0); !errors.Is(err, flight.ErrStaleToken) {
			t.Errorf("lapsed fail: %v, want ErrStaleToken", err)
		}
		if _, err := c.Complete(b.ctx, *a.Owner, []byte(`"zombie"`), 0); !errors.Is(err, flight.ErrStaleToken) {
			t.Errorf("lapsed complete: %v, want ErrStaleToken", err)
		}
		if m, err := c.Get(b.ctx, "l1"); err != nil || m.Status != flight.StatusRunning || m.OwnerToken != a.Token {
			t.Errorf("the rolled-back record changed: %+v %v", m, err)
		}

		// A stalled attempt is taken over (expired) while its owner's heartbeats are fresh.
		stall := b.pol
		stall.Lease, stall.StallTimeout = 5*time.Second, 200*time.Millisecond
		s1 := b.acquireWith(flight.AcquireParams{Key: "s1", OwnerID: "A", Task: b.task("td"), Start: true, Policy: stall})
		b.set("s1", "progressAt", "now-5s")
		stalled, err := b.rdb.Dump(b.ctx, b.ks.Flight("s1")).Result()
		if err != nil {
			t.Fatal(err)
		}
		sb := b.acquireWith(flight.AcquireParams{Key: "s1", OwnerID: "B", Task: b.task("te"), Start: true, Policy: stall})
		if sb.Action != flight.ActionOwner || sb.Reason != flight.ReasonExpired {
			t.Fatalf("B on the stalled flight: %+v, want an expired takeover", sb)
		}
		known["s1"] = sb.Token
		if err := b.rdb.RestoreReplace(b.ctx, b.ks.Flight("s1"), 0, stalled).Err(); err != nil {
			t.Fatal(err)
		}
		if _, err := c.Complete(b.ctx, *s1.Owner, []byte(`"stalled"`), 0); !errors.Is(err, flight.ErrStaleToken) {
			t.Errorf("stalled owner's complete after the rollback: %v, want ErrStaleToken", err)
		}

		// A lapsed owner the archive knows nothing newer of goes on.
		l2 := b.acquireWith(flight.AcquireParams{Key: "l2", OwnerID: "A", Task: b.task("tc"), Start: true, Policy: short})
		time.Sleep(300 * time.Millisecond)
		if st, err := c.Complete(b.ctx, *l2.Owner, []byte(`"late"`), 0); err != nil || !st.Answered {
			t.Errorf("lapsed complete with nothing newer known: %+v %v", st, err)
		}
		f2 := b.acquireWith(flight.AcquireParams{Key: "f2", OwnerID: "A", Task: b.task("tf"), Start: true, Policy: short})
		time.Sleep(300 * time.Millisecond)
		if st, err := c.Fail(b.ctx, *f2.Owner, flight.Failure{Type: "bad_request", Code: "x"}, 0); err != nil || !st.Final {
			t.Errorf("lapsed fail with nothing newer known: %+v %v", st, err)
		}
		// A heartbeat of a stalled record with nothing newer known goes on to expire it.
		h2 := b.acquireWith(flight.AcquireParams{Key: "h2", OwnerID: "A", Task: b.task("tg"), Start: true, Policy: stall})
		b.set("h2", "progressAt", "now-5s")
		if _, err := c.Heartbeat(b.ctx, *h2.Owner, ""); !errors.Is(err, flight.ErrExpired) {
			t.Errorf("stalled heartbeat with nothing newer known: %v, want ErrExpired", err)
		}

		// An owner within its lease asks nothing.
		asked = 0
		l3, _ := b.own("l3")
		if _, err := c.Heartbeat(b.ctx, *l3.Owner, ""); err != nil {
			t.Fatal(err)
		}
		if _, err := c.Complete(b.ctx, *l3.Owner, []byte(`"v"`), 0); err != nil {
			t.Fatal(err)
		}
		if asked != 0 {
			t.Errorf("an owner within its lease asked the fence %d times", asked)
		}
	})
}
