package handlers

import (
	"github.com/flightdeck-ai/flightdeck/executor"
	"github.com/prometheus/client_golang/prometheus"
)

// metrics are the consumer's Prometheus collectors. Label sets stay bounded: stage, outcome
// and reason only, never a key or a task id.
type metrics struct {
	tasks        *prometheus.CounterVec
	modelCalls   *prometheus.CounterVec
	deadLetters  *prometheus.CounterVec
	running      *prometheus.GaugeVec
	joined       *prometheus.GaugeVec
	queueWait    *prometheus.HistogramVec
	runTime      *prometheus.HistogramVec
	endToEnd     *prometheus.HistogramVec
	followerWait *prometheus.HistogramVec
	spooled      *prometheus.CounterVec
	breaker      prometheus.Gauge
	scheduled    *prometheus.CounterVec
	eviction     *prometheus.GaugeVec
	unreplicated *prometheus.CounterVec
	limiterWaits *prometheus.CounterVec
	limitFactor  *prometheus.GaugeVec
	tokens       *prometheus.CounterVec
	ledger       *ledger
}

// newMetrics creates the collectors and registers them with reg, unless reg is nil.
func newMetrics(reg prometheus.Registerer) *metrics {
	buckets := []float64{.005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60, 120, 300, 900}
	m := &metrics{
		tasks: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "flightdeck_task_events_total",
			Help: "Terminal events published and tasks parked, by stage and outcome (<shared>_<status> or parked)."},
			[]string{"stage", "outcome"}),
		modelCalls: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "flightdeck_model_calls_total",
			Help: "Model calls started by owners."}, []string{"stage"}),
		deadLetters: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "flightdeck_dead_letters_total",
			Help: "Task entries sent to the dead-letter stream, by reason."}, []string{"stage", "reason"}),
		running: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "flightdeck_running_owners",
			Help: "Model calls running in this consumer."}, []string{"stage"}),
		joined: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "flightdeck_joined_waiting",
			Help: "Tasks waiting in this consumer for the owner of their key running here (joined, holding a handler)."},
			[]string{"stage"}),
		queueWait: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "flightdeck_queue_wait_seconds",
			Help: "Time from the task's stream entry (Redis's clock; its notBefore when later) to the first handler run.", Buckets: buckets}, []string{"stage"}),
		runTime: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "flightdeck_owner_run_seconds",
			Help: "Model call time of owners.", Buckets: buckets}, []string{"stage"}),
		endToEnd: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "flightdeck_end_to_end_seconds",
			Help: "Time from the task's stream entry to its terminal event, for tasks answered by this consumer.", Buckets: buckets},
			[]string{"stage"}),
		followerWait: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "flightdeck_follower_wait_seconds",
			Help: "Time a follower waited for its flight's outcome (park, or joining an owner in its consumer, to event).", Buckets: buckets},
			[]string{"stage"}),
		breaker: prometheus.NewGauge(prometheus.GaugeOpts{Name: "flightdeck_breaker_state",
			Help: "The consumer's coordination circuit breaker: 0 closed, 1 half-open, 2 open."}),
		spooled: executor.ResultWriteFailures(nil),
		scheduled: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "flightdeck_scheduled_tasks_total",
			Help: "Tasks put in the stage's scheduled set (why: not_before, retry, limiter) and moved back to its stream (why: due)."},
			[]string{"stage", "why"}),
		eviction: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "flightdeck_redis_maxmemory_policy",
			Help: "Redis's maxmemory-policy as the consumer last read it (1 for that policy); any but noeviction may drop keys."},
			[]string{"policy"}),
		unreplicated: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "flightdeck_unreplicated_calls_total",
			Help: "Claims (op acquire, given up) and outcomes (complete, fail) of replicated stages that no replica acknowledged in time."},
			[]string{"stage", "op"}),
		limiterWaits: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "flightdeck_limiter_waits_total",
			Help: "Owner calls a limiter made wait, holding no handler (why: held, concurrency, requests, tokens, share)."},
			[]string{"stage", "limiter", "why"}),
		limitFactor: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "flightdeck_limiter_factor",
			Help: "The factor on a limiter's rates: 1, lowered by the provider's 429s and raised back by successes."},
			[]string{"limiter"}),
		tokens: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "flightdeck_model_tokens_total",
			Help: "Tokens the owners' model calls used, as the provider reported them (kind: prompt, completion)."},
			[]string{"stage", "kind"}),
		ledger: newLedger(),
	}
	if reg != nil {
		reg.MustRegister(m.tasks, m.modelCalls, m.deadLetters, m.running, m.joined, m.queueWait, m.runTime, m.endToEnd, m.followerWait,
			m.breaker, m.scheduled, m.eviction, m.unreplicated, m.limiterWaits, m.limitFactor, m.tokens, m.ledger)
		m.spooled = executor.ResultWriteFailures(reg) // shared with an Executor on reg
	}
	return m
}
