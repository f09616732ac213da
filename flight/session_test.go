package flight_test

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/redis/go-redis/v9"

	"github.com/flightdeck-ai/flightdeck/flight"
	"github.com/flightdeck-ai/flightdeck/internal/testkit/redistest"
	"github.com/flightdeck-ai/flightdeck/topics"
)

// sessionBundle is what one session lock test needs: a lock on a private key prefix.
type sessionBundle struct {
	t   *testing.T
	ctx context.Context
	r   *redistest.Target
	ks  topics.Keyspace
	l   *flight.SessionLock
}

func newSessionBundle(t *testing.T) *sessionBundle {
	t.Helper()
	r := redistest.New(t)
	ks := topics.Keyspace{Prefix: r.Prefix}
	return &sessionBundle{t: t, ctx: context.Background(), r: r, ks: ks,
		l: flight.NewSessionLock(r.Client, ks)}
}

// lockState is the stored session lock, read raw from Redis.
type lockState struct {
	Held   bool
	Token  int64
	Holder string
}

func (b *sessionBundle) state(session string) (lockState, time.Duration) {
	b.t.Helper()
	v, err := b.r.Client.Get(b.ctx, b.ks.SessionLock("acme", session)).Result()
	if errors.Is(err, redis.Nil) {
		return lockState{}, 0
	}
	if err != nil {
		b.t.Fatal(err)
	}
	ts, holder, ok := strings.Cut(v, "|")
	if !ok {
		b.t.Fatalf("lock value %q has no '|'", v)
	}
	tok, err := strconv.ParseInt(ts, 10, 64)
	if err != nil {
		b.t.Fatalf("lock value %q: %v", v, err)
	}
	pttl, err := b.r.Client.PTTL(b.ctx, b.ks.SessionLock("acme", session)).Result()
	if err != nil {
		b.t.Fatal(err)
	}
	return lockState{Held: true, Token: tok, Holder: holder}, pttl
}

func (b *sessionBundle) mustAcquire(session, holder string, lease time.Duration) int64 {
	b.t.Helper()
	tok, ok, err := b.l.TryAcquire(b.ctx, "acme", session, holder, lease)
	if err != nil || !ok {
		b.t.Fatalf("TryAcquire(%s, %s) = %d, %v, %v; want ok", session, holder, tok, ok, err)
	}
	return tok
}

// waitFree waits until the session's lock key is gone (its lease ran out).
func (b *sessionBundle) waitFree(session string) {
	b.t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for time.Now().Before(deadline) {
		n, err := b.r.Client.Exists(b.ctx, b.ks.SessionLock("acme", session)).Result()
		if err != nil {
			b.t.Fatal(err)
		}
		if n == 0 {
			return
		}
		time.Sleep(5 * time.Millisecond)
	}
	b.t.Fatalf("lock of %s did not expire", session)
}

// TestSessionLockTransitions runs each transition of the lock from a known state: free, or
// held by A with token tokA and a 2 s lease.
func TestSessionLockTransitions(t *testing.T) {
	t.Parallel()
	b := newSessionBundle(t)
	const short, long = 2 * time.Second, time.Minute

	const (
		own   = "own"   // A's token
		stale = "stale" // A's token - 1
		other = "other" // a token that never held the lock
	)
	tests := []struct {
		name   string
		held   bool   // A holds the lock before the call
		op     string // acquire, renew or release
		holder string // acquire: the holder
		token  string // renew, release: own, stale or other
		// wantOK: acquire answers ok; renew and release answer nil (else ErrLockLost).
		wantOK bool
		// wantTok: acquire's token is A's ("A"), another holder's is new and larger ("new").
		wantTok string
		// want is the lock afterwards (Token 0 stands for A's token, -1 for acquire's token).
		want lockState
		// wantLongLease: the lease afterwards is the call's long one, not A's short one.
		wantLongLease bool
	}{
		{name: "AcquireFree", op: "acquire", holder: "B", wantOK: true, wantTok: "new",
			want: lockState{Held: true, Token: -1, Holder: "B"}, wantLongLease: true},
		{name: "AcquireBusy", held: true, op: "acquire", holder: "B", wantOK: false, wantTok: "A",
			want: lockState{Held: true, Holder: "A"}},
		{name: "ReacquireSameHolder", held: true, op: "acquire", holder: "A", wantOK: true, wantTok: "A",
			want: lockState{Held: true, Holder: "A"}, wantLongLease: true},
		{name: "AcquireHolderPrefixIsBusy", held: true, op: "acquire", holder: "A|x", wantOK: false,
			wantTok: "A", want: lockState{Held: true, Holder: "A"}},
		{name: "RenewHolder", held: true, op: "renew", token: own, wantOK: true,
			want: lockState{Held: true, Holder: "A"}, wantLongLease: true},
		{name: "RenewStale", held: true, op: "renew", token: stale,
			want: lockState{Held: true, Holder: "A"}},
		{name: "RenewFree", op: "renew", token: other, want: lockState{}},
		{name: "ReleaseHolder", held: true, op: "release", token: own, wantOK: true, want: lockState{}},
		{name: "ReleaseStale", held: true, op: "release", token: stale,
			want: lockState{Held: true, Holder: "A"}},
		{name: "ReleaseFree", op: "release", token: other, want: lockState{}},
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			session := fmt.Sprintf("s-%d", i)
			var tokA int64
			if tt.held {
				tokA = b.mustAcquire(session, "A", short)
			}
			arg := map[string]int64{own: tokA, stale: tokA - 1, other: 12345}[tt.token]

			var gotTok int64
			var gotOK bool
			switch tt.op {
			case "acquire":
				var err error
				gotTok, gotOK, err = b.l.TryAcquire(b.ctx, "acme", session, tt.holder, long)
				if err != nil {
					t.Fatalf("TryAcquire: %v", err)
				}
				switch tt.wantTok {
				case "A":
					if gotTok != tokA {
						t.Errorf("token = %d, want A's %d", gotTok, tokA)
					}
				case "new":
					if gotTok <= tokA {
						t.Errorf("token = %d, want > %d", gotTok, tokA)
					}
				}
			case "renew", "release":
				var err error
				if tt.op == "renew" {
					err = b.l.Renew(b.ctx, "acme", session, arg, long)
				} else {
					err = b.l.Release(b.ctx, "acme", session, arg)
				}
				gotOK = err == nil
				if err != nil && !errors.Is(err, flight.ErrLockLost) {
					t.Fatalf("%s: %v, want nil or ErrLockLost", tt.op, err)
				}
			}
			if gotOK != tt.wantOK {
				t.Errorf("ok = %v, want %v", gotOK, tt.wantOK)
			}

			want := tt.want
			switch want.Token {
			case 0:
				if want.Held {
					want.Token = tokA
				}
			case -1:
				want.Token = gotTok
			}
			got, pttl := b.state(session)
			if diff := cmp.Diff(want, got); diff != "" {
				t.Errorf("lock after %s (-want +got):\n%s", tt.op, diff)
			}
			if got.Held {
				if long := pttl > short; long != tt.wantLongLease {
					t.Errorf("pttl = %v, want long lease %v", pttl, tt.wantLongLease)
				}
			}
		})
	}
}

func TestSessionLockRejectsBadArguments(t *testing.T) {
	t.Parallel()
	b := newSessionBundle(t)
	for _, id := range []string{"", "a{b}", "a b", strings.Repeat("x", flight.MaxKeyLen+1)} {
		if _, _, err := b.l.TryAcquire(b.ctx, "acme", id, "A", time.Second); !errors.Is(err, flight.ErrInvalidKey) {
			t.Errorf("TryAcquire(%q) = %v, want ErrInvalidKey", id, err)
		}
		if err := b.l.Renew(b.ctx, "acme", id, 1, time.Second); !errors.Is(err, flight.ErrInvalidKey) {
			t.Errorf("Renew(%q) = %v, want ErrInvalidKey", id, err)
		}
		if err := b.l.Release(b.ctx, "acme", id, 1); !errors.Is(err, flight.ErrInvalidKey) {
			t.Errorf("Release(%q) = %v, want ErrInvalidKey", id, err)
		}
	}
	if _, _, err := b.l.TryAcquire(b.ctx, "acme", "s", "", time.Second); err == nil {
		t.Error("TryAcquire with an empty holder succeeded")
	}
	if _, _, err := b.l.TryAcquire(b.ctx, "acme", "s", "A", 0); err == nil {
		t.Error("TryAcquire with a zero lease succeeded")
	}
	if err := b.l.Renew(b.ctx, "acme", "s", 1, time.Microsecond); err == nil {
		t.Error("Renew with a sub-millisecond lease succeeded")
	}
	if _, err := b.l.Acquire(b.ctx, "acme", "s", "A", time.Second, 0); err == nil {
		t.Error("Acquire with a zero poll succeeded")
	}
	if got, _ := b.state("s"); got.Held {
		t.Errorf("a refused call took the lock: %+v", got)
	}
}

func TestSessionLockTokenIncreases(t *testing.T) {
	t.Parallel()
	b := newSessionBundle(t)

	t.Run("AcrossRelease", func(t *testing.T) {
		var prev int64
		for i := range 20 {
			holder := []string{"A", "B"}[i%2]
			tok := b.mustAcquire("rel", holder, time.Minute)
			if tok <= prev {
				t.Fatalf("round %d: token %d, want > %d", i, tok, prev)
			}
			if err := b.l.Release(b.ctx, "acme", "rel", tok); err != nil {
				t.Fatal(err)
			}
			prev = tok
		}
	})

	t.Run("AcrossExpiry", func(t *testing.T) {
		t1 := b.mustAcquire("exp", "A", 30*time.Millisecond)
		fttl, err := b.r.Client.PTTL(b.ctx, b.ks.SessionFence("acme", "exp")).Result()
		if err != nil {
			t.Fatal(err)
		}
		if fttl < 24*time.Hour {
			t.Errorf("fence TTL = %v, want days", fttl)
		}
		b.waitFree("exp")
		t2 := b.mustAcquire("exp", "B", 30*time.Millisecond)
		if t2 <= t1 {
			t.Fatalf("token after expiry %d, want > %d", t2, t1)
		}
		// The fence key is lost too (evicted, expired): the token still grows.
		b.waitFree("exp")
		if err := b.r.Client.Del(b.ctx, b.ks.SessionFence("acme", "exp")).Err(); err != nil {
			t.Fatal(err)
		}
		t3 := b.mustAcquire("exp", "A", time.Minute)
		if t3 <= t2 {
			t.Fatalf("token after expiry and fence loss %d, want > %d", t3, t2)
		}
	})

	t.Run("AfterFenceLossWhileHeld", func(t *testing.T) {
		t1 := b.mustAcquire("held", "A", time.Minute)
		if err := b.r.Client.Del(b.ctx, b.ks.SessionFence("acme", "held")).Err(); err != nil {
			t.Fatal(err)
		}
		if err := b.l.Renew(b.ctx, "acme", "held", t1, time.Minute); err != nil {
			t.Fatal(err)
		}
		if err := b.l.Release(b.ctx, "acme", "held", t1); err != nil {
			t.Fatal(err)
		}
		if t2 := b.mustAcquire("held", "B", time.Minute); t2 <= t1 {
			t.Fatalf("token %d, want > %d", t2, t1)
		}
	})
}

func TestSessionLockLeaseExpiry(t *testing.T) {
	t.Parallel()
	b := newSessionBundle(t)
	const lease = 100 * time.Millisecond

	tokA := b.mustAcquire("s", "A", lease)
	tok, ok, err := b.l.TryAcquire(b.ctx, "acme", "s", "B", lease)
	if err != nil || ok || tok != tokA {
		t.Fatalf("B while A holds: %d, %v, %v; want A's token %d, not ok", tok, ok, err, tokA)
	}
	b.waitFree("s")
	tokB := b.mustAcquire("s", "B", time.Minute)
	if tokB <= tokA {
		t.Fatalf("B's token %d, want > %d", tokB, tokA)
	}

	// A's token is stale now: it can neither renew nor release, and B keeps the lock.
	if err := b.l.Renew(b.ctx, "acme", "s", tokA, time.Minute); !errors.Is(err, flight.ErrLockLost) {
		t.Errorf("stale Renew = %v, want ErrLockLost", err)
	}
	if err := b.l.Release(b.ctx, "acme", "s", tokA); !errors.Is(err, flight.ErrLockLost) {
		t.Errorf("stale Release = %v, want ErrLockLost", err)
	}
	if got, _ := b.state("s"); got != (lockState{Held: true, Token: tokB, Holder: "B"}) {
		t.Errorf("lock = %+v, want B's with %d", got, tokB)
	}
	// A renew after its own lease ran out fails even when nobody took the lock.
	tokC := b.mustAcquire("s2", "C", 30*time.Millisecond)
	b.waitFree("s2")
	if err := b.l.Renew(b.ctx, "acme", "s2", tokC, time.Minute); !errors.Is(err, flight.ErrLockLost) {
		t.Errorf("Renew after expiry = %v, want ErrLockLost", err)
	}
	if got, _ := b.state("s2"); got.Held {
		t.Errorf("Renew after expiry took the lock: %+v", got)
	}
}

func TestSessionLockAcquireWaitsForRelease(t *testing.T) {
	t.Parallel()
	b := newSessionBundle(t)
	tokA := b.mustAcquire("s", "A", time.Minute)

	type result struct {
		tok int64
		err error
		at  time.Time
	}
	done := make(chan result, 1)
	go func() {
		tok, err := b.l.Acquire(b.ctx, "acme", "s", "B", time.Minute, 10*time.Millisecond)
		done <- result{tok, err, time.Now()}
	}()
	select {
	case r := <-done:
		t.Fatalf("Acquire returned while A held the lock: %+v", r)
	case <-time.After(150 * time.Millisecond):
	}
	releasedAt := time.Now()
	if err := b.l.Release(b.ctx, "acme", "s", tokA); err != nil {
		t.Fatal(err)
	}
	var r result
	select {
	case r = <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("Acquire did not return after the release")
	}
	if r.err != nil {
		t.Fatal(r.err)
	}
	if !r.at.After(releasedAt) {
		t.Errorf("Acquire returned at %v, before the release at %v", r.at, releasedAt)
	}
	if r.tok <= tokA {
		t.Errorf("B's token %d, want > %d", r.tok, tokA)
	}
	if got, _ := b.state("s"); got != (lockState{Held: true, Token: r.tok, Holder: "B"}) {
		t.Errorf("lock = %+v, want B's", got)
	}
}

// TestSessionLockAcquireWakesAtLeaseEnd: a waiter does not sleep a long poll past the
// holder's lease end.
func TestSessionLockAcquireWakesAtLeaseEnd(t *testing.T) {
	t.Parallel()
	b := newSessionBundle(t)
	b.mustAcquire("s", "A", 200*time.Millisecond)
	// A waiter that slept its 30 s poll would outlast this 10 s deadline.
	ctx, cancel := context.WithTimeout(b.ctx, 10*time.Second)
	defer cancel()
	if _, err := b.l.Acquire(ctx, "acme", "s", "B", time.Minute, 30*time.Second); err != nil {
		t.Fatalf("Acquire after the holder's 200 ms lease, with a 30 s poll: %v", err)
	}
}

func TestSessionLockAcquireHonoursContext(t *testing.T) {
	t.Parallel()
	b := newSessionBundle(t)
	b.mustAcquire("s", "A", time.Minute)

	t.Run("Deadline", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(b.ctx, 100*time.Millisecond)
		defer cancel()
		_, err := b.l.Acquire(ctx, "acme", "s", "B", time.Minute, 20*time.Millisecond)
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("Acquire = %v, want DeadlineExceeded", err)
		}
	})

	t.Run("Cancel", func(t *testing.T) {
		ctx, cancel := context.WithCancel(b.ctx)
		errc := make(chan error, 1)
		go func() {
			_, err := b.l.Acquire(ctx, "acme", "s", "B", time.Minute, time.Hour)
			errc <- err
		}()
		time.Sleep(50 * time.Millisecond)
		cancel()
		select {
		case err := <-errc:
			if !errors.Is(err, context.Canceled) {
				t.Fatalf("Acquire = %v, want Canceled", err)
			}
		case <-time.After(2 * time.Second):
			t.Fatal("Acquire ignored the cancel")
		}
	})

	if got, _ := b.state("s"); got.Holder != "A" {
		t.Errorf("lock = %+v, want A's still", got)
	}
}

// TestSessionLockContention: 20 workers on 4 clients take the lock 10 times each; no two
// critical sections overlap and tokens grow in acquisition order.
func TestSessionLockContention(t *testing.T) {
	t.Parallel()
	b := newSessionBundle(t)
	opt, err := redis.ParseURL(b.r.URL)
	if err != nil {
		t.Fatal(err)
	}
	const clients, workers, rounds = 4, 20, 10
	locks := make([]*flight.SessionLock, clients)
	for i := range locks {
		c := redis.NewClient(opt)
		t.Cleanup(func() { _ = c.Close() })
		locks[i] = flight.NewSessionLock(c, b.ks)
	}

	type section struct {
		start, end time.Time
		token      int64
		worker     int
	}
	var (
		mu       sync.Mutex
		sections []section
		wg       sync.WaitGroup
	)
	ctx, cancel := context.WithTimeout(b.ctx, 60*time.Second)
	defer cancel()
	errs := make(chan error, workers)
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			l := locks[w%clients]
			holder := fmt.Sprintf("worker-%d", w)
			for range rounds {
				tok, err := l.Acquire(ctx, "acme", "contended", holder, 10*time.Second, 2*time.Millisecond)
				if err != nil {
					errs <- err
					return
				}
				s := section{start: time.Now(), token: tok, worker: w}
				time.Sleep(5 * time.Millisecond)
				s.end = time.Now()
				mu.Lock()
				sections = append(sections, s)
				mu.Unlock()
				if err := l.Release(ctx, "acme", "contended", tok); err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	if len(sections) != workers*rounds {
		t.Fatalf("%d critical sections, want %d", len(sections), workers*rounds)
	}
	for i := range sections {
		for j := i + 1; j < len(sections); j++ {
			a, c := sections[i], sections[j]
			if a.start.Before(c.end) && c.start.Before(a.end) {
				t.Fatalf("critical sections overlap: worker %d [%v] and worker %d [%v]",
					a.worker, a.end.Sub(a.start), c.worker, c.end.Sub(c.start))
			}
		}
	}
	sort.Slice(sections, func(i, j int) bool { return sections[i].start.Before(sections[j].start) })
	seen := make(map[int64]bool, len(sections))
	for i, s := range sections {
		if seen[s.token] {
			t.Fatalf("token %d issued twice", s.token)
		}
		seen[s.token] = true
		if i > 0 && s.token <= sections[i-1].token {
			t.Fatalf("section %d: token %d, want > %d (previous section's)", i, s.token, sections[i-1].token)
		}
	}
	if got, _ := b.state("contended"); got.Held {
		t.Errorf("lock still held after every release: %+v", got)
	}
}
