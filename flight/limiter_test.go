package flight_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/flightdeck-ai/flightdeck/flight"
	"github.com/flightdeck-ai/flightdeck/internal/testkit/redistest"
	"github.com/flightdeck-ai/flightdeck/topics"
)

func newLimiter(t *testing.T, r *redistest.Target, name string, l flight.Limit) *flight.Limiter {
	t.Helper()
	c, err := flight.NewCoordinator(flight.Config{Client: r.Client, Keyspace: topics.Keyspace{Prefix: r.Prefix}})
	if err != nil {
		t.Fatal(err)
	}
	lim, err := c.NewLimiter(name, l)
	if err != nil {
		t.Fatal(err)
	}
	return lim
}

func take(t *testing.T, l *flight.Limiter, tenant string, tokens int, ttl time.Duration) (flight.Reservation, flight.Throttled) {
	t.Helper()
	res, th, err := l.Take(context.Background(), tenant, tokens, ttl)
	if err != nil {
		t.Fatal(err)
	}
	return res, th
}

// TestLimiterBudgets: each budget refuses once spent and says how long to wait; the tokens a
// call reserved are corrected by what it used; a call that never settles frees its slot when
// its reservation expires; a 429 holds the limiter and halves its rates, successes raise them
// again; the provider's remaining budget lowers the limiter's.
func TestLimiterBudgets(t *testing.T) {
	r := redistest.New(t)
	ctx := context.Background()

	// 60 requests a minute, a 10 s burst: 10 at once, then one a second.
	req := newLimiter(t, r, "req", flight.Limit{RequestsPerMinute: 60, Fairness: flight.FairNone})
	for i := range 10 {
		if _, th := take(t, req, "a", 0, time.Minute); th.Wait != 0 {
			t.Fatalf("request %d of the burst refused: %+v", i, th)
		}
	}
	if _, th := take(t, req, "a", 0, time.Minute); th.Why != "requests" || th.Wait < 500*time.Millisecond || th.Wait > 1100*time.Millisecond {
		t.Fatalf("the 11th request: %+v, want a wait of about 1 s for requests", th)
	}

	// 6,000 tokens a minute: a bucket of 1,000.
	tok := newLimiter(t, r, "tok", flight.Limit{TokensPerMinute: 6000, Fairness: flight.FairNone})
	first, th := take(t, tok, "a", 600, time.Minute)
	if th.Wait != 0 {
		t.Fatalf("600 of 1,000 tokens refused: %+v", th)
	}
	if _, th := take(t, tok, "a", 600, time.Minute); th.Why != "tokens" || th.Wait < time.Second {
		t.Fatalf("600 more tokens: %+v, want a wait for tokens", th)
	}
	// The first call used 100: 500 come back, and 600 fit again.
	if err := tok.Settle(ctx, first, &flight.Usage{PromptTokens: 60, CompletionTokens: 40}, flight.Remaining{Requests: -1, Tokens: -1}, flight.CallOK, 0); err != nil {
		t.Fatal(err)
	}
	if _, th := take(t, tok, "a", 600, time.Minute); th.Wait != 0 {
		t.Fatalf("after the refund: %+v", th)
	}

	// Two calls at once; one that crashed frees its slot when its reservation expires.
	conc := newLimiter(t, r, "conc", flight.Limit{Concurrency: 2, Fairness: flight.FairNone})
	a, _ := take(t, conc, "a", 0, time.Minute)
	take(t, conc, "a", 0, 300*time.Millisecond) // never settled
	if _, th := take(t, conc, "a", 0, time.Minute); th.Why != "concurrency" {
		t.Fatalf("a third call: %+v, want concurrency", th)
	}
	if err := conc.Settle(ctx, a, nil, flight.Remaining{Requests: -1, Tokens: -1}, flight.CallOK, 0); err != nil {
		t.Fatal(err)
	}
	if _, th := take(t, conc, "a", 0, time.Minute); th.Wait != 0 {
		t.Fatalf("after a settle: %+v", th)
	}
	time.Sleep(350 * time.Millisecond)
	if _, th := take(t, conc, "a", 0, time.Minute); th.Wait != 0 {
		t.Fatalf("after the crashed call's reservation expired: %+v", th)
	}

	// A 429 with Retry-After 1.5 s holds the whole limiter and halves its rates.
	held := newLimiter(t, r, "held", flight.Limit{RequestsPerMinute: 600, Fairness: flight.FairNone})
	c1, _ := take(t, held, "a", 0, time.Minute)
	if err := held.Settle(ctx, c1, nil, flight.Remaining{Requests: -1, Tokens: -1}, flight.CallLimited, 1500*time.Millisecond); err != nil {
		t.Fatal(err)
	}
	if held.Factor() != 0.5 {
		t.Errorf("factor after a 429: %v, want 0.5", held.Factor())
	}
	if _, th := take(t, held, "b", 0, time.Minute); th.Why != "held" || th.Wait < time.Second || th.Wait > 1500*time.Millisecond {
		t.Fatalf("another tenant during the hold: %+v, want held for about 1.5 s", th)
	}
	time.Sleep(1600 * time.Millisecond)
	c2, th := take(t, held, "a", 0, time.Minute)
	if th.Wait != 0 {
		t.Fatalf("after the hold: %+v", th)
	}
	if err := held.Settle(ctx, c2, nil, flight.Remaining{Requests: -1, Tokens: -1}, flight.CallOK, 0); err != nil {
		t.Fatal(err)
	}
	if f := held.Factor(); f <= 0.5 || f >= 1 {
		t.Errorf("factor after a success: %v, want between 0.5 and 1", f)
	}

	// The provider says no request remains: the limiter believes it.
	rem := newLimiter(t, r, "rem", flight.Limit{RequestsPerMinute: 600, Fairness: flight.FairNone})
	c3, _ := take(t, rem, "a", 0, time.Minute)
	if err := rem.Settle(ctx, c3, nil, flight.Remaining{Requests: 0, Tokens: -1}, flight.CallOK, 0); err != nil {
		t.Fatal(err)
	}
	if _, th := take(t, rem, "a", 0, time.Minute); th.Why != "requests" {
		t.Fatalf("after the provider said none remain: %+v", th)
	}
}

// TestLimiterFairShares: two tenants asking as fast as they can for 3 s, one four times as
// often as the other, share a limiter of 10 requests a second by their weights; and a tenant
// that comes after another spent the burst is served first, not behind it.
func TestLimiterFairShares(t *testing.T) {
	r := redistest.New(t)
	for _, tc := range []struct {
		name    string
		weights map[string]float64
		wantA   float64 // A's share of the grants
	}{{"equal", nil, 0.5}, {"weighted", map[string]float64{"a": 3}, 0.75}} {
		t.Run(tc.name, func(t *testing.T) {
			lim := newLimiter(t, r, "fair-"+tc.name, flight.Limit{RequestsPerMinute: 600, Burst: time.Second, Weights: tc.weights})
			grants := map[string]int{}
			deadline := time.Now().Add(3 * time.Second)
			for time.Now().Before(deadline) {
				for _, tenant := range []string{"a", "a", "a", "a", "b"} { // A asks four times as often
					if _, th := take(t, lim, tenant, 0, time.Minute); th.Wait == 0 {
						grants[tenant]++
					}
				}
				time.Sleep(5 * time.Millisecond)
			}
			total := grants["a"] + grants["b"]
			t.Logf("grants %v", grants)
			if total < 30 || total > 45 {
				t.Errorf("%d grants in 3 s, want about 40 (a burst of 10, then 10 a second)", total)
			}
			if share := float64(grants["a"]) / float64(total); share < tc.wantA-0.12 || share > tc.wantA+0.12 {
				t.Errorf("A got %d and B %d: A's share %.2f, want about %.2f", grants["a"], grants["b"], share, tc.wantA)
			}
		})
	}
	t.Run("late", func(t *testing.T) {
		lim := newLimiter(t, r, "fair-late", flight.Limit{RequestsPerMinute: 600, Burst: time.Second})
		deadline := time.Now().Add(2 * time.Second)
		for time.Now().Before(deadline) { // A alone for 2 s: the burst and 10 a second
			take(t, lim, "a", 0, time.Minute)
			time.Sleep(5 * time.Millisecond)
		}
		grants := map[string]int{}
		deadline = time.Now().Add(time.Second)
		for time.Now().Before(deadline) {
			for _, tenant := range []string{"a", "a", "a", "a", "b"} {
				if _, th := take(t, lim, tenant, 0, time.Minute); th.Wait == 0 {
					grants[tenant]++
				}
			}
			time.Sleep(5 * time.Millisecond)
		}
		t.Logf("grants in the second after B came %v", grants)
		if grants["b"] < 7 {
			t.Errorf("B got %d of the 10 calls in its first second, A %d: B waits behind A", grants["b"], grants["a"])
		}
	})
}

// TestLimitValidate: a limit with nothing to limit, a negative or an unknown fairness is
// refused with ErrInvalidLimit.
func TestLimitValidate(t *testing.T) {
	for _, l := range []flight.Limit{{}, {RequestsPerMinute: -1}, {Concurrency: 1, Fairness: "fifo"}, {TokensPerMinute: 1, Burst: time.Hour},
		{RequestsPerMinute: 1, Weights: map[string]float64{"a": 0}}} {
		if err := l.WithDefaults().Validate(); !errors.Is(err, flight.ErrInvalidLimit) {
			t.Errorf("%+v: %v, want ErrInvalidLimit", l, err)
		}
	}
	if err := (flight.Limit{RequestsPerMinute: 600}).WithDefaults().Validate(); err != nil {
		t.Errorf("a plain limit: %v", err)
	}
}

// TestFreeRetrySpendsNoAttempt: an owner a limiter stopped before its call records a free
// retryable failure: with its only attempt used, a duplicate before retryAt parks and is not
// answered, and the acquire after retryAt owns the flight again as a retry of the same
// attempt.
func TestFreeRetrySpendsNoAttempt(t *testing.T) {
	modes(t, func(t *testing.T, b *bundle) {
		b.pol.MaxAttempts = 1
		d, _ := b.own("k")
		f := flight.Failure{Retryable: true, Type: "rate_limited", Code: "limiter_requests", Free: true, RetryIn: 300 * time.Millisecond}
		st, err := b.c.Fail(b.ctx, *d.Owner, f, 0)
		if err != nil || st.Final {
			t.Fatalf("free fail: %+v %v, want a retryable failure", st, err)
		}
		dup := b.acquire("k", "B", b.task("tb"))
		if dup.Action != flight.ActionFollowerWait || dup.Reason != flight.ReasonParked {
			t.Fatalf("a duplicate before retryAt: %+v, want parked", dup)
		}
		time.Sleep(350 * time.Millisecond)
		again := b.acquire("k", "A", b.task("ta"))
		if again.Action != flight.ActionOwner || again.Reason != flight.ReasonRetry || again.Attempts != 1 {
			t.Fatalf("after retryAt: %+v, want owner by retry with 1 attempt", again)
		}
		if evs := b.events(); len(evs["tb"]) != 0 {
			t.Errorf("the parked duplicate was answered: %+v", evs["tb"])
		}
	})
}
