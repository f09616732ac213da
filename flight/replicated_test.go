package flight_test

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/flightdeck-ai/flightdeck/flight"
	"github.com/flightdeck-ai/flightdeck/internal/testkit/redistest"
	"github.com/flightdeck-ai/flightdeck/topics"
)

// replicated is a master with one replica behind a link the test can hold, and a bundle on
// the master.
type replicated struct {
	*bundle
	master, replica *redistest.Server
	link            *redistest.Link
}

func setupReplicated(t *testing.T, d flight.Durability) *replicated {
	t.Helper()
	master := redistest.Start(t, nil)
	replica, link := redistest.StartReplica(t, master)
	r := &replicated{master: master, replica: replica, link: link}
	r.bundle = onClient(t, master, d)
	if err := r.rdb.XGroupCreateMkStream(r.ctx, r.ks.Tasks(testStage), topics.ConsumerGroup, "$").Err(); err != nil {
		t.Fatal(err)
	}
	return r
}

// onClient is a bundle on srv whose policy has durability d.
func onClient(t *testing.T, srv *redistest.Server, d flight.Durability) *bundle {
	t.Helper()
	rdb := srv.Client()
	ks := topics.Keyspace{Prefix: "rep:ai"}
	c, err := flight.NewCoordinator(flight.Config{Client: rdb, Keyspace: ks, Consumer: "test"})
	if err != nil {
		t.Fatal(err)
	}
	return &bundle{t: t, ctx: context.Background(), rdb: rdb, ks: ks, c: c, mode: "write", pol: flight.Policy{
		Lease: 5 * time.Second, RunningTTL: time.Minute, ResultTTL: 10 * time.Minute, FailureTTL: 2 * time.Minute,
		MaxAttempts: 3, Durability: d, ReplicationTimeout: 200 * time.Millisecond}}
}

// TestReplicatedClaims: under DurabilityReplicated an acquire that makes an owner, and a
// complete, return only once the replica has them. A claim the replica did not acknowledge is
// given up (handed over: the next acquire takes the flight at once, the attempt not spent);
// a complete it did not acknowledge fails with ErrNotReplicated, and the same call made again
// once the replica is back succeeds (ALREADY), answering nothing twice.
func TestReplicatedClaims(t *testing.T) {
	r := setupReplicated(t, flight.DurabilityReplicated)
	d1, _ := r.own("k1")
	d3, _ := r.own("k3")

	r.link.Hold()
	start := time.Now()
	_, err := r.c.Acquire(r.ctx, flight.AcquireParams{Key: "k2", OwnerID: "A", Task: r.task("t2"), Stage: testStage,
		Tenant: "acme", Policy: r.pol, Start: true})
	var nr *flight.NotReplicatedError
	if !errors.Is(err, flight.ErrNotReplicated) || !flight.IsCoordinationFailure(err) || !errors.As(err, &nr) || !nr.HandedOver || nr.Token == 0 {
		t.Fatalf("acquire with the replica held back: %v (%+v), want ErrNotReplicated (a coordination failure), handed over", err, nr)
	}
	if waited := time.Since(start); waited < 200*time.Millisecond {
		t.Errorf("the acquire returned after %v, before the replication timeout", waited)
	}
	for i := range 2 { // the retry of a lost acknowledgement is not acknowledged either
		if _, err := r.c.Complete(r.ctx, *d1.Owner, []byte(`{"score":1}`), time.Millisecond); !errors.Is(err, flight.ErrNotReplicated) {
			t.Fatalf("complete %d with the replica held back: %v, want ErrNotReplicated", i+1, err)
		}
	}
	// The outcome as the owner spools it keeps the durability: its write-back waits for the
	// replica too, and stays in the spool while none answers.
	out := d3.Owner.Outcome([]byte(`{"score":3}`))
	if out.Durability != flight.DurabilityReplicated || out.ReplicationTimeout != 200*time.Millisecond {
		t.Fatalf("spooled outcome: durability %q, timeout %v", out.Durability, out.ReplicationTimeout)
	}
	if _, err := r.c.Restore(r.ctx, out); !errors.Is(err, flight.ErrNotReplicated) || flight.Judge(err) != flight.VerdictUnavailable {
		t.Fatalf("write-back with the replica held back: %v, want ErrNotReplicated (kept: unavailable)", err)
	}
	r.link.Release()
	if _, err := r.c.Restore(r.ctx, out); err != nil {
		t.Fatalf("write-back with the replica back: %v", err)
	}
	redistest.WaitInSync(t, r.replica, 10*time.Second)

	d2 := r.acquireWith(flight.AcquireParams{Key: "k2", OwnerID: "B", Task: r.task("t2b"), Start: true})
	if d2.Action != flight.ActionOwner || d2.Reason != flight.ReasonHandover || d2.Attempts != 1 {
		t.Errorf("acquire after the unconfirmed claim: %s %s attempt %d, want OWNER handover attempt 1", d2.Action, d2.Reason, d2.Attempts)
	}
	st, err := r.c.Complete(r.ctx, *d1.Owner, []byte(`{"score":1}`), time.Millisecond)
	if err != nil || st.Events != 0 {
		t.Fatalf("complete again with the replica back: %+v %v, want nil and no second event", st, err)
	}
	n := 0
	for _, ev := range r.events()["ta"] {
		if ev.RequestKey == "k1" {
			n++
		}
	}
	if n != 1 {
		t.Errorf("k1's owner task got %d events, want 1", n)
	}
	on := onClient(t, r.replica, flight.DurabilityReplicated)
	if m, err := on.c.Get(r.ctx, "k1"); err != nil || m.Status != flight.StatusSucceeded {
		t.Errorf("the replica holds k1 as %+v %v, want SUCCEEDED", m, err)
	}
}

// TestFailoverLosesAsyncClaims: a master killed with a claim its replica never received. With
// DurabilityAsync the claim returned at once, and after the promotion a second caller owns
// the same key while the first still runs: two model calls. With DurabilityReplicated the
// first caller was refused the claim (ErrNotReplicated) and never ran: after the promotion
// the key has one owner.
func TestFailoverLosesAsyncClaims(t *testing.T) {
	for _, tc := range []struct {
		d          flight.Durability
		firstOwns  bool // the first caller was given the claim
		wantOwners int  // callers that run the model for the key
	}{
		{flight.DurabilityAsync, true, 2},
		{flight.DurabilityReplicated, false, 1},
	} {
		t.Run(string(tc.d), func(t *testing.T) {
			r := setupReplicated(t, tc.d)
			ta := r.task("ta") // replicated: the entry is on the replica too
			redistest.WaitInSync(t, r.replica, 10*time.Second)
			if n, err := r.rdb.Do(r.ctx, "WAIT", 1, 2000).Int(); err != nil || n != 1 {
				t.Fatalf("WAIT: %d %v", n, err)
			}
			r.link.Hold()
			owners := 0
			_, err := r.c.Acquire(r.ctx, flight.AcquireParams{Key: "k", OwnerID: "A", Task: ta, Stage: testStage,
				Tenant: "acme", Policy: r.pol, Start: true})
			if got := err == nil; got != tc.firstOwns {
				t.Fatalf("first acquire: %v", err)
			}
			if err == nil {
				owners++
			}
			r.master.Stop()
			if err := redistest.Promote(r.ctx, r.replica); err != nil {
				t.Fatal(err)
			}
			// The promoted master has no replica yet: the second caller's claim is not waited for.
			on := onClient(t, r.replica, flight.DurabilityAsync)
			d := on.acquireWith(flight.AcquireParams{Key: "k", OwnerID: "B", Task: flight.Task{ID: "tb"}, Start: true})
			if d.Action == flight.ActionOwner {
				owners++
			}
			if owners != tc.wantOwners {
				t.Errorf("%d callers own the key, want %d (second acquire: %s %s)", owners, tc.wantOwners, d.Action, d.Reason)
			}
		})
	}
}

// BenchmarkOwnerCycleReplicated measures the owner cycle of BenchmarkOwnerCycle on a master
// with one replica (on the same host), with DurabilityAsync and with DurabilityReplicated:
// the difference is what waiting for the replica costs a task's owner, serially and with 32
// owners at once.
func BenchmarkOwnerCycleReplicated(b *testing.B) {
	master := redistest.Start(b, nil)
	redistest.StartReplica(b, master)
	rdb := master.Client()
	ctx := context.Background()
	c, _ := flight.NewCoordinator(flight.Config{Client: rdb, Keyspace: topics.Keyspace{Prefix: "bench:ai"}})
	result := []byte(`{"score":87,"answer":"a typical short model answer of about eighty bytes"}`)
	var n atomic.Int64
	cycle := func(b *testing.B, pol flight.Policy) {
		key := "own-" + strconv.FormatInt(n.Add(1), 10)
		d, err := c.Acquire(ctx, flight.AcquireParams{Key: key, OwnerID: "n1", Task: flight.Task{ID: "t"},
			Stage: "s", Tenant: "t", Policy: pol, Start: true})
		if err != nil || d.Action != flight.ActionOwner {
			b.Fatal(d, err)
		}
		if _, err := c.Complete(ctx, *d.Owner, result, 0); err != nil {
			b.Fatal(err)
		}
	}
	for _, d := range []flight.Durability{flight.DurabilityAsync, flight.DurabilityReplicated} {
		pol := flight.Policy{ResultTTL: time.Minute, Durability: d}
		b.Run(fmt.Sprintf("durability=%s/owners=1", d), func(b *testing.B) {
			for range b.N {
				cycle(b, pol)
			}
		})
		b.Run(fmt.Sprintf("durability=%s/owners=32", d), func(b *testing.B) {
			b.SetParallelism(16) // 2 cores x 16
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					cycle(b, pol)
				}
			})
		})
	}
}
