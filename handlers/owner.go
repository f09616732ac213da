package handlers

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"runtime/debug"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/rs/zerolog"

	"github.com/flightdeck-ai/flightdeck/flight"
	"github.com/flightdeck-ai/flightdeck/handlers/model"
	"github.com/flightdeck-ai/flightdeck/stream"
	"github.com/flightdeck-ai/flightdeck/topics"
)

// errSessionLockLost cancels a run whose session lock expired under it.
var errSessionLockLost = errors.New("handlers: session lock lost")

// own runs the flight as its owner (acquire started it). again asks acquireLoop to acquire
// again: the flight answers the task (cancelled, expired, another owner) or makes it owner
// once more (a retry left to this consumer).
func (t *taskRun) own(ctx context.Context, d flight.Decision) (again bool, err error) {
	p := t.p
	o := *d.Owner
	held, heldToken, isHeld := p.spool.Held(t.key)
	if isHeld && t.runClosed(ctx, heldToken, "held outcome") {
		isHeld = false
	}
	if p.archive != nil {
		if !isHeld {
			if done, again, err := t.rehydrate(ctx, o); done {
				return again, err
			}
		}
		t.claim(ctx, d)
	}
	if isHeld {
		// This process has the key's outcome in hand, unwritten (its owner's write is under
		// way, or failed and spooled): the model is not run again for it; this owner's flight
		// takes that result (DESIGN.md section 6, "Held outcomes").
		l := t.logger()
		l.Info().Int64("heldToken", heldToken).Msg(msgHeldAnswer)
		stream.Finishing(t.msg)
		return t.settle(ctx, o, held, p.spool.Hold(t.key, o.Token, held))
	}
	p.life.running.Add(1)
	defer p.life.running.Add(-1)

	runCtx, cancel := context.WithCancelCause(p.life.owners)
	defer cancel(nil)
	var progress atomic.Int64
	stopHeartbeat := t.startHeartbeat(runCtx, cancel, o, &progress)
	start := time.Now()
	if debugOn(p.log) {
		l := t.logger()
		l.Debug().Str("reason", string(d.Reason)).Int("attempt", d.Attempts).Msg("model call")
	}
	p.metrics.modelCalls.WithLabelValues(t.task.Stage).Inc()
	p.metrics.running.WithLabelValues(t.task.Stage).Inc()
	deadline, _ := t.task.DeadlineTime()
	out, callErr := t.callModel(runCtx, model.Request{Stage: t.task.Stage, TaskID: t.task.TaskID,
		Tenant: t.task.Tenant, SessionID: t.task.SessionID, Input: t.task.Input, ModelVersion: t.task.ModelVersion,
		PromptVersion: t.task.PromptVersion, Attempt: d.Attempts, Consumer: p.name, Params: t.task.Params,
		RequestKey: t.key, Deadline: deadline}, func() { progress.Add(1) })
	var release func(settled bool)
	if callErr == nil {
		// Held from the moment it exists until Redis took or refused it (settle releases it;
		// this only when something panics before).
		release = p.spool.Hold(t.key, o.Token, out)
		defer release(false)
	}
	p.metrics.running.WithLabelValues(t.task.Stage).Dec()
	t.runTime = time.Since(start)
	cause := context.Cause(runCtx)
	cancel(nil)
	stopHeartbeat()
	p.metrics.runTime.WithLabelValues(t.task.Stage).Observe(t.runTime.Seconds())

	// A call that failed after its run was cancelled failed because of that cancellation.
	if callErr != nil && cause != nil {
		switch v := flight.Judge(cause); {
		case v == flight.VerdictStale || v.Closed():
			t.warn().Err(cause).Msg("run aborted by the flight; acquiring again")
			return true, nil
		case errors.Is(cause, ErrShuttingDown):
			t.handover(o, "consumer_stopped")
			stream.Release(t.msg)
			return false, nil
		case errors.Is(cause, errSessionLockLost):
			t.handover(o, "session_lock_lost")
			stream.Delay(t.msg, t.poll())
			return false, nil
		}
	}
	// What is left is a short write (or, rarely, another acquire): the subscriber may read
	// this slot's next task meanwhile.
	stream.Finishing(t.msg)
	if callErr != nil {
		return t.fail(ctx, o, callErr)
	}
	return t.settle(ctx, o, out, release)
}

// runClosed asks, for the owner about to complete its flight with what (the outcome of
// token's run: held by this process, or archived), whether that run was closed for good
// (flight.Coordinator.RunClosed): the owner then runs the model instead. An unanswered
// question takes the outcome (the model is not run twice).
func (t *taskRun) runClosed(ctx context.Context, token int64, what string) bool {
	cctx, cancel := context.WithTimeout(ctx, t.p.stage.Lease)
	defer cancel()
	closed, err := t.p.coord.RunClosed(cctx, t.key, token)
	l := t.logger()
	switch {
	case err != nil:
		l.Warn().Err(err).Int64("outcomeToken", token).Msg("cannot tell whether the " + what + "'s run was closed; taking it")
		return false
	case closed:
		l.Info().Int64("outcomeToken", token).Msg("the " + what + "'s run was cancelled or expired for good; not taking it")
	}
	return closed
}

// msgHeldAnswer is logged by an owner that completes its flight with an outcome this process
// holds instead of a model call (cmd/chaos reads it).
const msgHeldAnswer = "answered from the outcome this process holds; no model call"

// settle completes the flight o owns with out, which the caller holds (flight.Spool.Hold)
// until settle returns and calls release: Redis took it or refused it, or it was spooled and
// the task waits for the write-back. again and err are own's results.
func (t *taskRun) settle(ctx context.Context, o flight.Ownership, out []byte, release func(settled bool)) (again bool, err error) {
	p := t.p
	settled := false
	defer func() { release(settled) }()
	// A run that lost its session lock may not complete: another task of the session may have
	// run meanwhile.
	if t.checkLock != nil {
		cctx, ccancel := context.WithTimeout(context.WithoutCancel(ctx), p.stage.Lease)
		held := t.checkLock(cctx)
		ccancel()
		if !held {
			t.handover(o, "session_lock_lost")
			stream.Delay(t.msg, t.poll())
			return false, nil
		}
	}
	// The tasks of the key that wait for this one ride in its complete, and each gets its
	// verdict whatever happens, a panic included.
	joined := t.takeJoined()
	o.Joined = joinedTasks(joined)
	v := notAnswered
	defer func() { giveVerdict(joined, v) }()
	st, err := t.complete(ctx, o, out)
	if st.JoinedAnswered {
		v = answered
	}
	switch verdict := flight.Judge(err); {
	case verdict == flight.VerdictTaken:
		settled = true
		if st.Restored {
			t.warn().Msg("the flight was gone when the result arrived; written back")
		}
		if debugOn(p.log) {
			l := t.logger()
			l.Debug().Dur("runMs", t.runTime).Int("answered", st.Events).Msg("owner completed")
		}
		t.observeOwner(topics.StatusSucceeded, st)
		t.record(flight.StatusSucceeded, o, out, nil)
		stream.Acked(t.msg)
		return false, nil
	case verdict.Closed():
		settled = true // it may never be stored: nobody takes it
		t.warn().Err(err).Msg("result refused: the run was closed; the task is answered with the flight's outcome")
		stream.Acked(t.msg)
		return false, nil
	case verdict.Refused():
		t.warn().Err(err).Msg("result refused: another owner holds the flight")
		return t.settled(st), nil
	default:
		// The model answered but the result cannot be stored: an uncertain outcome. Spool it
		// (it is written back when Redis answers; the write-back answers this task and the
		// joined ones too) and hold the tasks meanwhile. The model is not run again for it.
		oc := o.Outcome(out)
		oc.Stage, oc.Tenant, oc.Key, oc.OwnerID, oc.Task = t.task.Stage, t.task.Tenant, t.key, p.name, t.flightTask()
		if serr := p.spool.Add(oc); serr != nil {
			return false, fmt.Errorf("handlers: task %s: store result: %w (spool: %w)", t.task.TaskID, err, serr)
		}
		v, settled = spooled, true // the spool holds it now
		p.metrics.spooled.WithLabelValues(t.task.Stage).Inc()
		// The archive takes the result now: the write-back to Redis may come much later (a
		// larger token still wins, there and in the archive).
		t.record(flight.StatusSucceeded, o, out, nil)
		t.warn().Err(err).Msg("result write failed: uncertain outcome spooled; the task waits for the write-back")
		stream.DelayWith(t.msg, p.stage.HeartbeatInterval, noteWriteBack)
		return false, nil
	}
}

// callModel runs the stage's model (a handler function or an adapter); a panic in it is
// recovered and returned as a final model.TypePanic failure, logged with its stack, so that
// the flight fails at once instead of losing its lease.
func (t *taskRun) callModel(ctx context.Context, req model.Request, progress model.ProgressFunc) (out json.RawMessage, err error) {
	defer func() {
		if r := recover(); r != nil {
			l := t.logger()
			l.Error().Interface("panic", r).Str("stack", string(debug.Stack())).Msg("the stage's handler panicked; the flight fails")
			out, err = nil, &model.Error{Type: model.TypePanic, Code: "panic", Message: fmt.Sprint(r)}
		}
	}()
	return t.p.model.Call(ctx, req, progress)
}

// warn starts a warning of the task, with the last model call's duration when there was one.
// Not for the heartbeat goroutine (runTime is the handler's).
func (t *taskRun) warn() *zerolog.Event {
	l := t.logger()
	e := l.Warn()
	if t.runTime > 0 {
		e = e.Dur("runMs", t.runTime)
	}
	return e
}

// settled turns a refusal's settlement into the message's fate: answered (acknowledged by
// the script), parked on the current owner, or neither (acquire again).
func (t *taskRun) settled(st flight.Settlement) bool {
	switch {
	case st.Answered:
		stream.Acked(t.msg)
	case st.Parked:
		stream.Park(t.msg)
	default:
		return true
	}
	return false
}

// fail records the failed model call. A final failure answers the task and the parked ones; a
// retryable one holds the task (without a handler) for a backoff, then acquires again, which
// retries while attempts are left.
func (t *taskRun) fail(ctx context.Context, o flight.Ownership, callErr error) (bool, error) {
	p := t.p
	me := model.Classify(callErr)
	// The delay before the next attempt holds for every task of the key (the flight records
	// it); a long one is waited in the scheduled set, this entry given up.
	back := p.stage.Retry.Delay(o.Attempts, me.RetryAfter)
	f := me.Failure()
	f.RetryIn, f.EntryReleased = back, back > scheduleAfter
	st, err := retryCoordination(ctx, p.stage.Lease, func(ctx context.Context) (flight.Settlement, error) {
		return p.coord.Fail(ctx, o, f, t.runTime)
	})
	switch v := flight.Judge(err); {
	case v == flight.VerdictTaken && st.Final:
		t.warn().Err(me).Msg("model call failed for good")
		t.observeOwner(topics.StatusFailed, st)
		t.record(flight.StatusFailed, o, nil, &f)
		stream.Acked(t.msg)
		return false, nil
	case v == flight.VerdictTaken:
		t.warn().Err(me).Dur("retryIn", back).Msg("model call failed; the flight retries")
		return false, t.wait(ctx, time.Now().Add(back), "retry")
	case v.Closed():
		stream.Acked(t.msg)
		return false, nil
	case v.Refused():
		return t.settled(st), nil
	default:
		return false, fmt.Errorf("handlers: task %s: record failure: %w", t.task.TaskID, err)
	}
}

// observeOwner counts the owner's own event and the parked tasks its call answered.
func (t *taskRun) observeOwner(status topics.Status, st flight.Settlement) {
	t.observeSettled(topics.SharedOwner, status, st)
}

// observeSettled counts the owner's own event (shared: owner, or archive for an outcome
// taken from the archive) and the parked tasks its call answered.
func (t *taskRun) observeSettled(shared topics.Shared, status topics.Status, st flight.Settlement) {
	m, stage := t.p.metrics, t.task.Stage
	m.tasks.WithLabelValues(stage, string(shared)+"_"+string(status)).Inc()
	if n := st.Events - 1; n > 0 {
		m.tasks.WithLabelValues(stage, "follower_"+string(status)).Add(float64(n))
	}
	for _, w := range st.Waited {
		m.followerWait.WithLabelValues(stage).Observe(w.Seconds())
	}
	m.endToEnd.WithLabelValues(stage).Observe(time.Since(t.received).Seconds() + t.queued.Seconds())
}

// complete stores the result, retrying a Redis error for up to a lease: the model already
// ran, and giving up here would make the next owner run it again. A retry after a lost reply
// is accepted as the same outcome.
func (t *taskRun) complete(ctx context.Context, o flight.Ownership, out []byte) (flight.Settlement, error) {
	return retryCoordination(ctx, t.p.stage.Lease, func(ctx context.Context) (flight.Settlement, error) {
		return t.p.coord.Complete(ctx, o, out, t.runTime)
	})
}

// retryCoordination runs call until it answers (anything but a coordination failure) or for
// up to budget, with a growing pause.
func retryCoordination(ctx context.Context, budget time.Duration, call func(context.Context) (flight.Settlement, error)) (flight.Settlement, error) {
	deadline := time.Now().Add(budget)
	ctx = context.WithoutCancel(ctx)
	for wait := 50 * time.Millisecond; ; wait = min(2*wait, time.Second) {
		cctx, cancel := context.WithTimeout(ctx, budget)
		st, err := call(cctx)
		cancel()
		if flight.Judge(err) != flight.VerdictUnavailable || time.Now().Add(wait).After(deadline) {
			return st, err
		}
		time.Sleep(wait)
	}
}

// handover gives the running flight up without spending its attempt: the next acquire (this
// task's entry, released or delayed, or any duplicate) takes over at once.
func (t *taskRun) handover(o flight.Ownership, why string) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	if err := t.p.coord.Handover(ctx, o); err != nil && !errors.Is(err, flight.ErrGone) {
		t.warn().Err(err).Str("why", why).Msg("handing the flight over failed; its lease lapses by itself")
		return
	}
	l := t.logger()
	l.Info().Str("why", why).Msg("flight handed over; the attempt is not spent")
}

// startHeartbeat starts the owner's heartbeat (see heartbeat) and returns the function that
// waits for it to stop once ctx is done. The first beat is due one HeartbeatInterval after
// the start, so a model call that returns sooner starts no heartbeat at all; a task holding
// a session lock starts it at once, to watch the lock.
func (t *taskRun) startHeartbeat(ctx context.Context, cancel context.CancelCauseFunc, o flight.Ownership, progress *atomic.Int64) (wait func()) {
	done := make(chan struct{})
	if t.lockLost != nil {
		go func() {
			defer close(done)
			t.heartbeat(ctx, cancel, o, progress)
		}()
		return func() { <-done }
	}
	timer := time.AfterFunc(t.p.stage.HeartbeatInterval, func() {
		defer close(done)
		if ctx.Err() == nil && t.beat(ctx, cancel, o, progress) {
			t.heartbeat(ctx, cancel, o, progress)
		}
	})
	return func() {
		if !timer.Stop() {
			<-done
		}
	}
}

// heartbeat renews the lease every HeartbeatInterval; it cancels the run when the flight is
// cancelled, expired or fenced off, and when the session lock is lost. A meta that vanished
// is written back by the heartbeat itself.
func (t *taskRun) heartbeat(ctx context.Context, cancel context.CancelCauseFunc, o flight.Ownership, progress *atomic.Int64) {
	p := t.p
	tick := time.NewTicker(p.stage.HeartbeatInterval)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.lockLost: // nil (never ready) for stages without a session lock
			cancel(errSessionLockLost)
			return
		case <-tick.C:
		}
		if !t.beat(ctx, cancel, o, progress) {
			return
		}
	}
}

// beat renews the lease once; it answers false, having cancelled the run, when the flight
// refused it (stale token, cancelled, expired).
func (t *taskRun) beat(ctx context.Context, cancel context.CancelCauseFunc, o flight.Ownership, progress *atomic.Int64) bool {
	p := t.p
	hctx, hcancel := context.WithTimeout(ctx, p.stage.HeartbeatInterval)
	prog := ""
	if n := progress.Load(); n > 0 {
		prog = strconv.FormatInt(n, 10)
	}
	restored, err := p.coord.Heartbeat(hctx, o, prog)
	hcancel()
	if restored {
		l := t.logger()
		l.Warn().Msg("the flight's meta was gone; written back by its owner")
	}
	switch v := flight.Judge(err); {
	case v == flight.VerdictTaken:
	case v == flight.VerdictStale || v.Closed():
		cancel(err)
		return false
	case ctx.Err() == nil:
		l := t.logger()
		l.Warn().Err(err).Msg("heartbeat failed")
	}
	return true
}

// debugOn reports whether l logs at level debug.
func debugOn(l zerolog.Logger) bool {
	return l.GetLevel() <= zerolog.DebugLevel && zerolog.GlobalLevel() <= zerolog.DebugLevel
}
