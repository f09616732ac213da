package handlers

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"
	"github.com/rs/zerolog"

	"github.com/flightdeck-ai/flightdeck/internal/broker"
)

// ErrEvictionPolicy is returned by Run when Config.RequireNoEviction is set and Redis's
// maxmemory-policy is not noeviction.
var ErrEvictionPolicy = errors.New("handlers: Redis may evict keys")

// evictionRisk is what a policy other than noeviction risks, for the warning and /readyz.
const evictionRisk = "under memory pressure Redis may drop task streams, parked entries, fences and results; set maxmemory-policy noeviction"

// evictionWatch reads Redis's maxmemory-policy at start and on every liveness beat. It warns
// once per change when the policy is not noeviction, and keeps it for Status and the metric.
type evictionWatch struct {
	rdb   redis.UniversalClient
	log   zerolog.Logger
	gauge *prometheus.GaugeVec

	mu     sync.Mutex
	policy string // "" until read
	blind  bool   // the credential may read the policy neither way, so stop asking
}

// check reads the policy and reports a change. It returns the policy and the error of the read.
// Once the credential was refused, the error is ErrPolicyRefused and check does not ask again.
func (w *evictionWatch) check(ctx context.Context) (string, error) {
	w.mu.Lock()
	blind := w.blind
	w.mu.Unlock()
	if blind {
		return "", broker.ErrPolicyRefused
	}
	p, err := broker.EvictionPolicy(ctx, w.rdb)
	if err != nil {
		if !errors.Is(err, broker.ErrPolicyRefused) {
			w.log.Debug().Err(err).Msg("cannot read Redis's maxmemory-policy")
			return "", err
		}
		w.mu.Lock()
		w.blind = true
		w.mu.Unlock()
		w.log.Warn().Err(err).Msg("cannot tell whether Redis may evict keys: the credential may run neither INFO nor CONFIG GET (grant +info)")
		return "", err
	}
	w.mu.Lock()
	prev := w.policy
	w.policy = p
	w.mu.Unlock()
	if p == prev {
		return p, nil
	}
	if prev != "" {
		w.gauge.DeleteLabelValues(prev)
	}
	w.gauge.WithLabelValues(p).Set(1)
	switch {
	case p != broker.NoEviction:
		w.log.Warn().Str("maxmemoryPolicy", p).Msg("Redis may evict keys: " + evictionRisk)
	case prev != "":
		w.log.Info().Str("maxmemoryPolicy", p).Msg("Redis no longer evicts keys")
	}
	return p, nil
}

// current is the last policy read. It is "" before the first read or when it cannot be read.
func (w *evictionWatch) current() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.policy
}

// required turns the policy read at start into Run's refusal when it is not noeviction.
func required(p string, err error) error {
	if err != nil {
		return fmt.Errorf("%w: cannot read maxmemory-policy (needed by RequireNoEviction): %w", ErrEvictionPolicy, err)
	}
	if p != broker.NoEviction {
		return fmt.Errorf("%w: maxmemory-policy is %s: %s", ErrEvictionPolicy, p, evictionRisk)
	}
	return nil
}
