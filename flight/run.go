package flight

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/flightdeck-ai/flightdeck/internal/guard"
)

// Owner is the one owner lifecycle, shared by the stream consumer and the in-process
// executor. Run takes the flight an acquire made its caller own. It answers the flight from an
// outcome the process holds or the archive keeps, or runs the call under a heartbeat lease and
// completes or fails the flight, spooling a result Redis cannot take. One Owner serves one
// stage (DESIGN.md section 6).
type Owner struct {
	Coord *Coordinator
	Spool *Spool
	// Archive is the durable archive, or nil for none.
	Archive Archive
	// Guard runs each coordination call, such as through a circuit breaker. Nil calls directly.
	Guard func(call func() error) error
	// Heartbeat is how often the lease is renewed. HeartbeatTimeout bounds each renewal.
	Heartbeat, HeartbeatTimeout time.Duration
	// Timeout bounds each archive lookup and claim. AskTimeout bounds each question about a
	// run's fence, and an unanswered one takes the outcome. HandoverTimeout bounds each handover.
	Timeout, AskTimeout, HandoverTimeout time.Duration
	// WriteTimeout bounds each complete, fail and rehydrate. WriteFor is how long one is tried
	// again while Redis is unavailable. Zero means once.
	WriteTimeout, WriteFor time.Duration
	// FailureTTL is the stage's. An archived failure older than it answers nobody.
	FailureTTL time.Duration
	// Retention is how long the archive keeps the outcomes this owner records.
	Retention time.Duration
	// Limiter, when set, is the stage's limiter. Each call takes from it first and is settled
	// after with what the call reported through ReportUsage and ReportRemaining.
	Limiter *Limiter
	// Tracer, when set, makes a span of each complete, fail and rehydrate, under the span in
	// the context Run is given when that span records (its trace is sampled).
	Tracer trace.Tracer
	// LimitWait is the longest limiter wait the owner sits out holding the flight. A longer
	// one ends the run as EndRetry with Throttled set, the flight waiting for it and its attempt
	// not spent. A wait longer than ReleaseAfter gives the task's stream entry up.
	LimitWait, ReleaseAfter time.Duration
}

// Run is one owner run's context and caller.
type Run struct {
	// Context is what the call runs under. When it ends with the call failed, the run hands
	// the flight over without spending the attempt, as EndAborted with Handed set.
	Context context.Context
	// Abort, when it is closed, ends the call with AbortCause and hands the flight over, as
	// for a lost session lock. Nil means never.
	Abort      <-chan struct{}
	AbortCause error
	Caller     Caller
	// Tokens is the call's token estimate, taken from the limiter before the call.
	Tokens int
}

// Caller is the caller's side of an owner run. Its methods run on the goroutine that called
// Owner.Run, except Log, which the heartbeat calls too.
type Caller interface {
	// Call runs the model. Calling progress moves the flight's progressAt.
	Call(ctx context.Context, progress func()) ([]byte, error)
	// Failure classifies the call's error for its Fail, with FailureOf or more.
	Failure(err error, o Ownership) Failure
	// Finishing is told that what is left is a short write.
	Finishing()
	// BeforeComplete is called before the complete. It returns the joined tasks that ride in
	// it as Ownership.Joined, or ok false to hand the flight over instead with EndHanded. After a
	// true answer, AfterComplete is told the complete's settlement and whether the result was
	// spooled, whatever happens, a panic included.
	BeforeComplete(ctx context.Context) (joined []Task, ok bool)
	AfterComplete(st Settlement, spooled bool)
	// Log receives the run's notes: level, message, error or nil for none, and key-value pairs.
	Log(level slog.Level, msg string, err error, kv ...any)
}

// Ending is how an owner run ended.
type Ending uint8

// The endings. The caller settles its task from End, switching on its Ending once.
const (
	// EndCompleted: the result is stored in End.Value. End.Held is set when it was the outcome
	// this process held, with no call.
	EndCompleted Ending = iota
	// EndArchived: the archive's outcome, End.Archived, answered the flight with no call.
	// End.Verdict is VerdictCancelled when the flight turned out cancelled.
	EndArchived
	// EndFailed: the call failed for good. The failure, End.Failure, is the flight's outcome.
	EndFailed
	// EndRetry: the call failed and the flight retries after End.Failure.RetryIn.
	EndRetry
	// EndClosed: the flight was cancelled or expired for good, see End.Verdict. A result may
	// never be stored.
	EndClosed
	// EndRefused: another owner holds the flight, and End.Verdict is stale or conflict.
	// End.Settlement says whether the caller's task was answered or parked.
	EndRefused
	// EndSpooled: Redis could not take the result. It is spooled for the write-back, which
	// answers the flight's tasks. End.Err is Redis's error.
	EndSpooled
	// EndAborted: the call was ended before it answered. Either the flight ended it, with
	// End.Verdict stale, cancelled or expired, and the caller acquires again, or the caller
	// ended it and End.Handed is set.
	EndAborted
	// EndHanded: BeforeComplete refused. The flight was handed over, its attempt not spent.
	EndHanded
	// EndError: Redis refused or lost a call that leaves the outcome unknown. The call was the
	// failure's record, with End.CallErr the call's error, or an archived outcome's write, or it
	// is a spool that could not take the result in End.Value.
	EndError
)

// End is the end of an owner run.
type End struct {
	How Ending
	// Op is the last coordination call: "complete", "fail", "rehydrate", or "" for none.
	Op      string
	Verdict Verdict
	// Settlement is what the last call settled.
	Settlement Settlement
	// Value is the result of EndCompleted, EndSpooled and an unspooled EndError.
	Value []byte
	// Held is true when the value was the outcome this process held.
	Held bool
	// Archived is the outcome an EndArchived run was answered with.
	Archived Archived
	// Failure is what EndFailed and EndRetry recorded.
	Failure Failure
	// Handed is true when the run gave the flight up without spending its attempt.
	Handed bool
	// Cause is why an EndAborted call ended.
	Cause error
	// CallErr is the call's own error. Err is the one the run ended with.
	CallErr, Err error
	// RunTime is how long the call took.
	RunTime time.Duration
	// Usage is what the call reported it used through ReportUsage, or nil for none.
	Usage *Usage
	// Throttled is the limiter's wait that ended an EndRetry run before its call.
	Throttled Throttled
}

// msgHeldAnswer is logged by an owner that completes its flight with an outcome its process
// holds instead of a call. msgArchiveAnswer is logged by one answered from the archive.
// cmd/chaos reads both.
const (
	msgHeldAnswer    = "answered from the outcome this process holds; no model call"
	msgArchiveAnswer = "answered from the archive; no model call"
)

// Run runs the flight d made its caller own.
func (w *Owner) Run(ctx context.Context, d Decision, r Run) End {
	o := *d.Owner
	held, heldToken, isHeld := w.Spool.Held(o.Key)
	if isHeld && w.runClosed(ctx, r, o.Key, heldToken, "held outcome") {
		isHeld = false
	}
	if w.Archive != nil {
		if !isHeld {
			if e, done := w.rehydrate(ctx, r, o); done {
				return e
			}
		}
		w.claim(ctx, r, d)
	}
	if isHeld {
		// This process has the key's outcome in hand, unwritten. The call is not run again for
		// it: this owner's flight takes that result (DESIGN.md section 6, "Held outcomes").
		r.Caller.Log(slog.LevelInfo, msgHeldAnswer, nil, "heldToken", heldToken)
		r.Caller.Finishing()
		e := w.settle(ctx, r, o, held, 0, w.Spool.Hold(o.Key, o.Token, held))
		e.Held = true
		return e
	}

	runCtx, cancel := context.WithCancelCause(r.Context)
	defer cancel(nil)
	var hb beats
	stopHeartbeat := w.startHeartbeat(runCtx, cancel, r, o, &hb)
	res, limited, th := w.admit(runCtx, r, o)
	if th.Wait > 0 {
		cancel(nil)
		stopHeartbeat()
		return w.throttled(ctx, r, o, th)
	}
	callCtx, report := withReport(runCtx)
	start := time.Now()
	out, callErr := Guarded(func() ([]byte, error) { return r.Caller.Call(callCtx, func() { hb.progress.Add(1) }) },
		func(p *guard.PanicError) {
			r.Caller.Log(slog.LevelError, "the call panicked; the flight fails", nil, "panic", fmt.Sprint(p.Value), "stack", string(p.Stack))
		})
	usage, rem := report.result()
	if limited {
		// After the complete or fail: the tasks' events do not wait for the limiter.
		defer w.settleLimit(ctx, r, res, usage, rem, callErr)
	}
	o.Usage = usage
	var release func(settled bool)
	if callErr == nil {
		// Held from the moment it exists until Redis took or refused it. Settle releases it, and
		// this defer only when something panics before.
		release = w.Spool.Hold(o.Key, o.Token, out)
		defer release(false)
	}
	run := time.Since(start)
	cause := context.Cause(runCtx)
	cancel(nil)
	stopHeartbeat()
	if callErr != nil && cause != nil {
		if v := Judge(cause); v == VerdictStale || v.Closed() {
			return End{How: EndAborted, Verdict: v, Cause: cause, CallErr: callErr, RunTime: run}
		}
		w.handover(r, o, cause.Error())
		return End{How: EndAborted, Verdict: VerdictInvalid, Handed: true, Cause: cause, CallErr: callErr, RunTime: run}
	}
	r.Caller.Finishing()
	if callErr != nil {
		e := w.fail(ctx, r, o, callErr, run)
		e.Usage = usage
		return e
	}
	e := w.settle(ctx, r, o, out, run, release)
	e.Usage = usage
	return e
}

// settle completes the flight o owns with v. The caller holds v with Spool.Hold until settle
// returns and calls release: Redis took it or refused it, or it was spooled.
func (w *Owner) settle(ctx context.Context, r Run, o Ownership, v []byte, run time.Duration, release func(settled bool)) End {
	var c completion
	defer func() { release(c.settled) }()
	joined, ok := r.Caller.BeforeComplete(ctx)
	if !ok {
		w.handover(r, o, "the caller refused the complete")
		return End{How: EndHanded, Handed: true, RunTime: run}
	}
	o.Joined = joined
	defer func() { r.Caller.AfterComplete(c.st, c.spooled) }()
	return w.complete(ctx, o, v, run, &c)
}

// completion is what settle's deferred calls are told, set as soon as it is known. A panic
// after the write still tells the joined tasks that it answered them.
type completion struct {
	st               Settlement
	settled, spooled bool // nobody else takes the result, and it was spooled
}

// complete is settle's write.
func (w *Owner) complete(ctx context.Context, o Ownership, v []byte, run time.Duration, c *completion) End {
	st, err := w.write(ctx, writing{op: "complete", o: o, v: v, run: run})
	c.st = st
	e := End{Op: "complete", Verdict: Judge(err), Settlement: st, Value: v, Err: err, RunTime: run}
	switch {
	case e.Verdict == VerdictTaken:
		c.settled = true
		w.record(o, StatusSucceeded, v, Failure{})
		e.How = EndCompleted
	case e.Verdict.Closed():
		c.settled = true // it may never be stored, so nobody takes it
		e.How = EndClosed
	case e.Verdict.Refused():
		e.How = EndRefused
	default:
		// The call answered but the result cannot be stored: an uncertain outcome. The spool
		// keeps it until the write-back, which answers the flight's tasks. The call is not run
		// again for it.
		if serr := w.Spool.Add(o.Outcome(v)); serr != nil {
			e.How, e.Err = EndError, fmt.Errorf("%w: %w (spool: %w)", ErrUncertainOutcome, err, serr)
			return e
		}
		c.settled, c.spooled = true, true
		// The archive takes the result now, since the write-back to Redis may come much later.
		// A larger token still wins, there and in the archive.
		w.record(o, StatusSucceeded, v, Failure{})
		e.How = EndSpooled
	}
	return e
}

// fail records the call's failure: final, or retried after its RetryIn.
func (w *Owner) fail(ctx context.Context, r Run, o Ownership, callErr error, run time.Duration) End {
	return w.failWith(ctx, r, o, r.Caller.Failure(callErr, o), callErr, run)
}

// failWith records failure f of the flight o owns. callErr is the call's error.
func (w *Owner) failWith(ctx context.Context, r Run, o Ownership, f Failure, callErr error, run time.Duration) End {
	st, err := w.write(ctx, writing{op: "fail", o: o, f: f, run: run})
	e := End{Op: "fail", Verdict: Judge(err), Settlement: st, Failure: f, CallErr: callErr, Err: err, RunTime: run}
	switch {
	case e.Verdict == VerdictTaken && st.Final:
		w.record(o, StatusFailed, nil, f)
		e.How = EndFailed
	case e.Verdict == VerdictTaken:
		e.How = EndRetry
	case e.Verdict.Closed():
		e.How = EndClosed
	case e.Verdict.Refused():
		e.How = EndRefused
	default:
		e.How = EndError
	}
	return e
}

// rehydrate answers the flight o owns from the archive when it holds the key's final
// outcome, see Archived.Answers. done reports that the run ended there. A lookup that fails
// or finds nothing runs the call.
func (w *Owner) rehydrate(ctx context.Context, r Run, o Ownership) (e End, done bool) {
	lctx, cancel := context.WithTimeout(ctx, w.Timeout)
	a, ok, err := w.Archive.Lookup(lctx, o.Key)
	cancel()
	if err != nil {
		r.Caller.Log(slog.LevelDebug, "archive lookup failed; running the model", err)
		return End{}, false
	}
	if !ok || !a.Answers(w.FailureTTL) {
		return End{}, false
	}
	// An outcome archived before Redis judged it, such as a spooled result, may be of a run
	// that was closed meanwhile. It may never be stored.
	if a.Status != StatusCancelled && w.runClosed(ctx, r, o.Key, a.Token, "archived outcome") {
		return End{}, false
	}
	st, err := w.write(ctx, writing{op: "rehydrate", o: o, a: a})
	e = End{Op: "rehydrate", Verdict: Judge(err), Settlement: st, Archived: a, Err: err}
	switch {
	case e.Verdict == VerdictTaken || e.Verdict == VerdictCancelled:
		// Answered: an archived cancellation, or a cancel meanwhile, answers it cancelled.
		status := a.Status
		if e.Verdict == VerdictCancelled {
			status = StatusCancelled
		}
		r.Caller.Log(slog.LevelInfo, msgArchiveAnswer, nil, "status", string(status), "archivedToken", a.Token)
		e.How = EndArchived
	case e.Verdict == VerdictExpired:
		e.How = EndClosed
	case e.Verdict.Refused():
		e.How = EndRefused
	default:
		e.How = EndError
	}
	return e, true
}

// claim records in the archive, when it keeps a fence as a Fencer, that d's owner took the
// flight over before the call from an owner that may still be running, see needsClaim. After
// a Redis data loss the claim makes the archive refuse that owner's write-back. A claim that
// fails is logged and the run goes on.
func (w *Owner) claim(ctx context.Context, r Run, d Decision) {
	f, ok := w.Archive.(Fencer)
	if !ok {
		return
	}
	if err := claimTakeover(ctx, f, d, w.Timeout); err != nil {
		r.Caller.Log(slog.LevelWarn, "archive claim failed: after a Redis data loss the previous owner could write its result back",
			err, "reason", string(d.Reason))
	}
}

// runClosed asks whether token's run was closed for good, using Coordinator.RunClosed, for
// an owner about to complete its flight with that run's outcome. what names the outcome:
// held by this process, or archived. When the run was closed the owner runs the call
// instead. An unanswered question takes the outcome, so the call is not run twice.
func (w *Owner) runClosed(ctx context.Context, r Run, key string, token int64, what string) bool {
	cctx, cancel := context.WithTimeout(ctx, w.AskTimeout)
	defer cancel()
	closed, err := w.Coord.RunClosed(cctx, key, token)
	switch {
	case err != nil:
		r.Caller.Log(slog.LevelWarn, "cannot tell whether the "+what+"'s run was closed; taking it", err, "outcomeToken", token)
		return false
	case closed:
		r.Caller.Log(slog.LevelInfo, "the "+what+"'s run was cancelled or expired for good; not taking it", nil, "outcomeToken", token)
	}
	return closed
}

// writing is one settling call of o's flight: complete with v, fail with f, or rehydrate with
// a. It is a value, not a closure, so that an owner without a Guard writes without an allocation.
type writing struct {
	op  string
	o   Ownership
	v   []byte
	f   Failure
	a   Archived
	run time.Duration
}

func (c *writing) call(ctx context.Context, coord *Coordinator) (Settlement, error) {
	switch c.op {
	case "complete":
		return coord.Complete(ctx, c.o, c.v, c.run)
	case "fail":
		return coord.Fail(ctx, c.o, c.f, c.run)
	}
	return coord.Rehydrate(ctx, c.o, c.a)
}

// write runs a settling call through Guard, each try bounded by WriteTimeout. It tries again
// while Redis is unavailable, for up to WriteFor: the call already ran, and giving up would
// make the next owner run it again. A retry after a lost reply is accepted as the same outcome.
func (w *Owner) write(ctx context.Context, c writing) (st Settlement, err error) {
	if w.Tracer != nil && trace.SpanFromContext(ctx).IsRecording() {
		var sp trace.Span
		ctx, sp = w.Tracer.Start(ctx, "flight "+c.op, trace.WithSpanKind(trace.SpanKindClient),
			trace.WithAttributes(attribute.String("db.system.name", "redis"), attribute.Int64("flightdeck.token", c.o.Token),
				attribute.Int("flightdeck.attempt", c.o.Attempts)))
		defer func() {
			sp.SetAttributes(attribute.String("flightdeck.verdict", Judge(err).String()), attribute.Int("flightdeck.answered", st.Events))
			if err != nil {
				sp.RecordError(err)
				sp.SetStatus(codes.Error, err.Error())
			}
			sp.End()
		}()
	}
	deadline := time.Now().Add(w.WriteFor)
	ctx = context.WithoutCancel(ctx)
	for wait := 50 * time.Millisecond; ; wait = min(2*wait, time.Second) {
		cctx, cancel := context.WithTimeout(ctx, w.WriteTimeout)
		if w.Guard == nil {
			st, err = c.call(cctx, w.Coord)
		} else {
			g, gst := c, Settlement{} // only a guarded call moves these to the heap
			err = w.Guard(func() error {
				var cerr error
				gst, cerr = g.call(cctx, w.Coord)
				return cerr
			})
			st = gst
		}
		cancel()
		if Judge(err) != VerdictUnavailable || time.Now().Add(wait).After(deadline) {
			return st, err
		}
		time.Sleep(wait)
	}
}

// record archives an outcome of the flight o owned. f describes a failure.
func (w *Owner) record(o Ownership, status Status, result []byte, f Failure) {
	if w.Archive != nil {
		w.Archive.Record(o.Archived(status, result, f, w.Retention))
	}
}

func (w *Owner) guard(call func() error) error {
	if w.Guard == nil {
		return call()
	}
	return w.Guard(call)
}

// handover gives the running flight up without spending its attempt. The next acquire takes
// it over at once.
func (w *Owner) handover(r Run, o Ownership, why string) {
	ctx, cancel := context.WithTimeout(context.Background(), w.HandoverTimeout)
	defer cancel()
	if err := w.guard(func() error { return w.Coord.Handover(ctx, o) }); err != nil && !errors.Is(err, ErrGone) {
		r.Caller.Log(slog.LevelWarn, "handing the flight over failed; its lease lapses by itself", err, "why", why)
		return
	}
	r.Caller.Log(slog.LevelInfo, "flight handed over; the attempt is not spent", nil, "why", why)
}

// startHeartbeat starts the owner's heartbeat and returns the function that waits for it to
// stop once ctx is done. The first beat is due one Heartbeat after the start, so a call that
// returns sooner starts no goroutine at all. A run with an Abort channel starts it at once, to
// watch the channel.
func (w *Owner) startHeartbeat(ctx context.Context, cancel context.CancelCauseFunc, r Run, o Ownership, hb *beats) (wait func()) {
	done := make(chan struct{})
	if r.Abort != nil {
		go func() {
			defer close(done)
			w.heartbeat(ctx, cancel, r, o, hb)
		}()
		return func() { <-done }
	}
	timer := time.AfterFunc(w.Heartbeat, func() {
		defer close(done)
		if ctx.Err() == nil && w.beat(ctx, cancel, r, o, hb) {
			w.heartbeat(ctx, cancel, r, o, hb)
		}
	})
	return func() {
		if !timer.Stop() {
			<-done
		}
	}
}

// heartbeat renews the lease every Heartbeat until ctx ends. It cancels the run when the
// flight refuses it and when Abort is closed.
func (w *Owner) heartbeat(ctx context.Context, cancel context.CancelCauseFunc, r Run, o Ownership, hb *beats) {
	tick := time.NewTicker(w.Heartbeat)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-r.Abort: // nil without one, so never ready
			cancel(r.AbortCause)
			return
		case <-tick.C:
		}
		if !w.beat(ctx, cancel, r, o, hb) {
			return
		}
	}
}

// beat renews the lease once. It answers false, having cancelled the run, when the flight
// refused it with a stale token, cancelled or expired. A meta that vanished is written back
// by the heartbeat itself. A failed beat is not fatal: the lease decides.
func (w *Owner) beat(ctx context.Context, cancel context.CancelCauseFunc, r Run, o Ownership, hb *beats) bool {
	prog := ""
	if n := hb.progress.Load(); n > 0 {
		prog = strconv.FormatInt(n, 10)
	}
	var restored bool
	err := w.guard(func() error {
		hctx, hcancel := context.WithTimeout(ctx, w.HeartbeatTimeout)
		defer hcancel()
		var herr error
		restored, herr = w.Coord.Heartbeat(hctx, o, prog)
		return herr
	})
	if restored {
		r.Caller.Log(slog.LevelWarn, "the flight's meta was gone; written back by its owner", nil)
	}
	switch v := Judge(err); {
	case v == VerdictTaken:
		hb.failing = false
	case v == VerdictStale || v.Closed():
		cancel(err)
		return false
	case ctx.Err() == nil:
		// The first failure of a streak is a warning. The rest, one beat an interval while Redis
		// or the breaker stays away, are debug lines.
		level := slog.LevelWarn
		if hb.failing {
			level = slog.LevelDebug
		}
		hb.failing = true
		r.Caller.Log(level, "heartbeat failed", err)
	}
	return true
}

// beats is a run's heartbeat state: the call's progress counter, and whether the last beat
// failed. Only the heartbeat's goroutine reads and writes failing.
type beats struct {
	progress atomic.Int64
	failing  bool
}
