package flight

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"
)

// ErrThrottled is the error of an owner run that a limiter stopped before its call. The
// flight waits for the limiter with its retryAt, and the attempt is not spent.
var ErrThrottled = errors.New("flight: limiter budget spent")

// admit takes the call's budget from the stage's limiter, sitting out waits up to LimitWait.
// It returns the reservation and whether there is one to settle, or the wait that ends the
// run. A limiter Redis cannot answer lets the call go, logged: the provider's own limits and
// its 429s still apply.
func (w *Owner) admit(ctx context.Context, r Run, o Ownership) (Reservation, bool, Throttled) {
	if w.Limiter == nil {
		return Reservation{}, false, Throttled{}
	}
	ttl := o.Policy.WithDefaults().RunningTTL
	var waited time.Duration
	for {
		tctx, cancel := context.WithTimeout(ctx, w.limitTimeout())
		res, th, err := w.Limiter.Take(tctx, o.Tenant, r.Tokens, ttl)
		cancel()
		switch {
		case err != nil:
			r.Caller.Log(slog.LevelWarn, "limiter unavailable; calling without it", err, "limiter", w.Limiter.Name())
			return Reservation{}, false, Throttled{}
		case th.Wait == 0:
			return res, true, Throttled{}
		case waited+th.Wait > w.LimitWait:
			return Reservation{}, false, th
		}
		waited += th.Wait
		t := time.NewTimer(th.Wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return Reservation{}, false, th
		case <-t.C:
		}
	}
}

// throttled ends a run the limiter made wait th.Wait, as EndRetry. The flight records a free
// retryable failure whose retryAt holds every task of the key until then.
func (w *Owner) throttled(ctx context.Context, r Run, o Ownership, th Throttled) End {
	f := Failure{Retryable: true, Type: "rate_limited", Code: "limiter_" + th.Why, Free: true, RetryIn: th.Wait,
		Message:       fmt.Sprintf("limiter %s: %s budget spent; the call waits %v", w.Limiter.Name(), th.Why, th.Wait.Round(time.Millisecond)),
		EntryReleased: w.ReleaseAfter > 0 && th.Wait > w.ReleaseAfter}
	e := w.failWith(ctx, r, o, f, fmt.Errorf("%w: %s", ErrThrottled, f.Message), 0)
	e.Throttled = th
	if e.How == EndError {
		// The free failure was not recorded: hand the flight over, so that the next owner
		// takes it without spending an attempt, rather than by a lapsed lease.
		e.Handed = w.Coord.giveUp(ctx, o)
	}
	return e
}

// settleLimit settles the call's reservation with what the call reported and how it ended.
// A provider's rate limit, a 429, holds the whole limiter for its Retry-After.
func (w *Owner) settleLimit(ctx context.Context, r Run, res Reservation, used *Usage, rem Remaining, callErr error) {
	outcome, hold := CallOK, time.Duration(0)
	if callErr != nil {
		outcome = CallError
		if f := FailureOf(callErr); f.Type == "rate_limited" {
			outcome, hold = CallLimited, f.RetryIn
		}
	}
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), w.limitTimeout())
	defer cancel()
	if err := w.Limiter.Settle(sctx, res, used, rem, outcome, hold); err != nil {
		r.Caller.Log(slog.LevelWarn, "limiter settle failed; its reservation expires", err, "limiter", w.Limiter.Name())
	}
}

// limitTimeout bounds each limiter call: Timeout, or 1 s without one.
func (w *Owner) limitTimeout() time.Duration {
	if w.Timeout > 0 {
		return w.Timeout
	}
	return time.Second
}
