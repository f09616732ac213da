package flight_test

import (
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/flightdeck-ai/flightdeck/flight"
	"github.com/flightdeck-ai/flightdeck/topics"
)

// TestContention: 200 goroutines on 4 clients race acquire on 20 keys; exactly one owner per
// key, every other caller a follower parked on that owner's flight.
func TestContention(t *testing.T) {
	modes(t, func(t *testing.T, b *bundle) {
		opt := b.rdb.Options()
		coords := make([]*flight.Coordinator, 4)
		for i := range coords {
			rdb := redis.NewClient(&redis.Options{Addr: opt.Addr, Username: opt.Username, Password: opt.Password})
			t.Cleanup(func() { _ = rdb.Close() })
			c, err := flight.NewCoordinator(flight.Config{Client: rdb, Keyspace: b.ks, AnswerAfterScript: b.mode == "return"})
			if err != nil {
				t.Fatal(err)
			}
			coords[i] = c
		}
		const goroutines, keys = 200, 20
		tasks := make([]flight.Task, goroutines)
		for g := range tasks {
			tasks[g] = b.task(fmt.Sprintf("task-%d", g))
		}
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
				<-start
				d, err := coords[g%4].Acquire(b.ctx, flight.AcquireParams{Key: key, OwnerID: fmt.Sprintf("node-%d", g%4),
					Task: tasks[g], Stage: testStage, Tenant: "acme", Policy: b.pol})
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
					owners[key] = append(owners[key], tasks[g].ID)
				case flight.ActionFollowerWait:
					followers[key]++
					if d.Reason != flight.ReasonParked {
						t.Errorf("%s: follower reason %s", tasks[g].ID, d.Reason)
					}
				default:
					t.Errorf("%s: action %s", tasks[g].ID, d.Action)
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
		parked, err := b.rdb.XPending(b.ctx, b.ks.Tasks(testStage), topics.ConsumerGroup).Result()
		if err != nil || parked.Consumers[topics.ParkingConsumer] != goroutines-keys {
			t.Errorf("parking consumer holds %v entries, want %d (%v)", parked.Consumers, goroutines-keys, err)
		}
	})
}

// TestZombieFencing: owner A stops heartbeating past the lease, B takes over with a larger
// token and completes, answering A's task; A's late calls are refused and the stored result
// is B's.
func TestZombieFencing(t *testing.T) {
	b := setup(t)
	b.pol.Lease = 150 * time.Millisecond
	a, ta := b.own("zombie")
	if _, err := b.c.Heartbeat(b.ctx, *a.Owner, ""); err != nil {
		t.Fatal(err)
	}
	time.Sleep(250 * time.Millisecond) // A hangs past its lease
	tb := b.task("tb")
	d := b.acquireWith(flight.AcquireParams{Key: "zombie", OwnerID: "B", Task: tb, Start: true})
	if d.Action != flight.ActionOwner || d.Reason != flight.ReasonTakeover || d.Token <= a.Token {
		t.Fatalf("B got %+v, want a takeover with a token > %d", d, a.Token)
	}
	st, err := b.complete(*d.Owner, `"B"`)
	if err != nil || st.Events != 2 {
		t.Fatalf("B's complete: %+v %v (want B's and A's task answered)", st, err)
	}
	// A wakes up.
	if _, err := b.c.Heartbeat(b.ctx, *a.Owner, ""); !errors.Is(err, flight.ErrStaleToken) {
		t.Errorf("A's heartbeat: %v, want ErrStaleToken", err)
	}
	if _, err := b.complete(*a.Owner, `"A"`); !errors.Is(err, flight.ErrStaleToken) {
		t.Errorf("A's complete: %v, want ErrStaleToken", err)
	}
	if _, err := b.c.Fail(b.ctx, *a.Owner, flight.Failure{Type: "x"}, 0); !errors.Is(err, flight.ErrStaleToken) {
		t.Errorf("A's fail: %v, want ErrStaleToken", err)
	}
	if res, _ := b.c.Result(b.ctx, "zombie"); string(res) != `"B"` {
		t.Errorf("stored result %s, want B's", res)
	}
	if m := b.get("zombie"); m.OwnerToken != d.Token || m.Status != flight.StatusSucceeded {
		t.Errorf("meta %s token %d, want SUCCEEDED with B's %d", m.Status, m.OwnerToken, d.Token)
	}
	for _, tk := range []flight.Task{ta, tb} {
		if h := b.holder(tk); h != "" {
			t.Errorf("%s still pending under %q", tk.ID, h)
		}
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
		d := b.acquireWith(flight.AcquireParams{Key: "fenced", OwnerID: "A", Task: b.task(fmt.Sprintf("t%d", round)), Start: true})
		if d.Action != flight.ActionOwner || d.Reason != flight.ReasonNew {
			t.Fatalf("round %d: %+v, want a new owner after expiry", round, d)
		}
		if d.Token <= last {
			t.Fatalf("round %d: token %d not above %d", round, d.Token, last)
		}
		last = d.Token
		if _, err := b.complete(*d.Owner, `1`); err != nil {
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
// FAILED_FINAL; every failure keeps the parked followers until the last, which answers them.
func TestRetryUntilMaxAttempts(t *testing.T) {
	b := setup(t)
	owner := b.task("t0")
	b.acquireWith(flight.AcquireParams{Key: "flaky", OwnerID: "A", Task: owner, Start: true})
	tf := b.task("tf")
	if f := b.acquire("flaky", "F", tf); f.Action != flight.ActionFollowerWait {
		t.Fatal(f)
	}
	for attempt := 1; ; attempt++ {
		m := b.get("flaky")
		if m.Attempts != attempt {
			t.Fatalf("attempts %d, want %d", m.Attempts, attempt)
		}
		o := flight.Ownership{Key: "flaky", Token: m.OwnerToken, Attempts: attempt, OwnerID: "A", Task: owner,
			Stage: testStage, Tenant: "acme", Policy: b.pol}
		out, err := b.c.Fail(b.ctx, o, flight.Failure{Retryable: true, Type: "upstream", Code: "503"}, 0)
		if err != nil {
			t.Fatal(err)
		}
		if out.Final != (attempt == b.pol.MaxAttempts) || out.Answered != out.Final {
			t.Fatalf("attempt %d: %+v", attempt, out)
		}
		if out.Final {
			ev := b.events()
			if len(ev["t0"]) != 1 || len(ev["tf"]) != 1 || ev["tf"][0].Status != topics.StatusFailed || ev["tf"][0].Attempts != 3 {
				t.Errorf("final failure events %+v", ev)
			}
			return
		}
		// The failed owner's own task acquires again after its backoff and retries.
		d := b.acquireWith(flight.AcquireParams{Key: "flaky", OwnerID: "A", Task: owner, Start: true})
		if d.Action != flight.ActionOwner || d.Reason != flight.ReasonRetry || d.Token <= m.OwnerToken {
			t.Fatalf("attempt %d: %+v, want a retry owner", attempt, d)
		}
	}
}

// TestCancelReachesOwner: a cancelled flight makes the owner's next heartbeat answer cancelled
// and refuses its complete; the canceller answers the parked tasks.
func TestCancelReachesOwner(t *testing.T) {
	modes(t, func(t *testing.T, b *bundle) {
		a, _ := b.own("cx")
		tf := b.task("tf")
		b.acquire("cx", "F", tf)
		out, err := b.c.Cancel(b.ctx, "cx", "interview closed", cancelParams())
		if err != nil || out.OwnerTaskID != "ta" || out.Answered != 1 || out.Previous != flight.StatusRunning {
			t.Fatalf("cancel outcome %+v %v", out, err)
		}
		if h := b.holder(tf); h != "" {
			t.Errorf("parked task still pending under %q", h)
		}
		if _, err := b.c.Heartbeat(b.ctx, *a.Owner, ""); !errors.Is(err, flight.ErrCancelled) {
			t.Errorf("heartbeat after cancel: %v", err)
		}
		if _, err := b.complete(*a.Owner, `1`); !errors.Is(err, flight.ErrCancelled) {
			t.Errorf("complete after cancel: %v", err)
		}
		if d := b.acquire("cx", "B", b.task("tb")); d.Action != flight.ActionCancelled || d.Error != "interview closed" || d.Answered != 1 {
			t.Errorf("acquire after cancel: %+v", d)
		}
	})
}

// TestExpiryInRealTime: a flight past runningTTL, or without progress for stallTimeout while
// its heartbeat stays fresh, is EXPIRED and taken over; the old owner is fenced.
func TestExpiryInRealTime(t *testing.T) {
	t.Run("RunningTTL", func(t *testing.T) {
		b := setup(t)
		b.pol.RunningTTL = 200 * time.Millisecond
		a, _ := b.own("slow")
		deadline := time.Now().Add(5 * time.Second)
		var err error
		for err == nil && time.Now().Before(deadline) {
			time.Sleep(50 * time.Millisecond)
			_, err = b.c.Heartbeat(b.ctx, *a.Owner, "")
		}
		if !errors.Is(err, flight.ErrExpired) {
			t.Fatalf("heartbeat past runningTTL: %v", err)
		}
		d := b.acquire("slow", "B", b.task("tb"))
		if d.Action != flight.ActionOwner || d.Reason != flight.ReasonExpired || d.Token <= a.Token {
			t.Fatalf("%+v", d)
		}
		if _, err := b.c.Heartbeat(b.ctx, *a.Owner, ""); !errors.Is(err, flight.ErrStaleToken) {
			t.Errorf("old owner after takeover: %v", err)
		}
	})
	t.Run("Stall", func(t *testing.T) {
		b := setup(t)
		b.pol.StallTimeout = 300 * time.Millisecond
		a, _ := b.own("stuck")
		// Heartbeats with moving progress keep it alive past the stall timeout...
		for i := range 8 {
			time.Sleep(60 * time.Millisecond)
			if _, err := b.c.Heartbeat(b.ctx, *a.Owner, fmt.Sprint(i)); err != nil {
				t.Fatalf("heartbeat with progress: %v", err)
			}
		}
		// ...and without progress a fresh heartbeat does not.
		time.Sleep(350 * time.Millisecond)
		if d := b.acquire("stuck", "B", b.task("tb")); d.Action != flight.ActionOwner || d.Reason != flight.ReasonExpired {
			t.Fatalf("acquire on a stalled flight: %+v", d)
		}
	})
}

// TestFollowerWithoutEntry: in-process callers (no entry) follow without being parked, and a
// redelivery of the owner's own entry is not parked on its own flight: it learns when to
// check again.
func TestFollowerWithoutEntry(t *testing.T) {
	b := setup(t)
	_, ta := b.own("k")
	if d := b.acquire("k", "B", flight.Task{}); d.Action != flight.ActionFollowerWait || d.Reason != flight.ReasonNotParked {
		t.Errorf("%+v", d)
	}
	d := b.acquire("k", "A2", ta)
	if d.Action != flight.ActionFollowerWait || d.Reason != flight.ReasonNotParked {
		t.Errorf("%+v", d)
	}
	if in := d.RecheckIn(0); in < 4*time.Second || in > 5100*time.Millisecond {
		t.Errorf("recheck in %v, want about the lease", in)
	}
	if m := b.get("k"); len(m.Parked) != 0 {
		t.Errorf("parked %v", m.Parked)
	}
	if h := b.holder(ta); h != "c1" {
		t.Errorf("owner entry moved to %q", h)
	}
	// The same task id on another entry (a producer that sent it twice) is parked.
	if d := b.acquire("k", "A3", b.task("ta")); d.Reason != flight.ReasonParked {
		t.Errorf("a second entry of the owner's task id: %+v", d)
	}
}

// TestParkCap: past Policy.MaxParked a follower is told "full" and nothing is parked.
func TestParkCap(t *testing.T) {
	b := setup(t)
	b.pol.MaxParked = 2
	b.own("cap")
	for i, want := range []flight.Reason{flight.ReasonParked, flight.ReasonParked, flight.ReasonParkFull} {
		if d := b.acquire("cap", "F", b.task(fmt.Sprint("f", i))); d.Reason != want {
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
	for _, prefix := range []string{"a{b}", "a b", "{x}", "-x", string(make([]byte, 65))} {
		if _, err := flight.NewCoordinator(flight.Config{Client: b.rdb, Keyspace: topics.Keyspace{Prefix: prefix}}); !errors.Is(err, topics.ErrInvalidKeyspace) {
			t.Errorf("prefix %q: %v", prefix, err)
		}
	}
}

// TestCorruptMeta: a record this version cannot read, or one with an unknown status, is a
// protocol error, not a decision.
func TestCorruptMeta(t *testing.T) {
	b := setup(t)
	b.rdb.Set(b.ctx, b.ks.Flight("bent"), "not a record", 0)
	b.set("twisted", "status", "WHATEVER")
	for _, key := range []string{"bent", "twisted"} {
		if _, err := b.c.Acquire(b.ctx, flight.AcquireParams{Key: key, Policy: b.pol}); !errors.Is(err, flight.ErrProtocol) {
			t.Errorf("acquire on a corrupt record %s: %v", key, err)
		}
	}
}
