package handlers_test

import (
	"context"
	"encoding/json"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/flightdeck-ai/flightdeck/archive/postgres"
	"github.com/flightdeck-ai/flightdeck/flight"
	"github.com/flightdeck-ai/flightdeck/handlers"
	"github.com/flightdeck-ai/flightdeck/handlers/model"
	"github.com/flightdeck-ai/flightdeck/internal/broker"
	"github.com/flightdeck-ai/flightdeck/internal/testkit/pgtest"
	"github.com/flightdeck-ai/flightdeck/internal/testkit/redistest"
	"github.com/flightdeck-ai/flightdeck/topics"
)

// zombieModel loses Redis's data while the owner that took the flight over runs, then lets
// the flight's first owner (paused past its lease, the zombie) complete its older run.
type zombieModel struct {
	t      *testing.T
	srv    *redistest.Server
	coord  *flight.Coordinator
	zombie flight.Ownership
	runs   atomic.Int64
	// zombieErr is what the zombie's complete answered.
	zombieErr chan error
}

func (z *zombieModel) Name() string { return "sim" }
func (z *zombieModel) Call(ctx context.Context, _ model.Request, _ model.ProgressFunc) (json.RawMessage, error) {
	if z.runs.Add(1) == 1 {
		if err := z.srv.Client().FlushAll(ctx).Err(); err != nil {
			z.t.Error(err)
		}
		_, err := z.coord.Complete(ctx, z.zombie, []byte(`{"answer":"zombie"}`), time.Second)
		z.zombieErr <- err
	}
	return json.RawMessage(`{"answer":"taker"}`), nil
}

// TestTakeoverClaimOutlivesRedis: an owner is paused past its lease and its flight is taken
// over; Redis loses all its data while the new owner runs (the flight's fence with it); the
// old owner then completes. With the archive, the new owner claimed the key before its model
// call, so the old owner's write-back is refused (ErrStaleToken) and the task gets the new
// owner's result and token.
func TestTakeoverClaimOutlivesRedis(t *testing.T) {
	store, err := postgres.Open(context.Background(), postgres.Config{URL: pgtest.New(t).URL, Deployment: "test"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(store.Close) // after the consumer stopped (cleanups run last first)
	srv := redistest.Start(t, nil)
	b := &bundle{t: t, ctx: context.Background(), r: &redistest.Target{Client: srv.Client(), URL: srv.URL(),
		Prefix: redistest.Prefix(), Server: srv}}
	b.ks = topics.Keyspace{Prefix: b.r.Prefix}
	b.w = broker.Writer{Client: b.r.Client, Keyspace: b.ks}

	tk := topics.Task{TaskID: "z1", Stage: "interview-evaluation", Tenant: "acme", Input: simInput(1, 0)}
	key, err := handlers.TaskKey(tk)
	if err != nil {
		t.Fatal(err)
	}
	// The zombie: an owner of the key, with a short lease, that stops heartbeating.
	coord, err := flight.NewCoordinator(flight.Config{Client: b.r.Client, Keyspace: b.ks,
		WriteBackFence: flight.ArchiveFence(store.Fence, nil)})
	if err != nil {
		t.Fatal(err)
	}
	d, err := coord.Acquire(b.ctx, flight.AcquireParams{Key: key, OwnerID: "zombie", Stage: tk.Stage, Tenant: "acme",
		Policy: flight.Policy{Lease: 200 * time.Millisecond}, Start: true})
	if err != nil || d.Action != flight.ActionOwner {
		t.Fatalf("zombie acquire: %+v %v", d, err)
	}
	time.Sleep(300 * time.Millisecond) // its lease lapses

	zm := &zombieModel{t: t, srv: srv, coord: coord, zombie: *d.Owner, zombieErr: make(chan error, 1)}
	b.consumer("c1", func(c *handlers.Config) {
		// A heartbeat between the data loss and the zombie's complete would write the
		// taker's record back, and Redis would refuse the zombie on its own: rare beats.
		c.Stages[0].Lease, c.Stages[0].HeartbeatInterval = 4*time.Second, time.Second
		c.Models = map[string]model.Model{"sim": zm}
		c.SpoolDir = t.TempDir()
		c.Archive = store
	})
	b.enqueue(tk)
	evs := b.events([]string{"interview-evaluation"}, 1, 20*time.Second)["z1"]
	if len(evs) == 0 {
		t.Fatal("no event for the task")
	}
	select {
	case err := <-zm.zombieErr:
		if !errors.Is(err, flight.ErrStaleToken) {
			t.Errorf("the zombie's complete after the data loss answered %v, want ErrStaleToken", err)
		}
	default:
		t.Fatal("the model never let the zombie complete")
	}
	ev := evs[0]
	if ev.Status != topics.StatusSucceeded || string(ev.Result) != `{"answer":"taker"}` || ev.OwnerToken <= d.Owner.Token {
		t.Errorf("event %+v (zombie token %d), want the taker's result under its larger token", ev, d.Owner.Token)
	}
	if tok, ok, err := store.Fence(b.ctx, key); err != nil || !ok || tok != ev.OwnerToken {
		t.Errorf("archive fence %d %v %v, want the taker's claim %d", tok, ok, err, ev.OwnerToken)
	}
	if n := zm.runs.Load(); n != 1 {
		t.Errorf("the model ran %d times, want 1", n)
	}
}
