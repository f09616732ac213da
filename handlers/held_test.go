package handlers_test

import (
	"context"
	"encoding/json"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/flightdeck-ai/flightdeck/archive/postgres"
	"github.com/flightdeck-ai/flightdeck/handlers"
	"github.com/flightdeck-ai/flightdeck/handlers/model"
	"github.com/flightdeck-ai/flightdeck/internal/broker"
	"github.com/flightdeck-ai/flightdeck/internal/testkit/pgtest"
	"github.com/flightdeck-ai/flightdeck/internal/testkit/redistest"
	"github.com/flightdeck-ai/flightdeck/topics"
)

// The tests of an outcome this process holds unwritten (DESIGN.md section 6, "Held
// outcomes"): the model's answer could not be stored, and no task of its key in this process
// may run the model again. They drive their faults by events (the model's call under way,
// the consumer's spool, a waiting PostgreSQL query), never by sleeps that race the code.

const onlyRun = `{"answer":"from the only run"}`

// gateModel answers every call with onlyRun. Its first call closes started and returns only
// once release is closed: the test faults Redis under the running owner meanwhile.
type gateModel struct {
	started, release chan struct{}
	once             sync.Once
	runs             atomic.Int64
}

func newGateModel() *gateModel {
	return &gateModel{started: make(chan struct{}), release: make(chan struct{})}
}

func (g *gateModel) Name() string { return "sim" }
func (g *gateModel) Call(ctx context.Context, _ model.Request, _ model.ProgressFunc) (json.RawMessage, error) {
	if g.runs.Add(1) == 1 {
		g.once.Do(func() { close(g.started) })
		<-g.release
	}
	return json.RawMessage(onlyRun), nil
}

// wait returns once ch is closed, or fails the test after timeout.
func wait(t *testing.T, ch <-chan struct{}, what string) {
	t.Helper()
	select {
	case <-ch:
	case <-time.After(20 * time.Second):
		t.Fatalf("timed out waiting for %s", what)
	}
}

// until polls cond every 10 ms until it holds, or fails the test after 20 s.
func until(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(20 * time.Second); !cond(); time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
	}
}

// privateBundle is a bundle on a private redis-server that the test may stop and restart.
func privateBundle(t *testing.T) (*bundle, *redistest.Server) {
	srv := redistest.Start(t, nil)
	b := &bundle{t: t, ctx: context.Background(), r: &redistest.Target{Client: srv.Client(), URL: srv.URL(),
		Prefix: redistest.Prefix(), Server: srv}}
	b.ks = topics.Keyspace{Prefix: b.r.Prefix}
	b.w = broker.Writer{Client: b.r.Client, Keyspace: b.ks}
	return b, srv
}

// evaluation sets the evaluation stage's fields through set and the model to m.
func evaluation(m model.Model, set func(*handlers.StageConfig)) func(*handlers.Config) {
	return func(c *handlers.Config) {
		for i := range c.Stages {
			if c.Stages[i].Name == "interview-evaluation" {
				set(&c.Stages[i])
			}
		}
		c.Models = map[string]model.Model{"sim": m}
	}
}

// answeredOnce waits for the events of ids and checks that each got onlyRun.
func answeredOnce(t *testing.T, b *bundle, ids []string) map[string][]topics.Event {
	t.Helper()
	got := b.eventsFor([]string{"interview-evaluation"}, ids, 20*time.Second)
	for _, id := range ids {
		if evs := got[id]; len(evs) == 0 || evs[0].Status != topics.StatusSucceeded || string(evs[0].Result) != onlyRun {
			t.Errorf("%s: events %+v, want SUCCEEDED with the only run's result", id, evs)
		}
	}
	return got
}

// TestUncertainOutcomeInConsumer: Redis dies (and loses its data) between the model's answer
// and the result write. A short outage is bridged by retrying the write and restoring the
// vanished flight; a long one by the spool: either way the task gets the model's one result
// and the model is not run again.
func TestUncertainOutcomeInConsumer(t *testing.T) {
	for _, tc := range []struct {
		name    string
		long    bool // Redis comes back only once the result is spooled
		archive bool // the result, spooled for Redis, must reach the archive at once
	}{{"short outage", false, false}, {"outage past the lease, with the archive", true, true}} {
		t.Run(tc.name, func(t *testing.T) {
			var store *postgres.Store
			if tc.archive {
				var err error
				if store, err = postgres.Open(context.Background(), postgres.Config{URL: pgtest.New(t).URL, Deployment: "test"}); err != nil {
					t.Fatal(err)
				}
				defer store.Close()
			}
			b, srv := privateBundle(t)
			gm := newGateModel()
			c, _ := b.start("c1", func(c *handlers.Config) {
				evaluation(gm, func(s *handlers.StageConfig) {
					s.Lease, s.HeartbeatInterval = time.Second, 200*time.Millisecond
				})(c)
				if store != nil {
					c.Archive = store
				}
			})
			b.enqueue(topics.Task{TaskID: "u1", Stage: "interview-evaluation", Input: simInput(1, 0)})
			wait(t, gm.started, "the model call")
			srv.Stop()
			close(gm.release)
			if tc.long {
				until(t, "the result in the spool", func() bool { return c.Status().Spooled == 1 })
			}
			srv.Restart()
			evs := answeredOnce(t, b, []string{"u1"})["u1"]
			if gm.runs.Load() != 1 {
				t.Errorf("model ran %d times", gm.runs.Load())
			}
			if store != nil && len(evs) > 0 {
				until(t, "the spooled result in the archive", func() bool {
					a, ok, _ := store.Get(context.Background(), evs[0].RequestKey)
					return ok && string(a.Result) == onlyRun
				})
			}
		})
	}
}

// TestJoinedTasksWaitForTheSpool: duplicates that joined an owner whose result cannot be
// stored (Redis down past the lease, and its data lost) are answered with that result: the
// model runs once and every task gets its one result, whatever order the write-back, the
// joined tasks' own acquires and Redis's return come in.
func TestJoinedTasksWaitForTheSpool(t *testing.T) {
	b, srv := privateBundle(t)
	gm := newGateModel()
	c, _ := b.start("c1", evaluation(gm, func(s *handlers.StageConfig) {
		s.Lease, s.HeartbeatInterval = time.Second, 200*time.Millisecond
		s.JoinWait, s.Concurrency = time.Second, 4
	}))
	ids := dupTasks(b, "s", 1, 4, 0)
	wait(t, gm.started, "the owner's model call")
	until(t, "the four tasks read", func() bool {
		return b.r.Client.XPending(b.ctx, b.ks.Tasks("interview-evaluation"), topics.ConsumerGroup).Val().Count == 4
	})
	srv.Stop()
	close(gm.release)
	until(t, "the result in the spool", func() bool { return c.Status().Spooled == 1 })
	srv.Restart() // empty: the flight, its task entries and the consumer group are gone
	answeredOnce(t, b, ids)
	if gm.runs.Load() != 1 {
		t.Errorf("model ran %d times, want 1", gm.runs.Load())
	}
}

// TestDuplicateOwnerTakesTheHeldOutcome: while the owner's result is in its hands, unwritten
// (its complete waits on the archive's fence after Redis lost the flight), a duplicate read by
// the same consumer acquires the flight and owns it. It completes the flight with the held
// result instead of running the model; the owner's late write is refused and its task answered
// from that flight. On a consumer without held outcomes the duplicate runs the model again.
func TestDuplicateOwnerTakesTheHeldOutcome(t *testing.T) {
	// No heartbeat before the model returns: nothing writes the lost flight back but the
	// owner's complete. The archive answers no one until the duplicate is answered: the
	// owner's fence question (and, without held outcomes, the duplicate's lookup) wait on the
	// lock.
	o := startArchiveOwner(t, 7)
	b, gm, key, tx := o.b, o.gm, o.key, o.tx
	// Redis loses the flight under its running owner.
	if err := b.r.Client.Del(b.ctx, b.ks.FlightKeys(key)...).Err(); err != nil {
		t.Fatal(err)
	}
	close(gm.release)
	o.waitOnTheLock(t, "the owner's complete asking the archive")
	b.enqueue(topics.Task{TaskID: "dup", Tenant: "acme", Stage: "interview-evaluation", Input: simInput(7, 0)})
	got := answeredOnce(t, b, []string{"dup"})
	if e := got["dup"]; len(e) > 0 && e[0].Shared != topics.SharedOwner {
		t.Errorf("dup: shared %s, want owner (of the flight it completed with the held result)", e[0].Shared)
	}
	if err := tx.Rollback(b.ctx); err != nil {
		t.Fatal(err)
	}
	answeredOnce(t, b, []string{"first", "dup"})
	if gm.runs.Load() != 1 {
		t.Errorf("model ran %d times, want 1", gm.runs.Load())
	}
	until(t, "no entry pending", func() bool {
		return b.r.Client.XPending(b.ctx, b.ks.Tasks("interview-evaluation"), topics.ConsumerGroup).Val().Count == 0
	})
}

// archiveOwner is a consumer with an archive whose only task ("first") has an owner in its
// model call, and whose archive tables tx holds locked: whatever asks the archive waits until
// tx ends. The lease (20 s, heartbeat 10 s) outlasts the test, and tasks do not join.
type archiveOwner struct {
	b   *bundle
	gm  *gateModel
	key string
	tx  pgx.Tx
}

// startArchiveOwner starts the consumer and its owner, on the input simInput(input, 0), and
// locks the archive once the owner's model call is under way.
func startArchiveOwner(t *testing.T, input int) *archiveOwner {
	t.Helper()
	pg := pgtest.New(t)
	store, err := postgres.Open(context.Background(), postgres.Config{URL: pg.URL, Deployment: "test"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(store.Close)
	o := &archiveOwner{b: setup(t), gm: newGateModel()}
	o.b.start("c1", func(c *handlers.Config) {
		evaluation(o.gm, func(s *handlers.StageConfig) {
			s.Lease, s.HeartbeatInterval = 20*time.Second, 10*time.Second
			s.JoinWait = -1
		})(c)
		c.Archive = store
	})
	task := topics.Task{TaskID: "first", Tenant: "acme", Stage: "interview-evaluation", Input: simInput(input, 0)}
	if o.key, err = handlers.TaskKey(task); err != nil {
		t.Fatal(err)
	}
	o.b.enqueue(task)
	wait(t, o.gm.started, "the owner's model call")

	conn, err := pgx.Connect(o.b.ctx, pg.URL)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close(context.Background()) })
	if o.tx, err = conn.Begin(o.b.ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { o.tx.Rollback(context.Background()) })
	if _, err := o.tx.Exec(o.b.ctx, "LOCK TABLE flightdeck_outcomes, flightdeck_claims IN ACCESS EXCLUSIVE MODE"); err != nil {
		t.Fatal(err)
	}
	return o
}

// waitOnTheLock waits until another session waits on the archive's lock.
func (o *archiveOwner) waitOnTheLock(t *testing.T, what string) {
	t.Helper()
	until(t, what, func() bool {
		var n int
		err := o.tx.QueryRow(o.b.ctx, `SELECT count(*) FROM pg_stat_activity
			WHERE wait_event_type = 'Lock' AND pid <> pg_backend_pid()`).Scan(&n)
		return err == nil && n > 0
	})
}
