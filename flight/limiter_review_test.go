package flight_test

import (
	"context"
	"fmt"
	"math"
	"strconv"
	"testing"
	"time"

	"github.com/flightdeck-ai/flightdeck/flight"
	"github.com/flightdeck-ai/flightdeck/internal/testkit/redistest"
	"github.com/flightdeck-ai/flightdeck/topics"
)

var noRem = flight.Remaining{Requests: -1, Tokens: -1}

// TestLimiterPruneLeavesTheSums: a take that prunes a departed tenant leaves its use out of
// the active tenants' sum.
func TestLimiterPruneLeavesTheSums(t *testing.T) {
	r := redistest.New(t)
	ctx := context.Background()
	lim := newLimiter(t, r, "prune", flight.Limit{RequestsPerMinute: 60000})
	key := (topics.Keyspace{Prefix: r.Prefix}).LimiterKeys("prune")[0]
	for range 50 {
		take(t, lim, "a", 0, time.Minute)
	}
	time.Sleep(5200 * time.Millisecond) // a is gone from the tenants' window
	take(t, lim, "b", 0, time.Minute)   // prunes a, then writes U
	h := r.Client.HGetAll(ctx, key).Val()
	u, _ := strconv.ParseFloat(h["U"], 64)
	ub, _ := strconv.ParseFloat(h["u:b"], 64)
	t.Logf("after a was pruned: U=%v u:b=%v u:a=%q W=%s", u, ub, h["u:a"], h["W"])
	if u > ub+0.5 {
		t.Errorf("U=%.2f still holds the pruned tenant's use (only b is active, u:b=%.2f)", u, ub)
	}
}

// TestLimiterRemembersUseAfterAPause: a tenant that stops asking for more than the active
// window keeps its use of the last minute, decayed.
func TestLimiterRemembersUseAfterAPause(t *testing.T) {
	r := redistest.New(t)
	ctx := context.Background()
	lim := newLimiter(t, r, "forget", flight.Limit{RequestsPerMinute: 60000})
	key := (topics.Keyspace{Prefix: r.Prefix}).LimiterKeys("forget")[0]
	for range 100 {
		take(t, lim, "a", 0, time.Minute)
	}
	time.Sleep(5200 * time.Millisecond)
	take(t, lim, "b", 0, time.Minute)
	take(t, lim, "a", 0, time.Minute)
	ua := r.Client.HGet(ctx, key, "u:a").Val()
	t.Logf("u:a after a 5 s pause: %s (was 100, decayed over a minute should be ~92)", ua)
	if v, _ := strconv.ParseFloat(ua, 64); v < 50 {
		t.Errorf("a's use of the last minute is forgotten after a 5 s pause: u:a=%s", ua)
	}
}

// TestLimiterNoFieldsLeakWithoutFairness: with fairness none, thousands of refused tenants
// leave no fields of their own.
func TestLimiterNoFieldsLeakWithoutFairness(t *testing.T) {
	r := redistest.New(t)
	ctx := context.Background()
	lim := newLimiter(t, r, "leak", flight.Limit{RequestsPerMinute: 6, Burst: time.Second, Fairness: flight.FairNone})
	key := (topics.Keyspace{Prefix: r.Prefix}).LimiterKeys("leak")[0]
	take(t, lim, "x", 0, time.Minute)
	for i := range 3000 {
		take(t, lim, fmt.Sprint("t", i), 0, time.Minute)
	}
	n := r.Client.HLen(ctx, key).Val()
	t.Logf("HLEN after 3000 tenants refused once: %d", n)
	if n > 100 {
		t.Errorf("the limiter hash holds %d fields after 3000 tenants were refused once (fairness none never prunes q:<t>)", n)
	}
}

// TestLimitRefusesWeightsThatAreNotNumbers: a weight of +Inf or NaN is refused by Validate.
func TestLimitRefusesWeightsThatAreNotNumbers(t *testing.T) {
	r := redistest.New(t)
	for _, w := range []float64{math.Inf(1), math.NaN()} {
		l := flight.Limit{RequestsPerMinute: 60, Weights: map[string]float64{"a": w}}
		if err := l.WithDefaults().Validate(); err != nil {
			continue
		}
		lim := newLimiter(t, r, fmt.Sprint("w", w), l)
		_, th, err := lim.Take(context.Background(), "a", 0, time.Minute)
		t.Errorf("weight %v passes Validate; Take: %+v %v", w, th, err)
	}
}

// TestLimiterHoldIsCapped: a 429 with a Retry-After of a day holds the limiter a minute at
// most.
func TestLimiterHoldIsCapped(t *testing.T) {
	r := redistest.New(t)
	ctx := context.Background()
	lim := newLimiter(t, r, "hold", flight.Limit{RequestsPerMinute: 600})
	res, _ := take(t, lim, "a", 0, time.Minute)
	if err := lim.Settle(ctx, res, nil, noRem, flight.CallLimited, 24*time.Hour); err != nil {
		t.Fatal(err)
	}
	_, th := take(t, lim, "other-tenant", 0, time.Minute)
	t.Logf("another tenant after one 429 with Retry-After 86400: %+v", th)
	if th.Wait > 10*time.Minute {
		t.Errorf("one 429 holds the whole limiter for %v", th.Wait)
	}
}

// TestLimiterBusyTenantBesideManyLightOnes: a tenant with 300 waiting calls beside 20 that
// ask now and then keeps the limiter near its rate.
func TestLimiterBusyTenantBesideManyLightOnes(t *testing.T) {
	r := redistest.New(t)
	lim := newLimiter(t, r, "many", flight.Limit{RequestsPerMinute: 600, Burst: time.Second}) // 10/s
	light := 20
	lastLight := time.Time{}
	type task struct{ next time.Time }
	tasks := make([]task, 300)
	grants := map[string]int{}
	start := time.Now()
	for time.Since(start) < 8*time.Second {
		now := time.Now()
		if now.Sub(lastLight) > 4*time.Second { // each light tenant asks once every 4 s
			for i := range light {
				if _, th := take(t, lim, fmt.Sprint("l", i), 0, time.Minute); th.Wait == 0 {
					grants["light"]++
				}
			}
			lastLight = now
		}
		for i := range tasks {
			if tasks[i].next.After(now) {
				continue
			}
			_, th := take(t, lim, "a", 0, time.Minute)
			if th.Wait == 0 {
				grants["a"]++
				tasks[i].next = now.Add(time.Hour)
			} else {
				tasks[i].next = now.Add(th.Wait)
			}
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Logf("grants in 8 s on a limiter of 10/s (burst 10): %v", grants)
	if total := grants["a"] + grants["light"]; total < 60 {
		t.Errorf("only %d of ~90 possible grants while tenant a had 300 tasks waiting", total)
	}
}

// TestLimiterQueueIgnoresTenantCount: a busy tenant's waits do not grow with the number of
// tenants that asked lately.
func TestLimiterQueueIgnoresTenantCount(t *testing.T) {
	r := redistest.New(t)
	lim := newLimiter(t, r, "crowd", flight.Limit{RequestsPerMinute: 60})
	for range 3 {
		take(t, lim, "a", 0, time.Minute) // a uses 3 of the burst of 10
	}
	for i := range 200 {
		take(t, lim, fmt.Sprint("l", i), 0, time.Minute) // one call each: 7 granted, the rest refused
	}
	var last flight.Throttled
	for range 10 {
		_, last = take(t, lim, "a", 0, time.Minute)
	}
	t.Logf("tenant a's 10th waiting call: %+v", last)
	if last.Wait > 2*time.Minute {
		t.Errorf("a's 10 waiting calls are spread over %v on a limiter that refills one a second", last.Wait)
	}
}
