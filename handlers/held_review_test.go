package handlers_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/flightdeck-ai/flightdeck/archive/postgres"
	"github.com/flightdeck-ai/flightdeck/flight"
	"github.com/flightdeck-ai/flightdeck/handlers"
	"github.com/flightdeck-ai/flightdeck/internal/broker"
	"github.com/flightdeck-ai/flightdeck/internal/testkit/pgtest"
	"github.com/flightdeck-ai/flightdeck/internal/testkit/redistest"
	"github.com/flightdeck-ai/flightdeck/topics"
)

// exactlyOnce waits for the events of ids, then a little longer, and checks that each task
// got exactly one event, SUCCEEDED with the only run's result.
func exactlyOnce(t *testing.T, b *bundle, ids []string, settle time.Duration) {
	t.Helper()
	b.eventsFor([]string{"interview-evaluation"}, ids, 20*time.Second)
	time.Sleep(settle)
	got := b.events([]string{"interview-evaluation"}, 1<<30, 500*time.Millisecond)
	for _, id := range ids {
		evs := got[id]
		if len(evs) != 1 || evs[0].Status != topics.StatusSucceeded || string(evs[0].Result) != onlyRun {
			var desc []string
			for _, e := range evs {
				desc = append(desc, fmt.Sprintf("%s/%s token %d at %s", e.Status, e.Shared, e.OwnerToken, e.FinishedAt.Format("15:04:05.000")))
			}
			t.Errorf("%s: %d events %v, want exactly one SUCCEEDED with the only run's result", id, len(evs), desc)
		}
	}
}

// TestSpooledTasksAnsweredOnce: the owner's result is spooled with three joined tasks riding
// in it: Redis stopped past the lease, its data lost, or paused (SIGSTOP) past the lease, its
// data kept, and the complete sent before the pause then runs when Redis resumes, its reply
// lost. Every task is answered exactly once: the delayed tasks must not be answered a second
// time when they are handed out again (they acquired, and the flight the write-back restored
// answered each once more), nor the owner's task by the write-back of a complete Redis took
// (ALREADY answered it again). With fast polls the delayed tasks come back first, and one of
// them flushes the spool itself.
func TestSpooledTasksAnsweredOnce(t *testing.T) {
	for _, tc := range []struct {
		name string
		loss bool
		beat time.Duration
	}{{"paused", false, 200 * time.Millisecond}, {"data lost", true, 200 * time.Millisecond},
		{"data lost, fast polls", true, 50 * time.Millisecond}} {
		t.Run(tc.name, func(t *testing.T) {
			b, srv := privateBundle(t)
			gm := newGateModel()
			c, _ := b.start("c1", evaluation(gm, func(s *handlers.StageConfig) {
				s.Lease, s.HeartbeatInterval = time.Second, tc.beat
				s.JoinWait, s.Concurrency = time.Second, 4
			}))
			ids := dupTasks(b, "s", 1, 4, 0)
			wait(t, gm.started, "the owner's model call")
			until(t, "the four tasks read", func() bool {
				return b.r.Client.XPending(b.ctx, b.ks.Tasks("interview-evaluation"), topics.ConsumerGroup).Val().Count == 4
			})
			if tc.loss {
				srv.Stop()
			} else {
				srv.Pause()
			}
			close(gm.release)
			until(t, "the result in the spool", func() bool { return c.Status().Spooled == 1 })
			if tc.loss {
				srv.Restart()
			} else {
				srv.Resume()
			}
			exactlyOnce(t, b, ids, 2*time.Second)
			if gm.runs.Load() != 1 {
				t.Errorf("model ran %d times, want 1", gm.runs.Load())
			}
		})
	}
}

// TestCancelledRunsHeldResultIsNotTaken: the flight is cancelled while its owner's model runs;
// the model answers anyway, and the owner's complete waits (on the archive's fence: Redis lost
// the cancelled record, its TTL was 1 ms). Meanwhile a duplicate owns a new flight. The result
// the owner holds is of a closed run, which may never be stored (DESIGN.md section 3): the
// duplicate runs the model instead of completing its flight with it.
func TestCancelledRunsHeldResultIsNotTaken(t *testing.T) {
	o := startArchiveOwner(t, 8)
	b, gm, key, tx := o.b, o.gm, o.key, o.tx
	coord, err := flight.NewCoordinator(flight.Config{Client: b.r.Client, Keyspace: b.ks})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := coord.Cancel(b.ctx, key, "client", flight.CancelParams{TTL: time.Millisecond}); err != nil {
		t.Fatal(err)
	}
	until(t, "the cancelled record gone", func() bool {
		return b.r.Client.Exists(b.ctx, b.ks.Flight(key)).Val() == 0
	})
	close(gm.release)
	o.waitOnTheLock(t, "the owner's complete asking the archive")
	b.enqueue(topics.Task{TaskID: "dup", Tenant: "acme", Stage: "interview-evaluation", Input: simInput(8, 0)})
	b.eventsFor([]string{"interview-evaluation"}, []string{"dup"}, 20*time.Second)
	if gm.runs.Load() != 2 {
		t.Errorf("model ran %d times, want 2: the duplicate's new flight took the cancelled run's held result", gm.runs.Load())
	}
	if err := tx.Rollback(b.ctx); err != nil {
		t.Fatal(err)
	}
	b.eventsFor([]string{"interview-evaluation"}, []string{"first", "dup"}, 20*time.Second)
}

// TestCancelledRunsArchivedResultIsNotRehydrated: the flight is cancelled while its owner's
// model runs; the model answers anyway, Redis goes away before the result's write (its data
// kept: AOF), and the result is spooled and archived at once. Redis comes back: the write-back
// is refused (the fence closes the cancelled run's token) and the CANCELLED record has ended.
// A duplicate then owns a new flight: it must not rehydrate the cancelled run's archived
// result (which may never be stored, DESIGN.md section 3), it runs the model.
func TestCancelledRunsArchivedResultIsNotRehydrated(t *testing.T) {
	store, err := postgres.Open(context.Background(), postgres.Config{URL: pgtest.New(t).URL, Deployment: "test"})
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	srv := redistest.Start(t, &redistest.Options{Args: []string{"--appendonly", "yes", "--appendfsync", "always"}})
	b := &bundle{t: t, ctx: context.Background(), r: &redistest.Target{Client: srv.Client(), URL: srv.URL(),
		Prefix: redistest.Prefix(), Server: srv}}
	b.ks = topics.Keyspace{Prefix: b.r.Prefix}
	b.w = broker.Writer{Client: b.r.Client, Keyspace: b.ks}
	gm := newGateModel()
	c, _ := b.start("c1", func(c *handlers.Config) {
		evaluation(gm, func(s *handlers.StageConfig) {
			s.Lease, s.HeartbeatInterval = time.Second, 500*time.Millisecond
			s.JoinWait = -1
		})(c)
		c.Archive = store
	})
	task := topics.Task{TaskID: "first", Tenant: "acme", Stage: "interview-evaluation", Input: simInput(9, 0)}
	key, err := handlers.TaskKey(task)
	if err != nil {
		t.Fatal(err)
	}
	b.enqueue(task)
	wait(t, gm.started, "the owner's model call")
	coord, err := flight.NewCoordinator(flight.Config{Client: b.r.Client, Keyspace: b.ks})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := coord.Cancel(b.ctx, key, "client", flight.CancelParams{TTL: time.Millisecond}); err != nil {
		t.Fatal(err)
	}
	srv.Stop()
	close(gm.release)
	until(t, "the result in the spool", func() bool { return c.Status().Spooled == 1 })
	until(t, "the result in the archive", func() bool {
		a, ok, _ := store.Get(context.Background(), key)
		return ok && a.Status == flight.StatusSucceeded
	})
	srv.Restart()
	until(t, "the write-back refused", func() bool { return c.Status().Spooled == 0 })
	b.enqueue(topics.Task{TaskID: "dup", Tenant: "acme", Stage: "interview-evaluation", Input: simInput(9, 0)})
	got := b.eventsFor([]string{"interview-evaluation"}, []string{"first", "dup"}, 20*time.Second)
	if gm.runs.Load() != 2 {
		t.Errorf("model ran %d times, want 2; dup: %+v: the new flight took the cancelled run's result from the archive",
			gm.runs.Load(), got["dup"])
	}
	// The refused write-back answered the owner's task with the cancellation, once: it does
	// not acquire the new flight when it comes back.
	time.Sleep(time.Second)
	got = b.events([]string{"interview-evaluation"}, 1<<30, 500*time.Millisecond)
	if evs := got["first"]; len(evs) != 1 || evs[0].Status != topics.StatusCancelled {
		t.Errorf("first: events %+v, want one CANCELLED", evs)
	}
}
