package flight_test

import (
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/redis/go-redis/v9"

	"github.com/flightdeck-ai/flightdeck/flight"
)

// TestContention: 200 goroutines on 4 clients race acquire on 20 keys; exactly one owner per
// key, every other caller a follower parked on that owner's flight.
func TestContention(t *testing.T) {
	b := setup(t)
	opt := b.rdb.Options()
	coords := make([]*flight.Coordinator, 4)
	for i := range coords {
		rdb := redis.NewClient(&redis.Options{Addr: opt.Addr, Username: opt.Username, Password: opt.Password})
		t.Cleanup(func() { _ = rdb.Close() })
		c, err := flight.NewCoordinator(flight.Config{Client: rdb, Keyspace: b.ks})
		if err != nil {
			t.Fatal(err)
		}
		coords[i] = c
	}
	const goroutines, keys = 200, 20
	var (
		mu        sync.Mutex
		owners    = map[string][]string{}
		followers = map[string]int{}
		tokens    = map[string]map[int64]bool{}
		start     = make(chan struct{})
		wg        sync.WaitGroup
	)
	for g := range goroutines {
		wg.Add(1)
		go func() {
			defer wg.Done()
			key := fmt.Sprintf("race-%d", g%keys)
			task := fmt.Sprintf("task-%d", g)
			<-start
			d, err := coords[g%4].Acquire(b.ctx, flight.AcquireParams{Key: key, OwnerID: fmt.Sprintf("node-%d", g%4),
				TaskID: task, Stage: "interview-evaluation", Tenant: "acme", Policy: b.pol})
			if err != nil {
				t.Error(err)
				return
			}
			mu.Lock()
			defer mu.Unlock()
			if tokens[key] == nil {
				tokens[key] = map[int64]bool{}
			}
			tokens[key][d.Token] = true
			switch d.Action {
			case flight.ActionOwner:
				owners[key] = append(owners[key], task)
			case flight.ActionFollowerWait:
				followers[key]++
				if d.Reason != flight.ReasonParked {
					t.Errorf("%s: follower reason %s", task, d.Reason)
				}
			default:
				t.Errorf("%s: action %s", task, d.Action)
			}
		}()
	}
	close(start)
	wg.Wait()
	for k := range keys {
		key := fmt.Sprintf("race-%d", k)
		if len(owners[key]) != 1 || followers[key] != goroutines/keys-1 || len(tokens[key]) != 1 {
			t.Errorf("%s: owners %v, followers %d, distinct tokens %d", key, owners[key], followers[key], len(tokens[key]))
			continue
		}
		if m := b.get(key); len(m.Parked) != goroutines/keys-1 || m.TaskID != owners[key][0] {
			t.Errorf("%s: %d parked, owner task %s", key, len(m.Parked), m.TaskID)
		}
	}
}

// TestZombieFencing: owner A stops heartbeating past the lease, B takes over with a larger
// token and completes; A's late complete is refused and the stored result is B's.
func TestZombieFencing(t *testing.T) {
	b := setup(t)
	b.pol.Lease = 150 * time.Millisecond
	a := b.own("zombie")
	if err := b.c.Heartbeat(b.ctx, "zombie", a.Token, "", b.pol); err != nil {
		t.Fatal(err)
	}
	time.Sleep(250 * time.Millisecond) // A hangs past its lease
	d := b.acquire("zombie", "B", "tb")
	if d.Action != flight.ActionOwner || d.Reason != flight.ReasonTakeover || d.Token <= a.Token {
		t.Fatalf("B got %+v, want a takeover with a token > %d", d, a.Token)
	}
	if err := b.c.Start(b.ctx, "zombie", d.Token, b.pol); err != nil {
		t.Fatal(err)
	}
	parked, err := b.c.Complete(b.ctx, "zombie", d.Token, []byte(`"B"`), b.pol)
	if err != nil {
		t.Fatal(err)
	}
	if len(parked) != 1 || parked[0] != "ta" {
		t.Errorf("B's complete handed back %v, want A's task ta", parked)
	}
	// A wakes up.
	if err := b.c.Heartbeat(b.ctx, "zombie", a.Token, "", b.pol); !errors.Is(err, flight.ErrStaleToken) {
		t.Errorf("A's heartbeat: %v, want ErrStaleToken", err)
	}
	if _, err := b.c.Complete(b.ctx, "zombie", a.Token, []byte(`"A"`), b.pol); !errors.Is(err, flight.ErrStaleToken) {
		t.Errorf("A's complete: %v, want ErrStaleToken", err)
	}
	if _, err := b.c.Fail(b.ctx, "zombie", a.Token, flight.Failure{Type: "x"}, b.pol); !errors.Is(err, flight.ErrStaleToken) {
		t.Errorf("A's fail: %v, want ErrStaleToken", err)
	}
	if res, _ := b.c.Result(b.ctx, "zombie"); string(res) != `"B"` {
		t.Errorf("stored result %s, want B's", res)
	}
	if m := b.get("zombie"); m.OwnerToken != d.Token || m.Status != flight.StatusSucceeded {
		t.Errorf("meta %s token %d, want SUCCEEDED with B's %d", m.Status, m.OwnerToken, d.Token)
	}
}

// TestTokenAfterExpiry: once the meta (and even the fence counter) expired, a new token is
// still larger than every token issued before.
func TestTokenAfterExpiry(t *testing.T) {
	b := setup(t)
	b.pol = flight.Policy{Lease: 20 * time.Millisecond, RunningTTL: 30 * time.Millisecond,
		ResultTTL: 40 * time.Millisecond, FailureTTL: 20 * time.Millisecond, MaxAttempts: 1}
	var last int64
	for round := range 5 {
		d := b.acquire("fenced", "A", fmt.Sprintf("t%d", round))
		if d.Action != flight.ActionOwner || d.Reason != flight.ReasonNew {
			t.Fatalf("round %d: %+v, want a new owner after expiry", round, d)
		}
		if d.Token <= last {
			t.Fatalf("round %d: token %d not above %d", round, d.Token, last)
		}
		last = d.Token
		if err := b.c.Start(b.ctx, "fenced", d.Token, b.pol); err != nil {
			t.Fatal(err)
		}
		if _, err := b.c.Complete(b.ctx, "fenced", d.Token, []byte(`1`), b.pol); err != nil {
			t.Fatal(err)
		}
		// Wait until the meta, the result and the fence counter are all gone.
		deadline := time.Now().Add(5 * time.Second)
		for b.rdb.Exists(b.ctx, b.ks.FlightKeys("fenced")...).Val() > 0 {
			if time.Now().After(deadline) {
				t.Fatal("flight keys did not expire")
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
}

// TestRetryUntilMaxAttempts: a retryable failure is retaken until maxAttempts, then
// FAILED_FINAL; every failure keeps the parked followers until the last.
func TestRetryUntilMaxAttempts(t *testing.T) {
	b := setup(t)
	b.acquire("flaky", "A", "t0")
	follower := b.acquire("flaky", "F", "tf")
	if follower.Action != flight.ActionFollowerWait {
		t.Fatal(follower)
	}
	for attempt := 1; ; attempt++ {
		m := b.get("flaky")
		if m.Attempts != attempt {
			t.Fatalf("attempts %d, want %d", m.Attempts, attempt)
		}
		if err := b.c.Start(b.ctx, "flaky", m.OwnerToken, b.pol); err != nil {
			t.Fatal(err)
		}
		out, err := b.c.Fail(b.ctx, "flaky", m.OwnerToken, flight.Failure{Retryable: true, Type: "upstream", Code: "503"}, b.pol)
		if err != nil {
			t.Fatal(err)
		}
		if out.Final != (attempt == b.pol.MaxAttempts) {
			t.Fatalf("attempt %d: final=%v", attempt, out.Final)
		}
		d := b.acquire("flaky", "A", fmt.Sprintf("t%d", attempt))
		if attempt < b.pol.MaxAttempts {
			if d.Action != flight.ActionOwner || d.Reason != flight.ReasonRetry || d.Token <= m.OwnerToken {
				t.Fatalf("attempt %d: %+v, want a retry owner", attempt, d)
			}
			continue
		}
		if d.Action != flight.ActionFailedFinal || d.ErrorCode != "503" {
			t.Fatalf("after %d attempts: %+v, want FAILED_FINAL", attempt, d)
		}
		// The follower and every earlier owner's task are handed back; the last owner (t2)
		// answers its own task when Fail says Final.
		if diff := cmp.Diff([]string{"t0", "t1", "tf"}, d.Parked, sortStrings); diff != "" {
			t.Errorf("parked (-want +got):\n%s", diff)
		}
		return
	}
}

// TestFinalFailureIsFinal: a non-retryable failure ends the flight at once.
func TestFinalFailureIsFinal(t *testing.T) {
	b := setup(t)
	a := b.own("bad")
	out, err := b.c.Fail(b.ctx, "bad", a.Token, flight.Failure{Type: "bad_request", Code: "400", Message: "no"}, b.pol)
	if err != nil || !out.Final {
		t.Fatalf("fail: %+v %v", out, err)
	}
	if d := b.acquire("bad", "B", "tb"); d.Action != flight.ActionFailedFinal || d.Attempts != 1 || d.Error != "no" {
		t.Fatalf("%+v", d)
	}
}

// TestCancelReachesOwner: a cancelled flight makes the owner's next heartbeat answer cancelled
// and refuses its complete; the canceller gets the parked ids.
func TestCancelReachesOwner(t *testing.T) {
	b := setup(t)
	a := b.own("cx")
	b.acquire("cx", "F", "tf")
	out, err := b.c.Cancel(b.ctx, "cx", "interview closed", b.pol)
	if err != nil {
		t.Fatal(err)
	}
	if out.OwnerTaskID != "ta" || len(out.Parked) != 1 || out.Parked[0] != "tf" {
		t.Errorf("cancel outcome %+v", out)
	}
	if err := b.c.Heartbeat(b.ctx, "cx", a.Token, "", b.pol); !errors.Is(err, flight.ErrCancelled) {
		t.Errorf("heartbeat after cancel: %v", err)
	}
	if _, err := b.c.Complete(b.ctx, "cx", a.Token, []byte(`1`), b.pol); !errors.Is(err, flight.ErrCancelled) {
		t.Errorf("complete after cancel: %v", err)
	}
	if _, err := b.c.Release(b.ctx, "cx", out.Parked...); err != nil {
		t.Fatal(err)
	}
	if d := b.acquire("cx", "B", "tb"); d.Action != flight.ActionCancelled || d.Error != "interview closed" || len(d.Parked) != 0 {
		t.Errorf("acquire after cancel: %+v", d)
	}
	if _, err := b.c.Cancel(b.ctx, "nothing", "x", b.pol); !errors.Is(err, flight.ErrNotFound) {
		t.Errorf("cancel of no flight: %v", err)
	}
}

// TestExpiryInRealTime: a flight past runningTTL, or without progress for stallTimeout while
// its heartbeat stays fresh, is EXPIRED and taken over; the old owner is fenced.
func TestExpiryInRealTime(t *testing.T) {
	t.Run("RunningTTL", func(t *testing.T) {
		b := setup(t)
		b.pol.RunningTTL = 200 * time.Millisecond
		a := b.own("slow")
		deadline := time.Now().Add(5 * time.Second)
		var err error
		for err == nil && time.Now().Before(deadline) {
			time.Sleep(50 * time.Millisecond)
			err = b.c.Heartbeat(b.ctx, "slow", a.Token, "", b.pol)
		}
		if !errors.Is(err, flight.ErrExpired) {
			t.Fatalf("heartbeat past runningTTL: %v", err)
		}
		d := b.acquire("slow", "B", "tb")
		if d.Action != flight.ActionOwner || d.Reason != flight.ReasonExpired || d.Token <= a.Token {
			t.Fatalf("%+v", d)
		}
		if err := b.c.Heartbeat(b.ctx, "slow", a.Token, "", b.pol); !errors.Is(err, flight.ErrStaleToken) {
			t.Errorf("old owner after takeover: %v", err)
		}
	})
	t.Run("Stall", func(t *testing.T) {
		b := setup(t)
		b.pol.StallTimeout = 300 * time.Millisecond
		a := b.own("stuck")
		// Heartbeats with moving progress keep it alive past the stall timeout...
		for i := range 8 {
			time.Sleep(60 * time.Millisecond)
			if err := b.c.Heartbeat(b.ctx, "stuck", a.Token, fmt.Sprint(i), b.pol); err != nil {
				t.Fatalf("heartbeat with progress: %v", err)
			}
		}
		// ...and without progress a fresh heartbeat does not.
		time.Sleep(350 * time.Millisecond)
		if d := b.acquire("stuck", "B", "tb"); d.Action != flight.ActionOwner || d.Reason != flight.ReasonExpired {
			t.Fatalf("acquire on a stalled flight: %+v", d)
		}
	})
}

// TestFollowerWithoutTask: in-process callers (no task id) follow without being parked, and a
// redelivery of the owner's own task is not parked on its own flight.
func TestFollowerWithoutTask(t *testing.T) {
	b := setup(t)
	b.own("k")
	if d := b.acquire("k", "B", ""); d.Action != flight.ActionFollowerWait || d.Reason != flight.ReasonNotParked {
		t.Errorf("%+v", d)
	}
	if d := b.acquire("k", "A2", "ta"); d.Action != flight.ActionFollowerWait || d.Reason != flight.ReasonNotParked {
		t.Errorf("%+v", d)
	}
	if m := b.get("k"); len(m.Parked) != 0 {
		t.Errorf("parked %v", m.Parked)
	}
}

// TestParkCap: past Policy.MaxParked a follower is told "full" and nothing is parked.
func TestParkCap(t *testing.T) {
	b := setup(t)
	b.pol.MaxParked = 2
	b.own("cap")
	for i, want := range []flight.Reason{flight.ReasonParked, flight.ReasonParked, flight.ReasonParkFull} {
		if d := b.acquire("cap", "F", fmt.Sprint("f", i)); d.Reason != want {
			t.Errorf("follower %d: %s, want %s", i, d.Reason, want)
		}
	}
	if m := b.get("cap"); len(m.Parked) != 2 {
		t.Errorf("parked %v", m.Parked)
	}
}

func TestInvalidKeysAndPolicy(t *testing.T) {
	b := setup(t)
	for _, key := range []string{"", "a{b", "a}b", "a b", string(make([]byte, flight.MaxKeyLen+1))} {
		if _, err := b.c.Acquire(b.ctx, flight.AcquireParams{Key: key}); !errors.Is(err, flight.ErrInvalidKey) {
			t.Errorf("key %q: %v", key, err)
		}
	}
	if _, err := b.c.Acquire(b.ctx, flight.AcquireParams{Key: "k", Policy: flight.Policy{MaxAttempts: -1}}); err == nil {
		t.Error("negative maxAttempts accepted")
	}
	if _, err := b.c.Get(b.ctx, "none"); !errors.Is(err, flight.ErrNotFound) {
		t.Errorf("get of no flight: %v", err)
	}
}

// TestCorruptMeta: an unknown status is a protocol error, not a decision.
func TestCorruptMeta(t *testing.T) {
	b := setup(t)
	b.rdb.HSet(b.ctx, b.ks.Meta("bent"), "status", "WHATEVER")
	if _, err := b.c.Acquire(b.ctx, flight.AcquireParams{Key: "bent", Policy: b.pol}); !errors.Is(err, flight.ErrProtocol) {
		t.Errorf("acquire on a corrupt meta: %v", err)
	}
}
