package handlers

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/rs/zerolog"

	"github.com/flightdeck-ai/flightdeck/flight"
	"github.com/flightdeck-ai/flightdeck/handlers/model"
	"github.com/flightdeck-ai/flightdeck/stream"
	"github.com/flightdeck-ai/flightdeck/topics"
)

// errSessionLockLost cancels a run whose session lock expired under it.
var errSessionLockLost = errors.New("handlers: session lock lost")

// own runs the flight that acquire started as its owner, through the one owner lifecycle of
// flight.Owner, with taskRun as its flight.Caller. It settles the message from how the run
// ended. again asks acquireLoop to acquire again. The flight then answers the task, as
// cancelled, expired or owned by another, or makes it owner once more for a retry left to this
// consumer.
func (t *taskRun) own(ctx context.Context, d flight.Decision) (again bool, err error) {
	p := t.p
	p.life.running.Add(1)
	defer p.life.running.Add(-1)
	t.owned = d
	r := flight.Run{Context: p.life.owners, Caller: t, Tokens: p.stage.EstimateTokens + (len(t.task.Input)+3)/4}
	if t.lockLost != nil {
		r.Abort, r.AbortCause = t.lockLost, errSessionLockLost
	}
	e := p.owner.Run(ctx, d, r)
	if e.RunTime > 0 {
		t.runTime = e.RunTime
	}
	return t.ended(ctx, e)
}

// Call runs the stage's model for the owned flight. It implements flight.Caller. A model that
// panics is counted, and its span ended, before the panic goes on to flight.Guarded.
func (t *taskRun) Call(ctx context.Context, progress func()) (out []byte, err error) {
	p, d := t.p, t.owned
	if debugOn(p.log) {
		l := t.logger()
		l.Debug().Str("reason", string(d.Reason)).Int("attempt", d.Attempts).Msg("model call")
	}
	p.metrics.modelCalls.WithLabelValues(t.task.Stage).Inc()
	p.metrics.running.WithLabelValues(t.task.Stage).Inc()
	ctx, sp := t.startCall(ctx, d)
	start := time.Now()
	done := false
	defer func() {
		if !done {
			err = errModelPanicked
		}
		p.ledger.called(t.task.Tenant, rateLimited(err))
		endCall(ctx, sp, err)
		p.metrics.running.WithLabelValues(t.task.Stage).Dec()
		p.metrics.runTime.WithLabelValues(t.task.Stage).Observe(time.Since(start).Seconds())
	}()
	deadline, _ := t.task.DeadlineTime()
	out, err = t.p.model.Call(ctx, model.Request{Stage: t.task.Stage, TaskID: t.task.TaskID, Tenant: t.task.Tenant,
		SessionID: t.task.SessionID, Input: t.task.Input, ModelVersion: t.task.ModelVersion,
		PromptVersion: t.task.PromptVersion, Attempt: d.Attempts, Consumer: p.name, Params: t.task.Params,
		RequestKey: t.key, Deadline: deadline}, progress)
	done = true
	return out, err
}

// errModelPanicked is the error a model call's span records when the model panicked; the
// panic itself fails the flight (flight.Guarded).
var errModelPanicked = errors.New("handlers: the model panicked")

// Failure classifies the model's error. It implements flight.Caller. The flight records the
// delay before the next attempt, and it holds for every task of the key. A long delay is waited
// in the scheduled set, and this entry is given up.
func (t *taskRun) Failure(err error, o flight.Ownership) flight.Failure {
	me := model.Classify(err)
	back := t.p.stage.Retry.Delay(o.Attempts, me.RetryAfter)
	f := me.Failure()
	f.RetryIn, f.EntryReleased = back, back > scheduleAfter
	return f
}

// Finishing lets the subscriber read this slot's next task while the short write that is left
// goes on. It implements flight.Caller.
func (t *taskRun) Finishing() { stream.Finishing(t.msg) }

// BeforeComplete checks the session lock, since a run that lost it may not complete. It puts
// the tasks of the key that wait for this one in the complete. It implements flight.Caller.
func (t *taskRun) BeforeComplete(ctx context.Context) ([]flight.Task, bool) {
	if t.checkLock != nil {
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), t.p.stage.Lease)
		held := t.checkLock(cctx)
		cancel()
		if !held {
			return nil, false
		}
	}
	t.joined = t.takeJoined()
	return joinedTasks(t.joined), true
}

// AfterComplete gives each joined task its verdict. It implements flight.Caller.
func (t *taskRun) AfterComplete(st flight.Settlement, wasSpooled bool) {
	v := notAnswered
	switch {
	case wasSpooled:
		v = spooled
	case st.JoinedAnswered:
		v = answered
	}
	giveVerdict(t.joined, v)
	if v == answered {
		t.nJoined = len(t.joined)
	}
	t.joined = nil
}

// ended settles the message from how the owner's run ended. again and err are own's.
func (t *taskRun) ended(ctx context.Context, e flight.End) (again bool, err error) {
	p := t.p
	if e.Err != nil {
		if nr := (*flight.NotReplicatedError)(nil); errors.As(e.Err, &nr) {
			p.metrics.unreplicated.WithLabelValues(t.task.Stage, nr.Op).Inc()
		}
	}
	if u := e.Usage; u != nil {
		p.metrics.tokens.WithLabelValues(t.task.Stage, "prompt").Add(float64(u.PromptTokens))
		p.metrics.tokens.WithLabelValues(t.task.Stage, "completion").Add(float64(u.CompletionTokens))
		p.ledger.spent(t.task.Tenant, u)
	}
	t.usage = e.Usage
	if l := p.owner.Limiter; l != nil {
		p.metrics.limitFactor.WithLabelValues(l.Name()).Set(l.Factor())
	}
	switch e.How {
	case flight.EndCompleted:
		if e.Settlement.Restored {
			t.warn().Msg("the flight was gone when the result arrived; written back")
		}
		if debugOn(p.log) {
			l := t.logger()
			l.Debug().Dur("runMs", t.runTime).Int("answered", e.Settlement.Events).Msg("owner completed")
		}
		t.observeSettled(topics.SharedOwner, topics.StatusSucceeded, e.Settlement)
		t.keepFinished(e)
		stream.Acked(t.msg)
	case flight.EndArchived:
		status := e.Archived.Status
		if e.Verdict == flight.VerdictCancelled {
			status = flight.StatusCancelled
		}
		p.archive.Metrics().Rehydrated(t.task.Stage, string(status))
		t.observeSettled(topics.SharedArchive, topics.Status(status), e.Settlement)
		stream.Acked(t.msg)
	case flight.EndFailed:
		t.warn().Err(e.CallErr).Msg("model call failed for good")
		t.observeSettled(topics.SharedOwner, topics.StatusFailed, e.Settlement)
		stream.Acked(t.msg)
	case flight.EndRetry:
		if th := e.Throttled; th.Wait > 0 {
			p.metrics.limiterWaits.WithLabelValues(t.task.Stage, p.owner.Limiter.Name(), th.Why).Inc()
			p.ledger.waited(t.task.Tenant)
			if debugOn(p.log) {
				l := t.logger()
				l.Debug().Str("why", th.Why).Dur("wait", th.Wait).Msg("limiter: the call waits")
			}
			return false, t.wait(ctx, time.Now().Add(th.Wait), "limiter")
		}
		t.warn().Err(e.CallErr).Dur("retryIn", e.Failure.RetryIn).Msg("model call failed; the flight retries")
		return false, t.wait(ctx, time.Now().Add(e.Failure.RetryIn), "retry")
	case flight.EndClosed:
		if e.Op == "complete" {
			t.warn().Err(e.Err).Msg("result refused: the run was closed; the task is answered with the flight's outcome")
		}
		if e.Settlement.Events > 0 {
			status := topics.StatusCancelled
			if e.Verdict == flight.VerdictExpired {
				status = topics.StatusExpired
			}
			t.observeSettled(topics.SharedOwner, status, e.Settlement)
		}
		stream.Acked(t.msg)
	case flight.EndRefused:
		if e.Op == "complete" {
			t.warn().Err(e.Err).Msg("result refused: another owner holds the flight")
		}
		if e.Settlement.Answered {
			p.ledger.answered(t.task.Tenant, pathFollower, 1, "", nil) // from the other owner's outcome
		}
		return t.settled(e.Settlement), nil
	case flight.EndSpooled:
		p.metrics.spooled.WithLabelValues(t.task.Stage).Inc()
		t.warn().Err(e.Err).Msg("result write failed: uncertain outcome spooled; the task waits for the write-back")
		stream.DelayWith(t.msg, p.stage.HeartbeatInterval, noteWriteBack)
	case flight.EndAborted:
		switch {
		case !e.Handed:
			t.warn().Err(e.Cause).Msg("run aborted by the flight; acquiring again")
			return true, nil
		case errors.Is(e.Cause, errSessionLockLost):
			stream.Delay(t.msg, t.poll())
		default: // the consumer stops
			stream.Release(t.msg)
		}
	case flight.EndHanded:
		stream.Delay(t.msg, t.poll()) // the session lock was lost before the complete
	default:
		return false, fmt.Errorf("handlers: task %s: %s: %w", t.task.TaskID, e.Op, e.Err)
	}
	return false, nil
}

// Log writes the owner run's log to the task's logger. It implements flight.Caller.
func (t *taskRun) Log(level slog.Level, msg string, err error, kv ...any) {
	if level < slog.LevelInfo && !debugOn(t.p.log) {
		return
	}
	l := t.logger() // not warn: the heartbeat logs too, and runTime is the handler's
	var ev *zerolog.Event
	switch {
	case level >= slog.LevelWarn:
		ev = l.Warn()
	case level >= slog.LevelInfo:
		ev = l.Info()
	default:
		ev = l.Debug()
	}
	if err != nil {
		ev = ev.Err(err)
	}
	ev.Fields(kv).Msg(msg)
}

// warn starts a warning of the task, with the last model call's duration when there was one. It
// is not for the heartbeat goroutine, since runTime is the handler's.
func (t *taskRun) warn() *zerolog.Event {
	l := t.logger()
	e := l.Warn()
	if t.runTime > 0 {
		e = e.Dur("runMs", t.runTime)
	}
	return e
}

// settled turns a refusal's settlement into the message's fate. The task is answered and
// acknowledged by the script, or parked on the current owner. Otherwise settled returns true to
// acquire again.
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

// observeSettled counts the owner's own event and the parked tasks its call answered. shared is
// owner, or archive for an outcome taken from the archive.
func (t *taskRun) observeSettled(shared topics.Shared, status topics.Status, st flight.Settlement) {
	m, stage := t.p.metrics, t.task.Stage
	t.traceOutcome(string(shared) + "_" + string(status))
	m.tasks.WithLabelValues(stage, string(shared)+"_"+string(status)).Inc()
	if n := st.Events - 1; n > 0 {
		m.tasks.WithLabelValues(stage, "follower_"+string(status)).Add(float64(n))
	}
	// The ledger: the owner's usage was avoided by the joined and parked tasks it answered.
	l, tenant, u := t.p.ledger, t.task.Tenant, t.usage
	if shared == topics.SharedArchive {
		u = nil // no call: the outcome came from the archive
	}
	l.answered(tenant, pathOf(shared), 1, status, nil)
	joined := min(t.nJoined, max(st.Events-1, 0))
	l.answered(tenant, pathJoined, joined, status, u)
	l.answered(tenant, pathFollower, st.Events-1-joined, status, u)
	t.nJoined = 0
	for _, w := range st.Waited {
		m.followerWait.WithLabelValues(stage).Observe(w.Seconds())
	}
	m.endToEnd.WithLabelValues(stage).Observe(time.Since(t.received).Seconds() + t.queued.Seconds())
}

// debugOn reports whether l logs at level debug.
func debugOn(l zerolog.Logger) bool {
	return l.GetLevel() <= zerolog.DebugLevel && zerolog.GlobalLevel() <= zerolog.DebugLevel
}
