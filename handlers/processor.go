package handlers

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"net"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/ThreeDotsLabs/watermill/message/router/middleware"
	"github.com/redis/go-redis/v9"
	"github.com/rs/zerolog"

	"github.com/flightdeck-ai/flightdeck/flight"
	"github.com/flightdeck-ai/flightdeck/handlers/model"
	"github.com/flightdeck-ai/flightdeck/lua"
	"github.com/flightdeck-ai/flightdeck/topics"
)

// Errors that end a handler run without acknowledging its message.
var (
	// ErrShuttingDown: the consumer is stopping; the entry stays pending and another consumer
	// claims it once this one's liveness is gone. Never retried, never dead-lettered.
	ErrShuttingDown = errors.New("handlers: consumer shutting down")
	// errEntryLost: another consumer claimed the entry this owner holds; this one is a zombie.
	errEntryLost = errors.New("handlers: stream entry claimed by another consumer")
	// errRedeliver: the run gave its flight up (its session lock was lost); the message is
	// not acknowledged and comes back to queue again. Never retried, never dead-lettered.
	errRedeliver = errors.New("handlers: task given up for redelivery")
)

// leavesPending reports errors after which the message stays pending on purpose.
func leavesPending(err error) bool {
	return errors.Is(err, ErrShuttingDown) || errors.Is(err, errRedeliver)
}

// lifecycle is shared by a consumer's processors: it tells them when to stop taking work
// and when to abandon running owners.
type lifecycle struct {
	// stop is cancelled when handlers must return (after the grace period).
	stop context.Context
	// owners is cancelled, with cause ErrShuttingDown, when running owners must give up.
	owners   context.Context
	draining atomic.Bool
	running  atomic.Int64 // owner runs in progress
}

// Processor turns the task messages of one stage into flight runs: it decodes and validates
// each message (dead-lettering what it cannot read), acquires the flight, and as owner runs
// the model with a heartbeat, or parks the task as a follower, or answers it from the flight's
// outcome. It publishes one terminal event per task. Safe for concurrent use.
type Processor struct {
	stage    StageConfig
	pol      flight.Policy
	coord    *flight.Coordinator
	writer   topics.Writer
	rdb      redis.UniversalClient
	ks       topics.Keyspace
	model    model.Model
	name     string
	limits   topics.Limits
	log      zerolog.Logger
	metrics  *Metrics
	life     *lifecycle
	sessions *flight.SessionLock
	spool    *flight.Spool
	local    *flight.Local[[]byte] // LOCAL_ONLY stages
	breaker  *flight.Breaker
}

// entry is the stream entry a handler run holds.
type entry struct {
	stream   string // the task stream (partition) it came from
	consumer string // stream consumer name "<process>/<n>"
	id       string // stream entry id
}

// HandlerFunc returns the watermill handler for one subscriber of stream, whose stream
// consumer name is consumer.
func (p *Processor) HandlerFunc(stream, consumer string, sl *slot) message.NoPublishHandlerFunc {
	return func(msg *message.Message) error {
		if sl != nil {
			sl.claiming.Store(false)
			sl.busy.Store(true)
			defer sl.busy.Store(false)
		}
		if p.life.draining.Load() {
			return ErrShuttingDown
		}
		ent := entry{stream: stream, consumer: consumer, id: msg.Metadata.Get(MetaEntryID)}
		return p.handle(msg, ent)
	}
}

func (p *Processor) handle(msg *message.Message, ent entry) error {
	ctx := p.life.stop
	corr := middleware.MessageCorrelationID(msg)
	if corr == "" {
		corr = msg.UUID
	}
	log := p.log.With().Str("subscriber", ent.consumer).Str("entry", ent.id).Str("correlationId", corr).Logger()
	if reason := msg.Metadata.Get(MetaBadEntry); reason != "" {
		var raw map[string]any
		if md := msg.Metadata.Get(MetaRawMetadata); md != "" {
			raw = map[string]any{"metadata": md}
		}
		return p.deadLetter(ctx, log, msg, reason, msg.Metadata.Get(MetaBadDetail), raw)
	}
	task, err := topics.DecodeTask(msg.Payload, p.limits)
	if err != nil {
		reason := "invalid_task"
		var ite *topics.InvalidTaskError
		if errors.As(err, &ite) {
			reason = string(ite.Reason)
		}
		return p.deadLetter(ctx, log, msg, reason, err.Error(), nil)
	}
	if task.Stage != p.stage.Name {
		return p.deadLetter(ctx, log, msg, "stage_mismatch",
			fmt.Sprintf("task stage %q arrived on the stream of stage %q", task.Stage, p.stage.Name), nil)
	}
	key, err := TaskKey(task)
	if err != nil {
		return p.deadLetter(ctx, log, msg, "bad_key", err.Error(), nil)
	}
	log = log.With().Str("stage", task.Stage).Str("taskId", task.TaskID).Str("requestKey", key).Logger()
	t := &taskRun{p: p, task: task, key: key, ent: ent, log: log, received: time.Now()}
	if enq, ok := task.EnqueuedTime(); ok {
		t.queued = time.Since(enq)
		p.metrics.queueWait.WithLabelValues(task.Stage).Observe(t.queued.Seconds())
	}
	if err := task.CheckDeadline(time.Now()); err != nil {
		return t.finish(ctx, topics.Event{Status: topics.StatusExpired, Shared: topics.SharedOwner,
			ErrorType: "deadline", ErrorCode: "deadline_passed", Error: err.Error()}, nil)
	}
	return t.run(ctx)
}

// TaskKey returns the flight key of a task: its requestKey namespaced by tenant and stage when
// the producer gave one, else the semantic key of its input, versions and params.
func TaskKey(t topics.Task) (string, error) {
	if t.RequestKey != "" {
		return flight.NamespacedKey(t.Stage, t.Tenant, t.RequestKey, 1)
	}
	return flight.SemanticKey(flight.KeyParams{Stage: t.Stage, Tenant: t.Tenant, Input: t.Input,
		ModelVersion: t.ModelVersion, PromptVersion: t.PromptVersion, Params: t.Params})
}

// maxDeadPayload bounds the payload a dead letter keeps: an oversized entry is refused
// anyway, and keeping all of it would let a flood of them fill Redis.
const maxDeadPayload = 64 << 10

func (p *Processor) deadLetter(ctx context.Context, log zerolog.Logger, msg *message.Message, reason, detail string, raw map[string]any) error {
	payload := msg.Payload
	if len(payload) > maxDeadPayload {
		sum := sha256.Sum256(payload)
		detail = fmt.Sprintf("%s (payload of %d bytes, sha256 %x, kept: the first %d bytes)", detail, len(payload), sum, maxDeadPayload)
		payload = payload[:maxDeadPayload]
	}
	err := p.writer.DeadLetter(ctx, topics.DeadLetter{Stage: p.stage.Name, UUID: msg.UUID, Payload: payload,
		Raw: raw, Reason: reason, Detail: detail, Consumer: p.name})
	if err != nil {
		return fmt.Errorf("handlers: dead-letter %s: %w", msg.UUID, err)
	}
	p.metrics.deadLetters.WithLabelValues(p.stage.Name, reason).Inc()
	log.Warn().Str("reason", reason).Str("detail", detail).Str("uuid", msg.UUID).Msg("task dead-lettered")
	return nil
}

// taskRun is one handler run of one task.
type taskRun struct {
	p        *Processor
	task     topics.Task
	key      string
	ent      entry
	log      zerolog.Logger
	received time.Time
	queued   time.Duration
	// lockLost is closed when the task's session lock was lost while it ran.
	lockLost chan struct{}
}

// touch resets the idle time of the task's entry; false when another consumer holds it now
// or somebody acknowledged it. An entry that vanished from the stream (a Redis restart
// without persistence) and errors count as held: the flight's fencing still protects the
// result.
func (t *taskRun) touch(ctx context.Context) bool {
	if t.ent.id == "" {
		return true
	}
	r, err := lua.StreamTouch.Run(ctx, t.p.rdb, []string{t.ent.stream},
		topics.ConsumerGroup, t.ent.consumer, t.ent.id).Int64()
	return err != nil || r == 1 || r == 2
}

// errSessionLockLost cancels a run whose session lock expired under it.
var errSessionLockLost = errors.New("handlers: session lock lost")

// run acquires the flight until the task is answered or parked. Tasks of session-locked
// stages first take their session's lock, so that one heavy task per session runs at a time
// across the fleet.
func (t *taskRun) run(ctx context.Context) error {
	if t.p.stage.SessionLock != nil && *t.p.stage.SessionLock && t.task.SessionID != "" {
		release, err := t.lockSession(ctx)
		if errors.Is(err, errEntryLost) {
			return nil // another consumer holds the entry now and runs it
		}
		if err != nil {
			return err
		}
		defer release()
	}
	return t.acquireLoop(ctx)
}

// lockSession waits for the session lock (touching the task's entry meanwhile, so it is not
// claimed away), keeps it renewed, and returns the function that releases it.
func (t *taskRun) lockSession(ctx context.Context) (func(), error) {
	p := t.p
	holder := p.name + "/" + t.task.TaskID
	var token int64
	for {
		if ctx.Err() != nil {
			return nil, ErrShuttingDown
		}
		if !t.touch(ctx) {
			return nil, errEntryLost
		}
		tok, ok, err := p.sessions.TryAcquire(ctx, t.task.SessionID, holder, p.stage.Lease)
		if err != nil {
			return nil, fmt.Errorf("handlers: task %s: session lock: %w", t.task.TaskID, err)
		}
		if ok {
			token = tok
			break
		}
		if !sleep(ctx, min(p.stage.HeartbeatInterval, 250*time.Millisecond)) {
			return nil, ErrShuttingDown
		}
	}
	t.log.Debug().Int64("sessionToken", token).Msg("session lock held")
	t.lockLost = make(chan struct{})
	rctx, stop := context.WithCancel(context.WithoutCancel(ctx))
	done := make(chan struct{})
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
			if err := p.sessions.Renew(rctx, t.task.SessionID, token, p.stage.Lease); errors.Is(err, flight.ErrLockLost) {
				t.log.Warn().Msg("session lock lost")
				close(t.lockLost)
				return
			}
		}
	}()
	return func() {
		stop()
		<-done
		rel, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		if err := p.sessions.Release(rel, t.task.SessionID, token); err != nil && !errors.Is(err, flight.ErrLockLost) {
			t.log.Warn().Err(err).Msg("session lock release failed; it expires with its lease")
		}
	}, nil
}

// flushSpooled writes back a spooled outcome of the task's key before the flight is acquired,
// so that the redelivered owner's task is answered from it instead of running the model
// again. It answers false while the outcome is still spooled (Redis away).
func (t *taskRun) flushSpooled(ctx context.Context) bool {
	p := t.p
	if !p.spool.Has(t.key) {
		return true
	}
	fctx, cancel := context.WithTimeout(ctx, p.stage.Lease)
	defer cancel()
	if _, err := p.spool.Flush(fctx, p.coord); err != nil {
		t.log.Debug().Err(err).Msg("spool flush failed")
	}
	return !p.spool.Has(t.key)
}

func (t *taskRun) acquireLoop(ctx context.Context) error {
	p := t.p
	switch p.stage.Mode {
	case string(flight.ModeBypass), string(flight.ModeLocalOnly):
		return t.runUncoordinated(ctx)
	}
	if !t.flushSpooled(ctx) {
		sleep(ctx, p.stage.HeartbeatInterval)
		return errRedeliver
	}
	for {
		if err := ctx.Err(); err != nil {
			return ErrShuttingDown
		}
		// A prefetched entry may have waited long enough to be claimed by another consumer;
		// then that consumer runs it and this delivery is dropped.
		if !t.touch(ctx) {
			t.log.Info().Msg("entry claimed by another consumer meanwhile; dropping this delivery")
			return nil
		}
		d, err := flight.Guard(p.breaker, func() (flight.Decision, error) {
			return p.coord.Acquire(ctx, flight.AcquireParams{Key: t.key, OwnerID: p.name, TaskID: t.task.TaskID,
				Stage: t.task.Stage, Tenant: t.task.Tenant, SessionID: t.task.SessionID, Policy: p.pol})
		})
		if err != nil {
			return fmt.Errorf("handlers: task %s: %w", t.task.TaskID, err)
		}
		log := t.log.With().Int64("token", d.Token).Logger()
		switch d.Action {
		case flight.ActionOwner:
			log.Debug().Str("reason", string(d.Reason)).Int("attempt", d.Attempts).Msg("owner")
			done, err := t.own(ctx, d, log)
			if done || err != nil {
				return err
			}
		case flight.ActionFollowerWait:
			if d.Reason == flight.ReasonParked {
				p.metrics.tasks.WithLabelValues(t.task.Stage, "parked").Inc()
				log.Debug().Str("owner", d.OwnerID).Msg("parked on the running flight")
				return nil
			}
			// Not parked: this is the owner's own task delivered again (its consumer looked
			// dead, or the producer sent the task id twice), or the flight's park set is full.
			// Wait for the flight to end or its lease to lapse, then acquire again.
			if !sleep(ctx, p.stage.HeartbeatInterval) {
				return ErrShuttingDown
			}
		case flight.ActionResultHit:
			return t.finish(ctx, topics.Event{Status: topics.StatusSucceeded, Shared: topics.SharedHit,
				OwnerToken: d.Token, Attempts: d.Attempts}, &d)
		case flight.ActionFailedFinal:
			return t.finish(ctx, topics.Event{Status: topics.StatusFailed, Shared: topics.SharedFollower,
				OwnerToken: d.Token, Attempts: d.Attempts, ErrorType: d.ErrorType, ErrorCode: d.ErrorCode, Error: d.Error}, &d)
		case flight.ActionCancelled:
			return t.finish(ctx, topics.Event{Status: topics.StatusCancelled, Shared: topics.SharedFollower,
				OwnerToken: d.Token, Attempts: d.Attempts, ErrorType: d.ErrorType, ErrorCode: d.ErrorCode, Error: d.Error}, &d)
		case flight.ActionExpired:
			return t.finish(ctx, topics.Event{Status: topics.StatusExpired, Shared: topics.SharedFollower,
				OwnerToken: d.Token, Attempts: d.Attempts, ErrorType: d.ErrorType, ErrorCode: d.ErrorCode, Error: d.Error}, &d)
		default:
			return fmt.Errorf("handlers: task %s: %w: action %q", t.task.TaskID, flight.ErrProtocol, d.Action)
		}
	}
}

// own runs the flight as its owner. done reports that the task is settled (answered, parked
// on another owner, or left to another consumer); !done asks run to acquire again.
func (t *taskRun) own(ctx context.Context, d flight.Decision, log zerolog.Logger) (done bool, err error) {
	p := t.p
	p.life.running.Add(1)
	defer p.life.running.Add(-1)
	switch err := p.coord.Start(ctx, t.key, d.Token, p.pol); {
	case errors.Is(err, flight.ErrStaleToken):
		return true, nil // another owner took over at once; it answers this task too
	case errors.Is(err, flight.ErrCancelled):
		return true, t.finishOwn(ctx, d, topics.StatusCancelled, "cancelled", "cancelled", "flight cancelled")
	case errors.Is(err, flight.ErrExpired):
		return false, nil
	case err != nil:
		return false, fmt.Errorf("handlers: task %s: %w", t.task.TaskID, err)
	}

	runCtx, cancel := context.WithCancelCause(p.life.owners)
	defer cancel(nil)
	var progress atomic.Int64
	hbDone := make(chan struct{})
	go func() {
		defer close(hbDone)
		t.heartbeat(runCtx, cancel, d.Token, &progress, log)
	}()
	start := time.Now()
	log.Info().Str("reason", string(d.Reason)).Int("attempt", d.Attempts).Msg("model call")
	p.metrics.modelCalls.WithLabelValues(t.task.Stage).Inc()
	p.metrics.running.WithLabelValues(t.task.Stage).Inc()
	out, callErr := p.model.Call(runCtx, model.Request{Stage: t.task.Stage, TaskID: t.task.TaskID,
		Tenant: t.task.Tenant, SessionID: t.task.SessionID, Input: t.task.Input, ModelVersion: t.task.ModelVersion,
		PromptVersion: t.task.PromptVersion, Attempt: d.Attempts, Consumer: p.name}, func() { progress.Add(1) })
	p.metrics.running.WithLabelValues(t.task.Stage).Dec()
	runTime := time.Since(start)
	cause := context.Cause(runCtx)
	cancel(nil)
	<-hbDone
	p.metrics.runTime.WithLabelValues(t.task.Stage).Observe(runTime.Seconds())
	log = log.With().Dur("runMs", runTime).Logger()

	// A call that returned a result goes on to complete whatever the heartbeat saw meanwhile:
	// complete itself refuses a fenced-off owner. A call that failed after its run was
	// cancelled failed because of that cancellation.
	if callErr != nil && cause != nil {
		switch {
		case errors.Is(cause, flight.ErrStaleToken), errors.Is(cause, errEntryLost):
			log.Warn().Err(cause).Msg("fenced off: another owner answers this task")
			return true, nil
		case errors.Is(cause, flight.ErrCancelled):
			return true, t.finishOwn(ctx, d, topics.StatusCancelled, "cancelled", "cancelled", "flight cancelled")
		case errors.Is(cause, flight.ErrExpired):
			log.Warn().Msg("flight expired during the run; acquiring again")
			return false, nil
		case errors.Is(cause, ErrShuttingDown):
			return t.abandon(d, log, "consumer_stopped", ErrShuttingDown)
		case errors.Is(cause, errSessionLockLost):
			// Another task of the session may run now: give the flight up as retryable and
			// leave the entry pending; it comes back and queues for the lock again.
			return t.abandon(d, log, "session_lock_lost", errRedeliver)
		}
	}

	if callErr != nil {
		me := model.Classify(callErr)
		fctx, fcancel := context.WithTimeout(context.WithoutCancel(ctx), p.stage.Lease)
		defer fcancel()
		res, err := p.coord.Fail(fctx, t.key, d.Token, flight.Failure{Retryable: me.Retryable, Type: me.Type,
			Code: me.Code, Message: me.Error()}, p.pol)
		switch {
		case errors.Is(err, flight.ErrStaleToken):
			return true, nil
		case errors.Is(err, flight.ErrCancelled):
			return true, t.finishOwn(ctx, d, topics.StatusCancelled, "cancelled", "cancelled", "flight cancelled")
		case errors.Is(err, flight.ErrExpired):
			return false, nil
		case err != nil:
			return false, fmt.Errorf("handlers: task %s: record failure: %w", t.task.TaskID, err)
		}
		log.Warn().Err(me).Bool("retryable", me.Retryable).Bool("final", res.Final).Msg("model call failed")
		if !res.Final {
			back := time.Duration(100<<min(d.Attempts, 6)) * time.Millisecond
			if me.RetryAfter > back {
				back = min(me.RetryAfter, p.stage.Lease)
			}
			if !sleep(ctx, back) {
				return true, ErrShuttingDown
			}
			return false, nil
		}
		ev := topics.Event{Status: topics.StatusFailed, OwnerToken: d.Token, Attempts: d.Attempts,
			ErrorType: me.Type, ErrorCode: me.Code, Error: me.Error(), RunMs: runTime.Milliseconds()}
		return true, t.publish(ctx, ev, res.Parked)
	}

	parked, err := t.complete(ctx, d.Token, out)
	switch {
	case errors.Is(err, flight.ErrStaleToken):
		log.Warn().Msg("result refused: another owner holds the flight")
		return true, nil
	case errors.Is(err, flight.ErrCancelled):
		return true, t.finishOwn(ctx, d, topics.StatusCancelled, "cancelled", "cancelled", "flight cancelled")
	case errors.Is(err, flight.ErrExpired):
		return false, nil
	case err != nil:
		// The model answered but the result cannot be stored: an uncertain outcome. Spool it
		// (it is written back when Redis answers) and leave the message pending; when it
		// comes back the spooled result answers it. The model is not run again for it.
		o := flight.Outcome{Stage: t.task.Stage, Tenant: t.task.Tenant, Key: t.key, Token: d.Token, Result: out,
			ResultTTL: p.pol.ResultTTL, At: time.Now()}
		if serr := p.spool.Add(o); serr != nil {
			return false, fmt.Errorf("handlers: task %s: store result: %w (spool: %w)", t.task.TaskID, err, serr)
		}
		p.metrics.spooled.Inc()
		log.Warn().Err(err).Msg("result write failed: uncertain outcome spooled; the task waits for the write-back")
		return true, errRedeliver
	}
	log.Info().Int("followers", len(parked)).Msg("owner completed")
	ev := topics.Event{Status: topics.StatusSucceeded, OwnerToken: d.Token, Attempts: d.Attempts,
		RunMs: runTime.Milliseconds()}
	ev.SetResult(out, p.stage.MaxInlineResult, p.ks.Result(t.key))
	return true, t.publish(ctx, ev, parked)
}

// complete stores the result, retrying a Redis error for up to a lease: the model already
// ran, and giving up here would make the next owner run it again.
func (t *taskRun) complete(ctx context.Context, token int64, out []byte) ([]string, error) {
	p := t.p
	deadline := time.Now().Add(p.stage.Lease)
	ctx = context.WithoutCancel(ctx)
	for wait := 50 * time.Millisecond; ; wait = min(2*wait, time.Second) {
		cctx, cancel := context.WithTimeout(ctx, p.stage.Lease)
		parked, err := p.coord.Complete(cctx, t.key, token, out, p.pol)
		cancel()
		if errors.Is(err, flight.ErrStaleToken) {
			return t.restore(ctx, token, out)
		}
		if err == nil || isFlightAnswer(err) || time.Now().Add(wait).After(deadline) {
			return parked, err
		}
		t.log.Warn().Err(err).Msg("storing the result failed; retrying")
		time.Sleep(wait)
	}
}

// restore handles a complete refused for a stale token. When the flight is simply gone (its
// meta expired, or Redis restarted without persistence) nobody else holds it: the result is
// written back with Restore, which refuses when another owner holds the flight or a result
// is already stored. ErrStaleToken then stands.
func (t *taskRun) restore(ctx context.Context, token int64, out []byte) ([]string, error) {
	p := t.p
	rctx, cancel := context.WithTimeout(ctx, p.stage.Lease)
	defer cancel()
	parked, err := p.coord.Restore(rctx, t.key, token, out, flight.RestoreParams{Stage: t.task.Stage,
		Tenant: t.task.Tenant, Policy: p.pol})
	if err != nil {
		return nil, flight.ErrStaleToken
	}
	t.log.Warn().Msg("the flight was gone when the result arrived; result restored")
	return parked, nil
}

// runUncoordinated runs the model without the flight state machine: for LOCAL_ONLY stages
// once per key per process (concurrent tasks of one key share the run), for BYPASS stages
// once per task. The task's event says shared "local".
func (t *taskRun) runUncoordinated(ctx context.Context) error {
	p := t.p
	call := func(ctx context.Context) ([]byte, error) {
		p.metrics.modelCalls.WithLabelValues(t.task.Stage).Inc()
		rctx, cancel := context.WithTimeout(ctx, p.stage.RunningTTL)
		defer cancel()
		return p.model.Call(rctx, model.Request{Stage: t.task.Stage, TaskID: t.task.TaskID, Tenant: t.task.Tenant,
			SessionID: t.task.SessionID, Input: t.task.Input, ModelVersion: t.task.ModelVersion,
			PromptVersion: t.task.PromptVersion, Attempt: 1, Consumer: p.name}, nil)
	}
	start := time.Now()
	var out []byte
	var err error
	if p.stage.Mode == string(flight.ModeLocalOnly) {
		var lr flight.LocalResult[[]byte]
		lr, err = p.local.Do(ctx, t.key, call)
		out = lr.Value
	} else {
		out, err = call(ctx)
	}
	ev := topics.Event{Status: topics.StatusSucceeded, Shared: topics.SharedLocal, RunMs: time.Since(start).Milliseconds()}
	if err != nil {
		if ctx.Err() != nil {
			return ErrShuttingDown
		}
		me := model.Classify(err)
		ev.Status, ev.ErrorType, ev.ErrorCode, ev.Error = topics.StatusFailed, me.Type, me.Code, me.Error()
	} else {
		ev.SetResult(out, p.stage.MaxInlineResult, "")
	}
	return t.publish(ctx, ev, nil)
}

func isFlightAnswer(err error) bool {
	var se *flight.StateError
	return errors.Is(err, flight.ErrStaleToken) || errors.Is(err, flight.ErrCancelled) ||
		errors.Is(err, flight.ErrExpired) || errors.As(err, &se)
}

// abandon gives a running flight up: it is failed as retryable (code says why) so that the
// next acquire takes over at once, and the message is left pending (leave is returned).
func (t *taskRun) abandon(d flight.Decision, log zerolog.Logger, code string, leave error) (bool, error) {
	p := t.p
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	msg := "the owner gave the flight up: " + code
	res, err := p.coord.Fail(ctx, t.key, d.Token, flight.Failure{Retryable: true, Type: "abandoned",
		Code: code, Message: msg}, p.pol)
	if err == nil && res.Final {
		ev := topics.Event{Status: topics.StatusFailed, OwnerToken: d.Token, Attempts: d.Attempts,
			ErrorType: "abandoned", ErrorCode: code, Error: msg}
		return true, t.publish(ctx, ev, res.Parked)
	}
	log.Warn().Err(err).Str("code", code).Msg("owner gave the flight up; the entry stays pending")
	return true, leave
}

// heartbeat renews the lease every HeartbeatInterval and keeps the stream entry from being
// claimed; it cancels the run when the flight is cancelled, expired or fenced off, or when
// another consumer claimed the entry.
func (t *taskRun) heartbeat(ctx context.Context, cancel context.CancelCauseFunc, token int64, progress *atomic.Int64, log zerolog.Logger) {
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
		hctx, hcancel := context.WithTimeout(ctx, p.stage.HeartbeatInterval)
		prog := ""
		if n := progress.Load(); n > 0 {
			prog = strconv.FormatInt(n, 10)
		}
		err := p.coord.Heartbeat(hctx, t.key, token, prog, p.pol)
		if err == nil && !t.touch(hctx) {
			err = errEntryLost
		}
		hcancel()
		switch {
		case err == nil:
		case isFlightAnswer(err), errors.Is(err, errEntryLost):
			cancel(err)
			return
		case ctx.Err() == nil:
			log.Warn().Err(err).Msg("heartbeat failed")
		}
	}
}

// finishOwn answers the task itself (the canceller or the last acquirer answered the others).
func (t *taskRun) finishOwn(ctx context.Context, d flight.Decision, st topics.Status, typ, code, msg string) error {
	return t.publish(ctx, topics.Event{Status: st, OwnerToken: d.Token, Attempts: d.Attempts,
		ErrorType: typ, ErrorCode: code, Error: msg}, nil)
}

// finish answers the task from a flight's outcome, with the parked tasks it hands back.
func (t *taskRun) finish(ctx context.Context, ev topics.Event, d *flight.Decision) error {
	var parked []string
	if d != nil {
		if len(d.Result) > 0 {
			ev.SetResult(d.Result, t.p.stage.MaxInlineResult, t.p.ks.Result(t.key))
		}
		parked = d.Parked
	}
	return t.publish(ctx, ev, parked)
}

// publish writes the task's own event (ev.Shared, default owner) and one event per parked
// task (shared follower), then removes the parked ids from the flight.
func (t *taskRun) publish(ctx context.Context, ev topics.Event, parked []string) error {
	p := t.p
	if ev.Shared == "" {
		ev.Shared = topics.SharedOwner
	}
	ev.Stage, ev.Tenant, ev.RequestKey, ev.Consumer = t.task.Stage, t.task.Tenant, t.key, p.name
	ev.FinishedAt = time.Now()
	own := ev
	own.TaskID = t.task.TaskID
	own.QueuedMs = t.queued.Milliseconds()
	events := make([]topics.Event, 0, 1+len(parked))
	events = append(events, own)
	for _, id := range parked {
		if id == t.task.TaskID {
			continue
		}
		f := ev
		f.TaskID = id
		f.Shared = topics.SharedFollower
		events = append(events, f)
	}
	ctx = context.WithoutCancel(ctx)
	if err := p.writer.PublishEvents(ctx, events...); err != nil {
		return fmt.Errorf("handlers: task %s: %w", t.task.TaskID, err)
	}
	since, err := p.coord.Release(ctx, t.key, parked...)
	if err != nil {
		t.log.Warn().Err(err).Msg("releasing parked tasks failed; a later caller answers them again")
	}
	for _, at := range since {
		p.metrics.followerWait.WithLabelValues(t.task.Stage).Observe(time.Since(at).Seconds())
	}
	for _, e := range events {
		p.metrics.tasks.WithLabelValues(e.Stage, string(e.Shared)+"_"+string(e.Status)).Inc()
	}
	p.metrics.endToEnd.WithLabelValues(t.task.Stage).Observe(time.Since(t.received).Seconds() + t.queued.Seconds())
	return nil
}

func sleep(ctx context.Context, d time.Duration) bool {
	tm := time.NewTimer(d)
	defer tm.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-tm.C:
		return true
	}
}

// redisUnavailable reports errors that mean Redis could not be used for a while (connection
// refused or reset, timeouts, a closed or exhausted pool, a restarting or failing-over
// server) as opposed to errors of the task itself. A message whose handling failed that way
// is never dead-lettered: it stays pending and comes back when Redis answers again.
func redisUnavailable(err error) bool {
	if err == nil {
		return false
	}
	var ne net.Error
	if errors.Is(err, flight.ErrCoordinationUnavailable) || errors.As(err, &ne) ||
		errors.Is(err, redis.ErrClosed) || errors.Is(err, redis.ErrPoolTimeout) ||
		errors.Is(err, context.DeadlineExceeded) || errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) ||
		errors.Is(err, syscall.ECONNREFUSED) || errors.Is(err, syscall.ECONNRESET) {
		return true
	}
	msg := err.Error()
	for _, s := range []string{"LOADING", "BUSY", "MASTERDOWN", "CLUSTERDOWN", "TRYAGAIN", "READONLY",
		"connection refused", "connection reset", "broken pipe", "i/o timeout"} {
		if strings.Contains(msg, s) {
			return true
		}
	}
	return false
}
