package handlers_test

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/flightdeck-ai/flightdeck/archive"
	"github.com/flightdeck-ai/flightdeck/flight"
	"github.com/flightdeck-ai/flightdeck/handlers"
	"github.com/flightdeck-ai/flightdeck/internal/pgtest"
	"github.com/flightdeck-ai/flightdeck/topics"
)

// TestCancelledRunsHeldResultIsNotTaken: the flight is cancelled while its owner's model runs;
// the model answers anyway, and the owner's complete waits (on the archive's fence: Redis lost
// the cancelled record, its TTL was 1 ms). Meanwhile a duplicate owns a new flight. The result
// the owner holds is of a closed run, which may never be stored (DESIGN.md section 3): the
// duplicate runs the model instead of completing its flight with it.
func TestCancelledRunsHeldResultIsNotTaken(t *testing.T) {
	pg := pgtest.New(t)
	store, err := archive.Open(context.Background(), archive.Config{URL: pg.URL, Deployment: "test"})
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	b := setup(t)
	gm := newGateModel()
	b.start("c1", func(c *handlers.Config) {
		evaluation(gm, func(s *handlers.StageConfig) {
			s.Lease, s.HeartbeatInterval = 20*time.Second, 10*time.Second
			s.JoinWait = -1
		})(c)
		c.Archive = store
	})
	task := topics.Task{TaskID: "first", Tenant: "acme", Stage: handlers.StageEvaluation, Input: simInput(8, 0)}
	key, err := handlers.TaskKey(task)
	if err != nil {
		t.Fatal(err)
	}
	b.enqueue(task)
	wait(t, gm.started, "the owner's model call")

	conn, err := pgx.Connect(b.ctx, pg.URL)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	tx, err := conn.Begin(b.ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(context.Background())
	if _, err := tx.Exec(b.ctx, "LOCK TABLE flightdeck_outcomes, flightdeck_claims IN ACCESS EXCLUSIVE MODE"); err != nil {
		t.Fatal(err)
	}
	coord, err := flight.NewCoordinator(flight.Config{Client: b.r.Client, Keyspace: b.ks})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := coord.Cancel(b.ctx, key, "client", flight.CancelParams{TTL: time.Millisecond}); err != nil {
		t.Fatal(err)
	}
	until(t, "the cancelled record gone", func() bool {
		return b.r.Client.Exists(b.ctx, b.ks.Meta(key)).Val() == 0
	})
	close(gm.release)
	until(t, "the owner's complete asking the archive", func() bool {
		var n int
		err := tx.QueryRow(b.ctx, `SELECT count(*) FROM pg_stat_activity
			WHERE wait_event_type = 'Lock' AND pid <> pg_backend_pid()`).Scan(&n)
		return err == nil && n > 0
	})
	b.enqueue(topics.Task{TaskID: "dup", Tenant: "acme", Stage: handlers.StageEvaluation, Input: simInput(8, 0)})
	b.eventsFor([]string{handlers.StageEvaluation}, []string{"dup"}, 20*time.Second)
	if gm.runs.Load() != 2 {
		t.Errorf("model ran %d times, want 2: the duplicate's new flight took the cancelled run's held result", gm.runs.Load())
	}
	if err := tx.Rollback(b.ctx); err != nil {
		t.Fatal(err)
	}
	b.eventsFor([]string{handlers.StageEvaluation}, []string{"first", "dup"}, 20*time.Second)
}
