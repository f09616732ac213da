package executor

import (
	"errors"
	"fmt"

	"github.com/prometheus/client_golang/prometheus"
)

// Metrics are the Executor's Prometheus collectors, named after the original design. Labels
// stay bounded: stage and kind only, never a key.
type Metrics struct {
	distributedRequest *prometheus.CounterVec
	distributedFailure *prometheus.CounterVec
	localFallback      *prometheus.CounterVec
	localOwner         *prometheus.CounterVec
	localWaiter        *prometheus.CounterVec
	fallbackExecution  *prometheus.CounterVec
	circuitOpen        prometheus.Counter
	unknownAction      *prometheus.CounterVec
	waitTimeout        *prometheus.CounterVec
	resultWriteFailure *prometheus.CounterVec
	degraded           *prometheus.GaugeVec
	breakerState       prometheus.Gauge
	spooled            prometheus.Gauge
}

// NewMetrics creates the collectors and registers them with reg. A nil reg registers nothing.
func NewMetrics(reg prometheus.Registerer) *Metrics {
	cv := func(name, help string, labels ...string) *prometheus.CounterVec {
		return prometheus.NewCounterVec(prometheus.CounterOpts{Name: name, Help: help}, labels)
	}
	m := &Metrics{
		distributedRequest: cv("singleflight_distributed_request_total", "Calls coordinated through Redis (L2).", "stage"),
		distributedFailure: cv("singleflight_distributed_failure_total",
			"Coordination calls that failed, by kind (unavailable, protocol, breaker_open).", "stage", "kind"),
		localFallback: cv("singleflight_local_fallback_total",
			"Calls that fell back to in-process single-flight because coordination failed.", "stage"),
		localOwner:  cv("singleflight_local_owner_total", "L1 leaders: calls that ran the flight for their process.", "stage"),
		localWaiter: cv("singleflight_local_waiter_total", "L1 waiters: calls that shared a leader's flight in-process.", "stage"),
		fallbackExecution: cv("singleflight_fallback_execution_total",
			"Model runs executed in degraded (local) mode.", "stage"),
		circuitOpen: prometheus.NewCounter(prometheus.CounterOpts{Name: "singleflight_circuit_open_total",
			Help: "Times the coordination circuit breaker opened."}),
		unknownAction: cv("singleflight_unknown_action_total",
			"Coordination replies the executor did not understand (protocol errors).", "stage"),
		waitTimeout: cv("singleflight_wait_timeout_total",
			"Followers whose wait timed out and who re-acquired.", "stage"),
		resultWriteFailure: ResultWriteFailures(nil),
		degraded: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "singleflight_degraded",
			Help: "1 while the stage runs in degraded (local) mode on this node."}, []string{"stage"}),
		breakerState: prometheus.NewGauge(prometheus.GaugeOpts{Name: "singleflight_breaker_state",
			Help: "Coordination circuit breaker: 0 closed, 1 half-open, 2 open."}),
		spooled: prometheus.NewGauge(prometheus.GaugeOpts{Name: "singleflight_spooled_outcomes",
			Help: "Uncertain outcomes waiting in the local spool to be written back."}),
	}
	if reg != nil {
		reg.MustRegister(m.distributedRequest, m.distributedFailure, m.localFallback, m.localOwner, m.localWaiter,
			m.fallbackExecution, m.circuitOpen, m.unknownAction, m.waitTimeout, m.degraded, m.breakerState, m.spooled)
		m.resultWriteFailure = ResultWriteFailures(reg)
	}
	return m
}

// ResultWriteFailures returns the counter singleflight_result_write_failure_total{stage},
// registered with reg unless reg is nil. It counts model results that could not be stored:
// uncertain outcomes, spooled. Executors and consumers count on the same counter: when reg
// holds it already, that one is returned, so both can share one registry.
func ResultWriteFailures(reg prometheus.Registerer) *prometheus.CounterVec {
	c := prometheus.NewCounterVec(prometheus.CounterOpts{Name: "singleflight_result_write_failure_total",
		Help: "Model results that could not be stored (uncertain outcomes, spooled for write-back)."}, []string{"stage"})
	if reg == nil {
		return c
	}
	if err := reg.Register(c); err != nil {
		var are prometheus.AlreadyRegisteredError
		if errors.As(err, &are) {
			if existing, ok := are.ExistingCollector.(*prometheus.CounterVec); ok {
				return existing
			}
		}
		panic(fmt.Errorf("executor: register singleflight_result_write_failure_total: %w", err))
	}
	return c
}
