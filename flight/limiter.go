package flight

import (
	"context"
	"errors"
	"fmt"
	"math"
	"reflect"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/google/uuid"

	"github.com/flightdeck-ai/flightdeck/lua"
	"github.com/flightdeck-ai/flightdeck/topics"
)

// Limit is a named limiter's budget, shared by the whole fleet and by every stage that names
// it. Zero fields are no limit (DESIGN.md section 10).
type Limit struct {
	// RequestsPerMinute caps model calls per minute.
	RequestsPerMinute int `yaml:"requestsPerMinute"`
	// TokensPerMinute caps the tokens of model calls per minute. Each call reserves its
	// estimate and is charged what the provider reported.
	TokensPerMinute int `yaml:"tokensPerMinute"`
	// Concurrency caps the calls running at once.
	Concurrency int `yaml:"concurrency"`
	// Burst is how much of a minute's budget may be spent at once. Defaults to 10 s.
	Burst time.Duration `yaml:"burst"`
	// Fairness "fair" serves tenants that used less than their weighted share of the last
	// minute first. "none" serves calls as they come. Defaults to "fair".
	Fairness string `yaml:"fairness"`
	// Weights are tenants' weights under fair sharing. A tenant not listed weighs 1.
	Weights map[string]float64 `yaml:"weights"`
}

// Fairness modes of a Limit.
const (
	FairShare = "fair"
	FairNone  = "none"
)

// ErrInvalidLimit reports a Limit a limiter cannot run with.
var ErrInvalidLimit = errors.New("flight: invalid limit")

// WithDefaults returns l with its zero fields set to their defaults.
func (l Limit) WithDefaults() Limit {
	if l.Burst == 0 {
		l.Burst = 10 * time.Second
	}
	if l.Fairness == "" {
		l.Fairness = FairShare
	}
	return l
}

// Validate reports a limit that cannot run. Call it on WithDefaults' result.
func (l Limit) Validate() error {
	switch {
	case l.RequestsPerMinute < 0 || l.TokensPerMinute < 0 || l.Concurrency < 0:
		return fmt.Errorf("%w: limits must not be negative", ErrInvalidLimit)
	case l.RequestsPerMinute == 0 && l.TokensPerMinute == 0 && l.Concurrency == 0:
		return fmt.Errorf("%w: set requestsPerMinute, tokensPerMinute or concurrency", ErrInvalidLimit)
	case l.Burst < time.Second || l.Burst > time.Minute:
		return fmt.Errorf("%w: burst %v: want 1s to 1m", ErrInvalidLimit, l.Burst)
	case l.Fairness != FairShare && l.Fairness != FairNone:
		return fmt.Errorf("%w: fairness %q: want %q or %q", ErrInvalidLimit, l.Fairness, FairShare, FairNone)
	}
	for t, w := range l.Weights {
		if !(w > 0) || math.IsInf(w, 0) {
			return fmt.Errorf("%w: weight of tenant %q must be a positive number", ErrInvalidLimit, t)
		}
	}
	return nil
}

// CheckLimiterName reports a limiter name that cannot name Redis keys: 1 to 64 of
// [a-z0-9._-].
func CheckLimiterName(name string) error {
	if name == "" || len(name) > 64 {
		return fmt.Errorf("%w: limiter name %q: want 1 to 64 characters", ErrInvalidLimit, name)
	}
	for _, c := range name {
		if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '.' || c == '_' || c == '-') {
			return fmt.Errorf("%w: limiter name %q: want only [a-z0-9._-]", ErrInvalidLimit, name)
		}
	}
	return nil
}

// limiterIdle is how long a limiter's keys live after its last use.
const limiterIdle = 10 * time.Minute

// Limiter takes calls from a named Limit in Redis. It is safe for concurrent use.
type Limiter struct {
	name  string
	limit Limit
	c     *Coordinator
	keys  []string
	head  []any // the limits block of both functions
	// factor is the adaptive factor in thousandths that the last settle reported, for metrics.
	factor atomic.Int64
}

// NewLimiter returns the limiter name with budget l on c's Redis and keyspace.
func (c *Coordinator) NewLimiter(name string, l Limit) (*Limiter, error) {
	l = l.WithDefaults()
	if err := l.Validate(); err != nil {
		return nil, fmt.Errorf("limiter %s: %w", name, err)
	}
	if err := CheckLimiterName(name); err != nil {
		return nil, err
	}
	lm := &Limiter{name: name, limit: l, c: c, keys: c.ks.LimiterKeys(name),
		head: []any{l.RequestsPerMinute, l.TokensPerMinute, l.Concurrency, ms(l.Burst), l.Fairness, ms(limiterIdle)}}
	lm.factor.Store(1000)
	return lm, nil
}

// Same reports whether l is the limit the limiter was made with.
func (l *Limiter) Same(o Limit) bool { return reflect.DeepEqual(l.limit, o.WithDefaults()) }

// Name returns the limiter's name.
func (l *Limiter) Name() string { return l.name }

// Factor returns the adaptive factor on the limiter's rates as of the last settle: 1 unless
// the provider answered 429 lately.
func (l *Limiter) Factor() float64 { return float64(l.factor.Load()) / 1000 }

// Reservation is one call's take from a limiter, to settle after the call.
type Reservation struct {
	id     string
	tenant string
	tokens int
}

// Throttled is the answer of a take that must wait: how long, and which budget is spent.
type Throttled struct {
	Wait time.Duration
	// Why is held for a provider's 429, concurrency, requests, tokens, or share for the
	// tenant's fair share.
	Why string
}

// Take reserves one request, tokens and a concurrency slot of ttl for a call of tenant. It
// returns the reservation, or a non-zero Throttled when the call must wait.
func (l *Limiter) Take(ctx context.Context, tenant string, tokens int, ttl time.Duration) (Reservation, Throttled, error) {
	w := l.limit.Weights[tenant]
	if w <= 0 {
		w = 1
	}
	r := Reservation{id: uuid.NewString(), tenant: tenant, tokens: tokens}
	argv := append(append([]any{}, l.head...), tenant, strconv.FormatFloat(w, 'g', -1, 64), tokens, r.id, ms(ttl))
	res, err := lua.LimitTake.RunVia(ctx, l.c.calls, l.c.rdb, l.keys, argv...).Slice()
	if err != nil {
		return Reservation{}, Throttled{}, fmt.Errorf("flight: limiter %s: %w", l.name, err)
	}
	if len(res) < 3 {
		return Reservation{}, Throttled{}, fmt.Errorf("flight: limiter %s: %w: %d elements", l.name, ErrProtocol, len(res))
	}
	if ok, _ := res[0].(int64); ok == 1 {
		return r, Throttled{}, nil
	}
	wait, _ := res[1].(int64)
	why, _ := res[2].(string)
	return Reservation{}, Throttled{Wait: time.Duration(wait) * time.Millisecond, Why: why}, nil
}

// Usage is what one model call used, as its provider reported it.
type Usage = topics.Usage

// Remaining is the budget a provider says is left, from its x-ratelimit-remaining-*
// headers. A field is -1 where it said nothing.
type Remaining struct {
	Requests, Tokens int
}

// CallOutcome is how a limited call ended, for Settle.
type CallOutcome string

// The outcomes of a limited call.
const (
	CallOK      CallOutcome = "ok"
	CallLimited CallOutcome = "limited" // the provider answered 429
	CallError   CallOutcome = "error"
)

// Settle ends reservation r. used, when known, replaces the estimate, refunding or charging
// the difference. rem lowers the limiter's view of what is left. A CallLimited outcome holds
// the whole limiter for hold, 1 s when zero, and lowers its rates. CallOK raises them back.
func (l *Limiter) Settle(ctx context.Context, r Reservation, used *Usage, rem Remaining, outcome CallOutcome, hold time.Duration) error {
	u := -1
	if used != nil {
		u = used.Tokens()
	}
	argv := append(append([]any{}, l.head...), r.tenant, r.id, r.tokens, u, string(outcome), ms(hold), rem.Requests, rem.Tokens)
	res, err := lua.LimitSettle.RunVia(ctx, l.c.calls, l.c.rdb, l.keys, argv...).Slice()
	if err != nil {
		return fmt.Errorf("flight: limiter %s: %w", l.name, err)
	}
	if len(res) > 0 {
		if f, ok := res[0].(int64); ok {
			l.factor.Store(f)
		}
	}
	return nil
}
