package executor

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/google/uuid"

	"github.com/flightdeck-ai/flightdeck/flight"
	"github.com/flightdeck-ai/flightdeck/topics"
)

// distributed is the L1 leader's path through the state machine. Final outcomes answer the
// stream tasks parked on the flight in the acquire script itself; an owner's complete or fail
// answers them with its own event (task id "exec-<uuid>", which wakes in-process followers on
// every node).
func (e *Executor) distributed(ctx context.Context, st *stageRuntime, key string, fn Fn) (Result, error) {
	pol := st.opt.Policy
	// Active on the key until the loop ends: an outcome of the key released meanwhile stays
	// held for this caller's own check (Spool.Enter).
	defer e.spool.Enter(key)()
	for {
		if err := ctx.Err(); err != nil {
			return Result{}, err
		}
		e.metrics.distributedRequest.WithLabelValues(st.name).Inc()
		d, err := Guard(e.cb, func() (flight.Decision, error) {
			cctx, cancel := context.WithTimeout(ctx, st.opt.Budget.Coordination)
			defer cancel()
			return e.coord.Acquire(cctx, flight.AcquireParams{Key: key, OwnerID: e.cfg.NodeID, Stage: st.name,
				Tenant: tenantOf(key), Policy: pol, Start: true, WantResult: true})
		})
		if err != nil {
			if ctx.Err() != nil {
				return Result{}, ctx.Err()
			}
			if d.Action != "" {
				// The decision was taken but answering parked tasks failed (Redis Cluster,
				// mode return): they stay parked and are answered by the next caller.
				e.log.Warn().Err(err).Str("requestKey", key).Msg("answering parked tasks failed")
			} else {
				return e.fallback(ctx, st, key, fn, err)
			}
		}
		e.coordinated(st)
		switch d.Action {
		case flight.ActionOwner:
			res, again, err := e.own(ctx, st, d, fn)
			if !again {
				return res, err
			}
		case flight.ActionFollowerWait:
			if err := e.follow(ctx, st, key); err != nil {
				return Result{}, err
			}
		case flight.ActionResultHit:
			return Result{Value: d.Result, Shared: topics.SharedHit, Token: d.Token}, nil
		case flight.ActionFailedFinal:
			return Result{}, &flight.OutcomeError{Status: flight.StatusFailed, Type: d.ErrorType, Code: d.ErrorCode, Message: d.Error}
		case flight.ActionCancelled:
			e.recordFinal(st, key, d)
			return Result{}, &flight.OutcomeError{Status: flight.StatusCancelled, Type: d.ErrorType, Code: d.ErrorCode, Message: d.Error}
		case flight.ActionExpired:
			e.recordFinal(st, key, d)
			return Result{}, &flight.OutcomeError{Status: flight.StatusExpired, Type: d.ErrorType, Code: d.ErrorCode, Message: d.Error}
		default:
			return e.fallback(ctx, st, key, fn, fmt.Errorf("%w: action %q", flight.ErrProtocol, d.Action))
		}
	}
}

// follow waits for the flight of key to end, for at most WaitTimeout; the caller then
// acquires again. It registers with the dispatcher first, then looks at the flight, so an
// event published in between is not missed.
func (e *Executor) follow(ctx context.Context, st *stageRuntime, key string) error {
	wctx, cancel := context.WithTimeout(ctx, st.opt.WaitTimeout)
	defer cancel()
	reg, err := Guard(e.cb, func() (regResult, error) {
		cctx, ccancel := context.WithTimeout(ctx, st.opt.Budget.Coordination)
		defer ccancel()
		ch, un, err := e.disp.register(cctx, e.coord.Keyspace().Results(st.name), key)
		return regResult{ch, un}, err
	})
	if errors.Is(err, flight.ErrTooManyWaiters) {
		return err
	}
	if err != nil {
		// Cannot listen: wait out the timeout, then acquire again (never run at once).
		<-wctx.Done()
		return ctx.Err()
	}
	defer reg.unregister()
	status, err := Guard(e.cb, func() (string, error) {
		return e.rdb.HGet(wctx, e.coord.Keyspace().Meta(key), "status").Result()
	})
	if err == nil && status != string(flight.StatusPending) && status != string(flight.StatusRunning) {
		return nil
	}
	select {
	case <-reg.ch:
	case <-wctx.Done():
		if ctx.Err() != nil {
			return ctx.Err()
		}
		e.metrics.waitTimeout.WithLabelValues(st.name).Inc()
	}
	return nil
}

type regResult struct {
	ch         <-chan struct{}
	unregister func()
}

// own runs fn as the flight's owner (acquire already started it). again asks the caller to
// acquire again (the flight expired, was taken over, or a retryable failure left attempts).
func (e *Executor) own(ctx context.Context, st *stageRuntime, d flight.Decision, fn Fn) (res Result, again bool, err error) {
	o := *d.Owner
	o.Task = flight.Task{ID: "exec-" + uuid.NewString()}
	held, heldToken, isHeld := e.spool.Held(o.Key)
	if isHeld && e.runClosed(ctx, st, o.Key, heldToken, "held outcome") {
		isHeld = false
	}
	if e.cfg.Archive != nil {
		if !isHeld {
			if res, done, again, err := e.rehydrate(ctx, st, o); done {
				return res, again, err
			}
		}
		e.claim(ctx, st, d)
	}
	if isHeld {
		// This process holds the key's outcome unwritten: fn is not run again for it; this
		// owner's flight takes that result (DESIGN.md section 6, "Held outcomes").
		e.log.Info().Str("requestKey", o.Key).Int64("token", o.Token).Int64("heldToken", heldToken).
			Msg("answered from the outcome this process holds; no model call")
		return e.settle(ctx, st, o, held, 0, e.spool.Hold(o.Key, o.Token, held))
	}
	runCtx, cancelRun := context.WithCancelCause(ctx)
	defer cancelRun(nil)
	runCtx, cancelBudget := context.WithTimeout(runCtx, st.opt.Budget.Execution)
	defer cancelBudget()
	var progress atomic.Int64
	hbDone := make(chan struct{})
	go func() {
		defer close(hbDone)
		e.heartbeat(runCtx, cancelRun, st, o, &progress)
	}()
	start := time.Now()
	v, fnErr := fn(runCtx, func() { progress.Add(1) })
	var release func(settled bool)
	if fnErr == nil {
		// Held from the moment it exists until Redis took or refused it (settle releases it;
		// this only when something panics before).
		release = e.spool.Hold(o.Key, o.Token, v)
		defer release(false)
	}
	run := time.Since(start)
	cause := context.Cause(runCtx)
	cancelRun(nil)
	<-hbDone

	if fnErr != nil {
		rctx, rcancel := context.WithTimeout(context.WithoutCancel(ctx), st.opt.Budget.Result)
		defer rcancel()
		switch flight.Judge(cause) {
		case flight.VerdictStale, flight.VerdictExpired:
			return Result{}, true, nil // another owner runs it now (or will): follow or take over
		case flight.VerdictCancelled:
			return Result{}, false, errCancelled()
		}
		if ctx.Err() != nil {
			// The caller gave up: hand the flight over without spending the attempt.
			hctx, hcancel := context.WithTimeout(context.WithoutCancel(ctx), st.opt.Budget.Coordination)
			_ = e.coord.Handover(hctx, o)
			hcancel()
			return Result{}, false, ctx.Err()
		}
		f := flight.FailureOf(fnErr)
		f.RetryIn = 0 // the policy retries at once; a provider hint does not delay in-process callers
		out, err := Guard(e.cb, func() (flight.Settlement, error) { return e.coord.Fail(rctx, o, f, run) })
		switch flight.Judge(err) {
		case flight.VerdictTaken:
			if !out.Final {
				return Result{}, true, nil
			}
			e.record(st, o, flight.StatusFailed, nil, f)
			return Result{}, false, fnErr
		case flight.VerdictCancelled:
			return Result{}, false, errCancelled()
		case flight.VerdictStale, flight.VerdictExpired:
			return Result{}, true, nil
		default:
			// The failure could not be recorded; the model is still not re-run here.
			return Result{}, false, fnErr
		}
	}

	return e.settle(ctx, st, o, v, run, release)
}

// runClosed asks, for an owner of key about to complete its flight with what (the outcome of
// token's run: held by this process, or archived), whether that run was closed for good
// (Coordinator.RunClosed): the function then runs instead. An unanswered question takes the
// outcome (the function is not run twice).
func (e *Executor) runClosed(ctx context.Context, st *stageRuntime, key string, token int64, what string) bool {
	cctx, cancel := context.WithTimeout(ctx, st.opt.Budget.Coordination)
	defer cancel()
	closed, err := e.coord.RunClosed(cctx, key, token)
	if err != nil {
		e.log.Warn().Err(err).Str("requestKey", key).Int64("outcomeToken", token).
			Msg("cannot tell whether the " + what + "'s run was closed; taking it")
		return false
	}
	if closed {
		e.log.Info().Str("requestKey", key).Int64("outcomeToken", token).
			Msg("the " + what + "'s run was cancelled or expired for good; not taking it")
	}
	return closed
}

// settle completes the flight o owns with v, which the caller holds (Spool.Hold) until settle
// returns and calls release: Redis took it or refused it, or it was spooled for the
// write-back. The results are own's.
func (e *Executor) settle(ctx context.Context, st *stageRuntime, o flight.Ownership, v []byte, run time.Duration, release func(settled bool)) (res Result, again bool, err error) {
	settled := false
	defer func() { release(settled) }()
	rctx, rcancel := context.WithTimeout(context.WithoutCancel(ctx), st.opt.Budget.Result)
	defer rcancel()
	res = Result{Value: v, Shared: topics.SharedOwner, Token: o.Token}
	_, err = Guard(e.cb, func() (flight.Settlement, error) { return e.coord.Complete(rctx, o, v, run) })
	switch verdict := flight.Judge(err); {
	case verdict == flight.VerdictTaken:
		settled = true
		e.record(st, o, flight.StatusSucceeded, v, flight.Failure{})
		return res, false, nil
	case verdict == flight.VerdictCancelled:
		settled = true
		return Result{}, false, &flight.OutcomeError{Status: flight.StatusCancelled, Type: "cancelled", Code: "cancelled",
			Message: "flight cancelled before the result was stored"}
	case verdict == flight.VerdictExpired:
		settled = true
		return Result{}, false, &flight.OutcomeError{Status: flight.StatusExpired, Type: "expired", Code: "expired",
			Message: "flight expired for good before the result was stored"}
	case verdict.Refused():
		// Another owner holds the flight: its outcome stands for everybody; follow it.
		e.log.Info().Err(err).Str("requestKey", o.Key).Msg("result refused by the flight; following its owner")
		return Result{}, true, nil
	case verdict == flight.VerdictUnavailable:
		// The model answered, the write failed (or its reply was lost): hand the value over
		// and spool it; the write-back answers everybody, and a retry of a stored result is
		// accepted as the same outcome.
		e.metrics.resultWriteFailure.WithLabelValues(st.name).Inc()
		res.Uncertain = true
		out := o.Outcome(v)
		out.Stage = st.name
		if serr := e.spool.Add(out); serr != nil {
			e.log.Error().Err(serr).Str("requestKey", o.Key).Msg("uncertain outcome could not be spooled")
			return res, false, fmt.Errorf("%w: %w (spool: %w)", flight.ErrUncertainOutcome, err, serr)
		}
		settled = true // the spool holds it now
		// The archive takes it now: the write-back to Redis may come much later (a larger
		// token still wins there and in the archive).
		e.record(st, o, flight.StatusSucceeded, v, flight.Failure{})
		e.metrics.spooled.Set(float64(e.spool.Len()))
		e.log.Warn().Err(err).Str("requestKey", o.Key).Int64("token", o.Token).
			Msg("result write failed: uncertain outcome spooled for write-back")
		return res, false, nil
	default:
		return res, false, err
	}
}

// rehydrate answers the flight o owns from the archive when it holds the key's final outcome
// (a result within its retention; a failure or cancellation within the failureTTL): done
// reports that it did, with own's results. A lookup that fails or finds nothing runs the
// function.
func (e *Executor) rehydrate(ctx context.Context, st *stageRuntime, o flight.Ownership) (res Result, done, again bool, err error) {
	lctx, cancel := context.WithTimeout(ctx, st.opt.Budget.Coordination)
	a, ok, lerr := e.cfg.Archive.Lookup(lctx, o.Key)
	cancel()
	if lerr != nil || !ok || !a.Answers(st.opt.Policy.FailureTTL) {
		return Result{}, false, false, nil
	}
	// An outcome archived before Redis judged it (a spooled result) may be of a run that was
	// closed meanwhile: it may never be stored.
	if a.Status != flight.StatusCancelled && e.runClosed(ctx, st, o.Key, a.Token, "archived outcome") {
		return Result{}, false, false, nil
	}
	rctx, rcancel := context.WithTimeout(context.WithoutCancel(ctx), st.opt.Budget.Result)
	defer rcancel()
	_, err = Guard(e.cb, func() (flight.Settlement, error) { return e.coord.Rehydrate(rctx, o, a) })
	switch v := flight.Judge(err); {
	case v == flight.VerdictTaken && a.Status == flight.StatusSucceeded:
		return Result{Value: a.Result, Shared: topics.SharedArchive, Token: o.Token}, true, false, nil
	case v == flight.VerdictTaken:
		return Result{}, true, false, &flight.OutcomeError{Status: a.Status, Type: a.ErrorType, Code: a.ErrorCode, Message: a.Error}
	case v == flight.VerdictCancelled:
		// The archived cancellation, or a cancel of this flight meanwhile: cancelled either way.
		return Result{}, true, false, errCancelled()
	case v.Refused() || v == flight.VerdictExpired:
		return Result{}, true, true, nil
	default:
		// Redis could not take the archived outcome: run nothing, let the caller retry.
		return Result{}, true, false, err
	}
}

// claim records in the archive, when it is a Fencer, that d's owner took the flight over
// from an owner that may still be running (NeedsClaim), before the function runs: after a
// Redis data loss that owner's write-back is refused by it. A claim that fails is logged and
// the run goes on (the archive's outage must not stop the flight).
func (e *Executor) claim(ctx context.Context, st *stageRuntime, d flight.Decision) {
	f, ok := e.cfg.Archive.(flight.Fencer)
	if !ok {
		return
	}
	if err := flight.ClaimTakeover(ctx, f, d, st.opt.Budget.Coordination); err != nil {
		e.log.Warn().Err(err).Str("key", d.Owner.Key).Str("reason", string(d.Reason)).
			Msg("archive claim failed: after a Redis data loss the previous owner could write its result back")
	}
}

// record archives an outcome of the flight o owned.
func (e *Executor) record(st *stageRuntime, o flight.Ownership, status flight.Status, result []byte, f flight.Failure) {
	if e.cfg.Archive == nil {
		return
	}
	o.Stage = st.name
	e.cfg.Archive.Record(o.Archived(status, result, f, st.opt.ArchiveRetention))
}

// recordFinal archives the outcome an acquire answered the caller with when it ended the
// flight for good (flight.Decision.Final), as a consumer does.
func (e *Executor) recordFinal(st *stageRuntime, key string, d flight.Decision) {
	if e.cfg.Archive == nil {
		return
	}
	if a, ok := d.Final(key, st.name, tenantOf(key), st.opt.ArchiveRetention); ok {
		e.cfg.Archive.Record(a)
	}
}

// errCancelled is what a caller gets whose flight was cancelled under it.
func errCancelled() error {
	return &flight.OutcomeError{Status: flight.StatusCancelled, Type: "cancelled", Code: "cancelled", Message: "flight cancelled"}
}

func resFallback(r Result, err error) (Result, bool, error) { return r, false, err }

// heartbeat renews the lease with progress until ctx ends; it cancels the run when the flight
// answers cancelled, expired or stale. Failed heartbeats are not fatal: the lease decides.
func (e *Executor) heartbeat(ctx context.Context, cancel context.CancelCauseFunc, st *stageRuntime, o flight.Ownership, progress *atomic.Int64) {
	t := time.NewTicker(st.opt.HeartbeatInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		prog := ""
		if n := progress.Load(); n > 0 {
			prog = strconv.FormatInt(n, 10)
		}
		restored, err := Guard(e.cb, func() (bool, error) {
			hctx, hcancel := context.WithTimeout(ctx, st.opt.Budget.Coordination)
			defer hcancel()
			return e.coord.Heartbeat(hctx, o, prog)
		})
		if restored {
			e.log.Warn().Str("requestKey", o.Key).Int64("token", o.Token).Msg("flight meta was gone; written back by the owner")
		}
		if v := flight.Judge(err); v == flight.VerdictStale || v.Closed() {
			cancel(err)
			return
		}
	}
}

// tenantOf reads the tenant out of a key built by SemanticKey or NamespacedKey; "" for other
// keys.
func tenantOf(key string) string {
	s, _ := flight.ParseKey(key)
	return s.Tenant
}

// flushLoop writes spooled uncertain outcomes back while coordination works; each write-back
// answers the tasks waiting for its flight.
func (e *Executor) flushLoop(ctx context.Context) {
	t := time.NewTicker(e.cfg.FlushInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if e.spool.Len() == 0 || e.breakerOpen() {
			continue
		}
		fctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		rep, err := e.spool.Flush(fctx, e.coord)
		cancel()
		e.metrics.spooled.Set(float64(e.spool.Len()))
		if rep.Written > 0 || rep.Refused > 0 {
			e.log.Info().Int("written", rep.Written).Int("refused", rep.Refused).Int("kept", rep.Kept).
				Int("answered", rep.Answered).Msg("uncertain outcomes written back")
		}
		if err != nil {
			e.log.Debug().Err(err).Msg("spool flush incomplete")
		}
	}
}
