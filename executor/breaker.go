package executor

import (
	"context"
	"errors"
	"math/rand/v2"
	"time"

	"github.com/flightdeck-ai/flightdeck/flight"
	"github.com/sony/gobreaker/v2"
)

// BreakerConfig configures the coordination circuit breaker.
type BreakerConfig struct {
	// FailureThreshold: this many consecutive coordination failures open the breaker.
	// Defaults to 5.
	FailureThreshold uint32
	// OpenTimeout is how long the breaker stays open before it lets half-open probes through.
	// Defaults to 5 s.
	OpenTimeout time.Duration
	// Jitter: each node adds a random share of up to this much to OpenTimeout, chosen once, so
	// that a fleet does not probe a recovering Redis in lockstep. Defaults to OpenTimeout / 5.
	Jitter time.Duration
	// HalfOpenProbes is how many calls may probe while half-open. That many successes close
	// the breaker. Defaults to 3.
	HalfOpenProbes uint32
}

func (c BreakerConfig) withDefaults() BreakerConfig {
	if c.FailureThreshold == 0 {
		c.FailureThreshold = 5
	}
	if c.OpenTimeout == 0 {
		c.OpenTimeout = 5 * time.Second
	}
	if c.Jitter == 0 {
		c.Jitter = c.OpenTimeout / 5
	}
	if c.HalfOpenProbes == 0 {
		c.HalfOpenProbes = 3
	}
	return c
}

// Breaker guards coordination calls with a sony/gobreaker/v2 circuit breaker. After
// FailureThreshold consecutive coordination failures it opens and refuses calls without making
// them. After OpenTimeout plus this node's jitter it lets HalfOpenProbes calls probe, which
// close it again. Only coordination failures count, see IsCoordinationFailure. Safe for
// concurrent use.
type Breaker struct {
	cb *gobreaker.CircuitBreaker[any]
}

// NewBreaker returns a breaker. onChange, which may be nil, is called on every state change
// with the new state: "closed", "half-open" or "open".
func NewBreaker(cfg BreakerConfig, onChange func(from, to string)) *Breaker {
	cfg = cfg.withDefaults()
	timeout := cfg.OpenTimeout
	if cfg.Jitter > 0 {
		timeout += rand.N(cfg.Jitter)
	}
	return &Breaker{cb: gobreaker.NewCircuitBreaker[any](gobreaker.Settings{
		Name:        "coordination",
		MaxRequests: cfg.HalfOpenProbes,
		Timeout:     timeout,
		ReadyToTrip: func(c gobreaker.Counts) bool { return c.ConsecutiveFailures >= cfg.FailureThreshold },
		IsSuccessful: func(err error) bool {
			return !flight.IsCoordinationFailure(err)
		},
		// A call no replica acknowledged was answered by Redis: it says nothing of Redis's
		// health, and must not stop the stages that do not wait for replicas.
		IsExcluded: func(err error) bool {
			return errors.Is(err, context.Canceled) || errors.Is(err, flight.ErrNotReplicated)
		},
		OnStateChange: func(_ string, from, to gobreaker.State) {
			if onChange != nil {
				onChange(from.String(), to.String())
			}
		},
	})}
}

// State is "closed", "half-open" or "open".
func (b *Breaker) State() string { return b.cb.State().String() }

// Open reports whether the breaker refuses calls now.
func (b *Breaker) Open() bool { return b.cb.State() == gobreaker.StateOpen }

// Guard runs one coordination call through the breaker. While the breaker is open it returns a
// *CoordinationError matching flight.ErrCoordinationUnavailable without calling f, so no
// command reaches Redis. A coordination failure of f is wrapped the same way. Other errors,
// the state machine's answers, pass through unchanged.
func Guard[T any](b *Breaker, f func() (T, error)) (T, error) {
	var zero T
	v, err := b.cb.Execute(func() (any, error) { return f() })
	if errors.Is(err, gobreaker.ErrOpenState) || errors.Is(err, gobreaker.ErrTooManyRequests) {
		return zero, &flight.CoordinationError{Err: err, BreakerOpen: true}
	}
	if err != nil {
		if flight.IsCoordinationFailure(err) {
			return zero, &flight.CoordinationError{Err: err}
		}
		return zero, err
	}
	t, _ := v.(T)
	return t, nil
}
