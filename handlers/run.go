package handlers

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/google/uuid"
	"github.com/rs/zerolog"
	"go.opentelemetry.io/otel/trace"

	"github.com/flightdeck-ai/flightdeck/executor"
	"github.com/flightdeck-ai/flightdeck/flight"
	"github.com/flightdeck-ai/flightdeck/stream"
	"github.com/flightdeck-ai/flightdeck/topics"
)

// taskRun is one handler run of one task. Before returning nil it settles its message in one of
// four ways. Acknowledged means the task's event is written. Parked means it waits on a running
// flight. Delayed means this consumer holds it without a handler and hands it out again later.
// Released means it goes back to other consumers.
type taskRun struct {
	p        *processor
	msg      *message.Message
	task     topics.Task
	key      string
	ent      entry
	corr     string // correlation id
	retried  bool   // the handler ran for this message before, see stillHeld
	received time.Time
	queued   time.Duration
	// lockLost is closed when the task's session lock was lost while it ran. checkLock renews
	// the lock once and reports whether the run still holds it. Both are nil without a session
	// lock.
	lockLost  chan struct{}
	checkLock func(context.Context) bool
	// runTime is the duration of the last model call, the runMs of events about it.
	runTime time.Duration
	// token is the flight token the task owns or follows. It is 0 before the first acquire.
	token atomic.Int64
	// lead is the group of tasks of the key that wait for this one, as in join.go. It is nil
	// when the task does not lead.
	lead *joinGroup
	// owned is the decision by which own made the task owner of its flight. joined are the
	// tasks that ride in its complete.
	owned  flight.Decision
	joined []*joiner
	// nJoined counts the joined tasks the owner's complete answered, and usage is what its
	// last call used, for the ledger.
	nJoined int
	usage   *flight.Usage
	// span is the task's span, nil without tracing. callSpan is the span id its model call
	// gets should its acquire make it the owner, and ownTrace that call's traceparent once it
	// did.
	span     trace.Span
	callSpan trace.SpanID
	ownTrace string

	logMu    sync.Mutex
	log      zerolog.Logger // built by logger on first use
	logBuilt bool
	logToken int64 // the token log was built with
}

// logger returns the task's logger, with its entry, correlation id, stage, task id, key and,
// once it acquired, its token. It is built on first use and again when the token changed, so a
// task that logs nothing, the common case at level info, builds none. It is safe for concurrent
// use, since the owner's heartbeat logs too.
func (t *taskRun) logger() zerolog.Logger {
	t.logMu.Lock()
	defer t.logMu.Unlock()
	if tok := t.token.Load(); !t.logBuilt || t.logToken != tok {
		c := t.p.log.With().Str("entry", t.ent.id).Str("correlationId", t.corr).Str("stage", t.task.Stage).
			Str("taskId", t.task.TaskID).Str("requestKey", t.key)
		if tok != 0 {
			c = c.Int64("token", tok)
		}
		if id := t.traceID(); id != "" {
			c = c.Str("traceId", id)
		}
		t.log, t.logBuilt, t.logToken = c.Logger(), true, tok
	}
	return t.log
}

// flightTask is the task as the flight scripts answer it.
func (t *taskRun) flightTask() flight.Task {
	return flight.Task{ID: t.task.TaskID, Stream: t.ent.stream, Entry: t.ent.id, Queued: t.queued}
}

// poll is how long a task waits, held but without a handler, before it tries again.
func (t *taskRun) poll() time.Duration {
	d := min(t.p.stage.HeartbeatInterval, 500*time.Millisecond)
	return d/2 + rand.N(d)
}

func (t *taskRun) run(ctx context.Context) error {
	p := t.p
	switch p.stage.Mode {
	case executor.ModeBypass, executor.ModeLocalOnly:
		return t.runUncoordinated(ctx)
	}
	// A task whose outcome was spooled is answered by the write-back. The outcome may be its
	// own run's or that of the leader it rode in. The task waits for the write-back and does
	// not acquire once it was answered.
	awaiting := t.msg.Metadata.Get(stream.MetaNote) == noteWriteBack
	if !t.flushSpooled(ctx) {
		// Its outcome is still spooled: Redis answers again, but not for writes yet. Hold the
		// task until the write-back answers it. Were it to acquire and own the flight anyway,
		// own would give it the held outcome and never run the model.
		if awaiting {
			stream.DelayWith(t.msg, p.stage.HeartbeatInterval, noteWriteBack)
		} else {
			stream.Delay(t.msg, p.stage.HeartbeatInterval)
		}
		return nil
	}
	if awaiting && t.writtenBack() {
		return nil
	}
	if p.stage.SessionLock != nil && *p.stage.SessionLock && t.task.SessionID != "" {
		release, held, err := t.lockSession(ctx)
		if err != nil {
			return err
		}
		if !held {
			// Another task of the session runs: wait without holding a handler.
			stream.Delay(t.msg, t.poll())
			return nil
		}
		defer release()
	}
	return t.acquireLoop(ctx)
}

// flushSpooled writes back a spooled outcome of the task's key before the flight is acquired,
// so that the spooled run's own token answers the task and the flight. It returns false while
// the outcome is still spooled because Redis is away. It spares a token. What keeps the model
// from running again is own's check of the held outcomes.
func (t *taskRun) flushSpooled(ctx context.Context) bool {
	p := t.p
	if !p.spool.Spooled(t.key) {
		return true
	}
	fctx, cancel := context.WithTimeout(ctx, p.stage.Lease)
	defer cancel()
	if _, err := p.spool.Flush(fctx, p.coord); err != nil {
		l := t.logger()
		l.Debug().Err(err).Msg("spool flush failed")
	}
	return !p.spool.Spooled(t.key)
}

// noteWriteBack is the stream.DelayWith note of a task whose outcome was spooled: the owner's
// own task, and the tasks that rode in its failed complete. The write-back answers them.
const noteWriteBack = "write_back"

// writtenBack reports whether flight.Spool.WrittenBack says the write-back of the spooled
// outcome that carried the task answered it. If so it settles the message: the task must not
// acquire, which would answer it a second time.
func (t *taskRun) writtenBack() bool {
	if !t.p.spool.WrittenBack(t.flightTask()) {
		return false
	}
	if debugOn(t.p.log) {
		l := t.logger()
		l.Debug().Msg("answered by the write-back of its spooled outcome")
	}
	stream.Acked(t.msg)
	return true
}

// acquireLoop acquires the flight until the task is settled: owned and run, parked, delayed, or
// answered from the flight's outcome by the acquire script itself.
func (t *taskRun) acquireLoop(ctx context.Context) error {
	p := t.p
	// Active on the key until the loop ends. An outcome of the key this process releases
	// meanwhile stays held for this task's own check, as flight.Spool.Enter describes.
	defer p.spool.Enter(t.key)()
	checkFirst := t.retried
	if t.canJoin() {
		settled, rode := t.join(ctx)
		if settled {
			return nil
		}
		// A task that rode in a complete that failed checks its entry first. Should it own the
		// flight, own answers it with its leader's outcome, which is held or spooled.
		checkFirst = checkFirst || rode
		if t.lead != nil {
			defer p.joins.end(t.key, t.lead)
		}
	}
	for again := checkFirst; ; again = true {
		if err := ctx.Err(); err != nil {
			stream.Release(t.msg)
			return nil
		}
		if again && !t.stillHeld(ctx) {
			return nil
		}
		var deadline time.Time
		if dl, ok := t.task.DeadlineTime(); ok {
			deadline = dl
		}
		actx, asp, call := t.startAcquire(ctx)
		// A leader asks for a small result with a hit, to answer its key's later duplicates.
		params := flight.AcquireParams{Key: t.key, OwnerID: p.name, Task: t.flightTask(),
			Stage: t.task.Stage, Tenant: t.task.Tenant, SessionID: t.task.SessionID, Policy: p.pol,
			Start: true, Deadline: deadline, MaxInline: p.stage.MaxInlineResult, MaxSharedInline: p.stage.MaxSharedInlineResult,
			Run: t.runTime, Trace: call, WantInline: t.lead != nil}
		d, err := executor.Guard(p.breaker, func() (flight.Decision, error) {
			return p.coord.Acquire(actx, params)
		})
		t.endAcquire(asp, d, err)
		if err != nil {
			if nr := (*flight.NotReplicatedError)(nil); errors.As(err, &nr) && nr.Token != 0 {
				// The coordinator gave the unconfirmed claim up. cmd/chaos reads these lines.
				p.metrics.unreplicated.WithLabelValues(t.task.Stage, nr.Op).Inc()
				t.token.Store(nr.Token)
				if nr.HandedOver {
					t.Log(slog.LevelInfo, "flight handed over; the attempt is not spent", nil, "why", "no replica acknowledged the claim")
				} else {
					t.Log(slog.LevelWarn, "handing the flight over failed; its lease lapses by itself", nil, "why", "no replica acknowledged the claim")
				}
			}
			return fmt.Errorf("handlers: task %s: %w", t.task.TaskID, err)
		}
		t.observe(d)
		t.token.Store(d.Token)
		switch d.Action {
		case flight.ActionOwner:
			if debugOn(t.p.log) {
				l := t.logger()
				l.Debug().Str("reason", string(d.Reason)).Int("attempt", d.Attempts).Msg("owner")
			}
			again, err := t.own(ctx, d)
			if !again || err != nil {
				return err
			}
		case flight.ActionFollowerWait:
			if d.Reason == flight.ReasonParked {
				if debugOn(t.p.log) {
					l := t.logger()
					l.Debug().Str("owner", d.OwnerID).Msg("parked on the running flight")
				}
				stream.Park(t.msg)
				return nil
			}
			// Either the owner's own entry was delivered again, because its consumer restarted
			// or another claimed it while the owner lives, or the flight's park set is full.
			// Check again once the owner's lease could have lapsed.
			stream.Delay(t.msg, d.RecheckIn(p.stage.HeartbeatInterval))
			return nil
		default:
			// RESULT_HIT, FAILED_FINAL, CANCELLED, EXPIRED: the script answered the task and
			// the parked ones and acknowledged their entries. A hit's outcome answers the tasks
			// that joined this one, and the key's later duplicates, by hit.
			if fin := p.coord.FinishedBy(params, d); fin != nil && t.lead != nil {
				p.joins.finish(t.key, t.lead, fin)
			}
			t.recordDecision(d)
			stream.Acked(t.msg)
			return nil
		}
	}
}

// stillHeld checks that the task's entry is still this consumer's before the task acquires its
// flight once more after its run was refused or aborted. A consumer that was paused or cut off
// may find the entry claimed by another consumer, or answered meanwhile by the owner that took
// over, whose flight records may even be gone by now. Then the task is not this consumer's to
// run again: the message is acknowledged and forgotten, and stillHeld returns false. An error
// reading Redis counts as held, and the acquire decides.
func (t *taskRun) stillHeld(ctx context.Context) bool {
	cctx, cancel := context.WithTimeout(ctx, t.p.stage.Lease)
	defer cancel()
	held, err := stream.StillHeld(cctx, t.msg)
	if err != nil || held {
		return true
	}
	l := t.logger()
	l.Warn().Msg("the task's entry was answered or taken over while this run was refused; not running it again")
	stream.Acked(t.msg)
	return false
}

// statusOf is the status of the event an acquire wrote for the caller's task.
func statusOf(d flight.Decision) topics.Status {
	switch d.Action {
	case flight.ActionResultHit:
		return topics.StatusSucceeded
	case flight.ActionFailedFinal:
		return topics.StatusFailed
	case flight.ActionCancelled:
		return topics.StatusCancelled
	case flight.ActionExpired:
		return topics.StatusExpired
	}
	return ""
}

// observe counts how an acquire settled the task, as parked or as answered under the label the
// script gave its event. It also counts the parked tasks the acquire answered.
func (t *taskRun) observe(d flight.Decision) {
	m, stage := t.p.metrics, t.task.Stage
	answered, status := d.Answered, statusOf(d)
	own := ""
	switch {
	case d.Action == flight.ActionFollowerWait && d.Reason == flight.ReasonParked:
		own = "parked"
	case status != "" && d.Shared != "":
		own = string(d.Shared) + "_" + string(status)
	case status != "":
		own = "follower_" + string(status)
	}
	if own != "" {
		t.traceOutcome(own)
		m.tasks.WithLabelValues(stage, own).Inc()
		if own != "parked" {
			answered--
			m.endToEnd.WithLabelValues(stage).Observe(time.Since(t.received).Seconds() + t.queued.Seconds())
			t.p.ledger.answered(t.task.Tenant, pathOf(d.Shared), 1, status, d.Usage)
		}
	}
	if answered > 0 && status != "" {
		m.tasks.WithLabelValues(stage, "follower_"+string(status)).Add(float64(answered))
		t.p.ledger.answered(t.task.Tenant, pathFollower, answered, status, d.Usage)
	}
	for _, w := range d.Waited {
		m.followerWait.WithLabelValues(stage).Observe(w.Seconds())
	}
}

// lockSession takes the task's session lock if it is free, keeps it renewed, and returns the
// function that releases it. held is false when another task of the session holds the lock. The
// holder is unique to this run, and the lock is the tenant's.
func (t *taskRun) lockSession(ctx context.Context) (release func(), held bool, err error) {
	p := t.p
	holder := p.name + "/" + t.task.Tenant + "/" + t.task.TaskID + "/" + uuid.NewString()
	token, ok, err := p.sessions.TryAcquire(ctx, t.task.Tenant, t.task.SessionID, holder, p.stage.Lease)
	if err != nil {
		return nil, false, fmt.Errorf("handlers: task %s: session lock: %w", t.task.TaskID, err)
	}
	if !ok {
		return nil, false, nil
	}
	if debugOn(t.p.log) {
		l := t.logger()
		l.Debug().Int64("sessionToken", token).Msg("session lock held")
	}
	t.lockLost = make(chan struct{})
	rctx, stop := context.WithCancel(context.WithoutCancel(ctx))
	done := make(chan struct{})
	renew := func(ctx context.Context) error {
		return p.sessions.Renew(ctx, t.task.Tenant, t.task.SessionID, token, p.stage.Lease)
	}
	go func() {
		defer close(done)
		tick := time.NewTicker(p.stage.HeartbeatInterval)
		defer tick.Stop()
		for {
			select {
			case <-rctx.Done():
				return
			case <-tick.C:
			}
			if err := renew(rctx); errors.Is(err, flight.ErrLockLost) {
				l := t.logger()
				l.Warn().Msg("session lock lost")
				close(t.lockLost)
				return
			}
		}
	}()
	t.checkLock = func(ctx context.Context) bool {
		select {
		case <-t.lockLost:
			return false
		default:
		}
		return !errors.Is(renew(ctx), flight.ErrLockLost)
	}
	return func() {
		stop()
		<-done
		rel, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		if err := p.sessions.Release(rel, t.task.Tenant, t.task.SessionID, token); err != nil && !errors.Is(err, flight.ErrLockLost) {
			l := t.logger()
			l.Warn().Err(err).Msg("session lock release failed; it expires with its lease")
		}
	}, true, nil
}
