package flight_test

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/flightdeck-ai/flightdeck/flight"
	"github.com/flightdeck-ai/flightdeck/internal/redistest"
	"github.com/flightdeck-ai/flightdeck/topics"
)

// BenchmarkOwnerCycle measures one full owner cycle (acquire and start in one call, then
// complete with the owner's event) on a fresh key, beside the naive lock a team would write
// first: SET NX for the lock, SET for the result.
func BenchmarkOwnerCycle(b *testing.B) {
	r := redistest.New(b)
	ctx := context.Background()
	c, _ := flight.NewCoordinator(flight.Config{Client: r.Client, Keyspace: topics.Keyspace{Prefix: r.Prefix}})
	pol := flight.Policy{ResultTTL: time.Minute}
	result := []byte(`{"score":87,"answer":"a typical short model answer of about eighty bytes"}`)
	n := 0 // keys stay fresh across the benchmark's repeated runs
	b.Run("flight", func(b *testing.B) {
		for range b.N {
			n++
			key := "own-" + strconv.Itoa(n)
			d, err := c.Acquire(ctx, flight.AcquireParams{Key: key, OwnerID: "n1", Task: flight.Task{ID: "t"},
				Stage: "s", Tenant: "t", Policy: pol, Start: true})
			if err != nil || d.Action != flight.ActionOwner {
				b.Fatal(d, err)
			}
			if _, err := c.Complete(ctx, *d.Owner, result, 0); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("setnx-set", func(b *testing.B) {
		for range b.N {
			n++
			key := r.Prefix + ":nx-" + strconv.Itoa(n)
			if ok, err := r.Client.SetNX(ctx, key, "n1", time.Minute).Result(); err != nil || !ok {
				b.Fatal(ok, err)
			}
			if err := r.Client.Set(ctx, key+":result", result, time.Minute).Err(); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// BenchmarkFollowerAcquire measures acquire on a running flight (the follower path, no
// parking), beside a SET NX that loses.
func BenchmarkFollowerAcquire(b *testing.B) {
	r := redistest.New(b)
	ctx := context.Background()
	c, _ := flight.NewCoordinator(flight.Config{Client: r.Client, Keyspace: topics.Keyspace{Prefix: r.Prefix}})
	pol := flight.Policy{Lease: time.Hour, RunningTTL: time.Hour}
	if _, err := c.Acquire(ctx, flight.AcquireParams{Key: "busy", OwnerID: "n1", Task: flight.Task{ID: "t"},
		Stage: "s", Tenant: "t", Policy: pol, Start: true}); err != nil {
		b.Fatal(err)
	}
	b.Run("flight", func(b *testing.B) {
		for range b.N {
			d, err := c.Acquire(ctx, flight.AcquireParams{Key: "busy", OwnerID: "n2", Stage: "s", Tenant: "t", Policy: pol})
			if err != nil || d.Action != flight.ActionFollowerWait {
				b.Fatal(d, err)
			}
		}
	})
	r.Client.Set(ctx, r.Prefix+":nx-busy", "n1", time.Hour)
	b.Run("setnx", func(b *testing.B) {
		for range b.N {
			if ok, err := r.Client.SetNX(ctx, r.Prefix+":nx-busy", "n2", time.Hour).Result(); err != nil || ok {
				b.Fatal(ok, err)
			}
		}
	})
}
