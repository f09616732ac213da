package executor

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"time"

	"github.com/google/uuid"
	"github.com/rs/zerolog"

	"github.com/flightdeck-ai/flightdeck/flight"
	"github.com/flightdeck-ai/flightdeck/internal/guard"
	"github.com/flightdeck-ai/flightdeck/topics"
)

// distributed is the L1 leader's path through the state machine. Final outcomes answer the
// stream tasks parked on the flight in the acquire script itself. An owner's complete or fail
// answers them with its own event, with task id "exec-<uuid>", which wakes in-process
// followers on every node.
func (e *Executor) distributed(ctx context.Context, st *stageRuntime, key string, fn Fn) (Result, error) {
	pol := st.opt.Policy
	// Active on the key until the loop ends: an outcome of the key released meanwhile stays
	// held for this caller's own check, see Spool.Enter.
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
				// The decision was taken but answering parked tasks failed, as on Redis Cluster in mode
				// return. They stay parked and are answered by the next caller.
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
		// Cannot listen: wait out the timeout, then acquire again. Never run at once.
		<-wctx.Done()
		return ctx.Err()
	}
	defer reg.unregister()
	head, err := Guard(e.cb, func() (string, error) {
		return e.rdb.GetRange(wctx, e.coord.Keyspace().Flight(key), 0, flight.RecordHeadBytes-1).Result()
	})
	var retry <-chan time.Time
	if err == nil {
		m, _ := flight.ParseRecordHead(head)
		status, at := m["status"], m["retryAt"]
		switch {
		case status == string(flight.StatusFailed):
			// A retry delay, such as a limiter's wait: every caller waits for its retryAt.
			ms, _ := strconv.ParseInt(at, 10, 64)
			d := time.Until(time.UnixMilli(ms))
			if d <= 0 {
				return nil
			}
			t := time.NewTimer(d)
			defer t.Stop()
			retry = t.C
		case status != string(flight.StatusPending) && status != string(flight.StatusRunning):
			return nil
		}
	}
	select {
	case <-retry:
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

// own runs fn as the flight's owner, which acquire already started, through the one owner
// lifecycle flight.Owner, and turns how the run ended into the caller's result. again asks
// the caller to acquire again: the flight expired, was taken over, or a retryable failure
// left attempts.
func (e *Executor) own(ctx context.Context, st *stageRuntime, d flight.Decision, fn Fn) (res Result, again bool, err error) {
	o := *d.Owner
	o.Task = flight.Task{ID: "exec-" + uuid.NewString()}
	d.Owner = &o
	c := &caller{fn: fn, budget: st.opt.Budget.Execution, log: &e.log, key: o.Key, token: o.Token}
	end := st.owner.Run(ctx, d, flight.Run{Context: ctx, Caller: c, Tokens: st.opt.EstimateTokens})
	if p, ok := errors.AsType[*guard.PanicError](end.CallErr); ok {
		panic(p) // the flight failed for good, and Local raises it again in every caller of this run
	}
	res = Result{Value: end.Value, Shared: topics.SharedOwner, Token: o.Token}
	switch end.How {
	case flight.EndCompleted:
		return res, false, nil
	case flight.EndArchived:
		switch {
		case end.Verdict == flight.VerdictCancelled:
			return Result{}, false, errCancelled()
		case end.Archived.Status == flight.StatusSucceeded:
			return Result{Value: end.Archived.Result, Shared: topics.SharedArchive, Token: o.Token}, false, nil
		}
		a := end.Archived
		return Result{}, false, &flight.OutcomeError{Status: a.Status, Type: a.ErrorType, Code: a.ErrorCode, Message: a.Error}
	case flight.EndFailed:
		return Result{}, false, end.CallErr
	case flight.EndRetry, flight.EndRefused:
		if end.How == flight.EndRefused && end.Op == "complete" {
			c.logger().Info().Err(end.Err).Msg("result refused by the flight; following its owner")
		}
		return Result{}, true, nil // another owner runs it now or will, so follow or take over
	case flight.EndClosed:
		switch {
		case end.Verdict == flight.VerdictCancelled && end.Op == "complete":
			return Result{}, false, &flight.OutcomeError{Status: flight.StatusCancelled, Type: "cancelled", Code: "cancelled",
				Message: "flight cancelled before the result was stored"}
		case end.Verdict == flight.VerdictCancelled:
			return Result{}, false, errCancelled()
		case end.Op == "complete":
			return Result{}, false, &flight.OutcomeError{Status: flight.StatusExpired, Type: "expired", Code: "expired",
				Message: "flight expired for good before the result was stored"}
		}
		return Result{}, true, nil // the next acquire answers the expiry
	case flight.EndSpooled:
		// The model answered but the write failed or its reply was lost. The value is handed
		// over and spooled, and the write-back answers everybody.
		e.metrics.resultWriteFailure.WithLabelValues(st.name).Inc()
		e.metrics.spooled.Set(float64(e.spool.Len()))
		c.logger().Warn().Err(end.Err).Msg("result write failed: uncertain outcome spooled for write-back")
		res.Uncertain = true
		return res, false, nil
	case flight.EndAborted:
		if end.Verdict == flight.VerdictCancelled {
			return Result{}, false, errCancelled()
		}
		if end.Handed {
			return Result{}, false, ctx.Err() // the caller gave up, and the flight was handed over
		}
		return Result{}, true, nil
	}
	// EndError. EndHanded needs a BeforeComplete, which the executor has none of.
	if end.Op == "complete" && end.Value != nil {
		e.metrics.resultWriteFailure.WithLabelValues(st.name).Inc()
		c.logger().Error().Err(end.Err).Msg("uncertain outcome could not be spooled")
		res.Uncertain = true
		return res, false, end.Err
	}
	if end.Op == "fail" && end.Throttled.Wait > 0 {
		return Result{}, true, nil // the limiter's wait could not be recorded: acquire again
	}
	if end.Op == "fail" {
		return Result{}, false, end.CallErr // the failure could not be recorded, and fn is not run again here
	}
	return Result{}, false, end.Err
}

// caller is an in-process caller's side of an owner run, a flight.Caller.
type caller struct {
	fn     Fn
	budget time.Duration // Budget.Execution
	log    *zerolog.Logger
	key    string
	token  int64
}

// logger is the executor's logger with the flight's key and token, built only for a line to
// write.
func (c *caller) logger() *zerolog.Logger {
	l := c.log.With().Str("requestKey", c.key).Int64("token", c.token).Logger()
	return &l
}

// Call runs fn within the execution budget.
func (c *caller) Call(ctx context.Context, progress func()) ([]byte, error) {
	ctx, cancel := context.WithTimeout(ctx, c.budget)
	defer cancel()
	return c.fn(ctx, progress)
}

// Failure is flight.FailureOf, retried at once: a provider's retry hint does not delay an
// in-process caller's next attempt.
func (c *caller) Failure(err error, _ flight.Ownership) flight.Failure {
	f := flight.FailureOf(err)
	f.RetryIn = 0
	return f
}

// Finishing does nothing: no subscriber waits for the slot.
func (c *caller) Finishing() {}

// BeforeComplete lets every complete go ahead: an in-process owner has no joined tasks and no
// session lock.
func (c *caller) BeforeComplete(context.Context) ([]flight.Task, bool) { return nil, true }

// AfterComplete does nothing.
func (c *caller) AfterComplete(flight.Settlement, bool) {}

// Log writes the run's notes to the executor's logger.
func (c *caller) Log(level slog.Level, msg string, err error, kv ...any) {
	ev := c.log.WithLevel(zerologLevel(level)).Str("requestKey", c.key).Int64("token", c.token)
	if err != nil {
		ev = ev.Err(err)
	}
	ev.Fields(kv).Msg(msg)
}

// zerologLevel is the zerolog level of an owner run's note.
func zerologLevel(l slog.Level) zerolog.Level {
	switch {
	case l >= slog.LevelError:
		return zerolog.ErrorLevel
	case l >= slog.LevelWarn:
		return zerolog.WarnLevel
	case l >= slog.LevelInfo:
		return zerolog.InfoLevel
	}
	return zerolog.DebugLevel
}

// recordFinal archives the outcome an acquire answered the caller with when it ended the
// flight for good, as a consumer does. See flight.Decision.Final.
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

// tenantOf reads the tenant out of a key built by SemanticKey or NamespacedKey. It returns
// "" for other keys.
func tenantOf(key string) string {
	s, _ := flight.ParseKey(key)
	return s.Tenant
}

// flushLoop writes spooled uncertain outcomes back while coordination works. Each write-back
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
