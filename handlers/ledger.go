package handlers

import (
	"sync"
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/flightdeck-ai/flightdeck/flight"
	"github.com/flightdeck-ai/flightdeck/handlers/model"
	"github.com/flightdeck-ai/flightdeck/topics"
)

// The savings ledger, described in DESIGN.md section 10. Each consumer counts, per stage and
// tenant, how it answered tasks and what its model calls used, in memory. The stats recorder
// adds what grew to the fleet's stats hashes every 2 s, and Prometheus reads the counts as the
// flightdeck_ledger_* counters.

// ledger holds the counts of every stage of one consumer.
type ledger struct {
	mu     sync.RWMutex
	stages map[string]*stageLedger
	descs  ledgerDescs
}

// stageLedger holds one stage's counts, per tenant, and prices its usage.
type stageLedger struct {
	name   string
	prices Prices
	model  string // the model a usage without one is priced as
	mu     sync.RWMutex
	rows   map[string]*ledgerRow
}

// ledgerRow is one stage's and tenant's counts, added to with atomics.
type ledgerRow struct{ c topics.LedgerCounts }

func newLedger() *ledger { return &ledger{stages: map[string]*stageLedger{}, descs: newLedgerDescs()} }

// stage returns the ledger of stage name, made with prices and the stage's model on first use.
func (l *ledger) stage(name string, prices Prices, model string) *stageLedger {
	l.mu.Lock()
	defer l.mu.Unlock()
	s := l.stages[name]
	if s == nil {
		s = &stageLedger{name: name, rows: map[string]*ledgerRow{}}
		l.stages[name] = s
	}
	s.prices, s.model = prices, model
	return s
}

// row returns tenant's counts. Past topics.MaxLedgerTenants tenants, a new one is counted under
// topics.LedgerOther. A nil stage ledger counts nothing: its row is nil.
func (s *stageLedger) row(tenant string) *ledgerRow {
	if s == nil {
		return nil
	}
	s.mu.RLock()
	r := s.rows[tenant]
	s.mu.RUnlock()
	if r != nil {
		return r
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if r = s.rows[tenant]; r != nil {
		return r
	}
	if len(s.rows) >= topics.MaxLedgerTenants || !ledgerTenant(tenant) {
		tenant = topics.LedgerOther
		if r = s.rows[tenant]; r != nil {
			return r
		}
	}
	r = &ledgerRow{}
	s.rows[tenant] = r
	return r
}

// ledgerTenant reports whether tenant may name a row: a tenant as semantic keys allow them.
func ledgerTenant(tenant string) bool {
	if tenant == "" || len(tenant) > 64 {
		return false
	}
	for i := 0; i < len(tenant); i++ {
		c := tenant[i]
		if (c < 'a' || c > 'z') && (c < '0' || c > '9') && c != '_' && c != '-' {
			return false
		}
	}
	return true
}

// snapshot returns every row's counts, by tenant.
func (s *stageLedger) snapshot() map[string]topics.LedgerCounts {
	s.mu.RLock()
	defer s.mu.RUnlock()
	out := make(map[string]topics.LedgerCounts, len(s.rows))
	for t, r := range s.rows {
		var c topics.LedgerCounts
		for i := range topics.LedgerNames {
			*c.Counter(i) = atomic.LoadInt64(r.c.Counter(i))
		}
		out[t] = c
	}
	return out
}

// rateLimited reports whether a model call's error is the provider's 429.
func rateLimited(err error) bool {
	return err != nil && model.Classify(err).Type == model.TypeRateLimited
}

// stageModel is the model a stage's usage is priced as when its call reported none: the
// stage's openai.model, else the model the adapter asks for (OPENAI_MODEL), else "".
func stageModel(s StageConfig, mdl model.Model) string {
	if s.OpenAI != nil && s.OpenAI.Model != "" {
		return s.OpenAI.Model
	}
	if m, ok := mdl.(interface{ Model() string }); ok {
		return m.Model()
	}
	return ""
}

// The paths a task is answered by, as the ledger counts them.
type ledgerPath int

const (
	pathOwner ledgerPath = iota
	pathJoined
	pathFollower
	pathHit
	pathArchive
	pathLocal
)

// pathOf is the ledger path of a task answered with an event labelled shared.
func pathOf(shared topics.Shared) ledgerPath {
	switch shared {
	case topics.SharedOwner:
		return pathOwner
	case topics.SharedHit:
		return pathHit
	case topics.SharedArchive:
		return pathArchive
	case topics.SharedLocal:
		return pathLocal
	}
	return pathFollower
}

// answered counts n tasks of tenant answered by path with status. A successful answer that made
// no call of its own avoided what the call that produced it used, u, once per task.
func (s *stageLedger) answered(tenant string, path ledgerPath, n int, status topics.Status, u *flight.Usage) {
	r := s.row(tenant)
	if r == nil || n <= 0 {
		return
	}
	atomic.AddInt64(r.c.Counter(int(path)), int64(n))
	if u == nil || status != topics.StatusSucceeded || path == pathOwner || path == pathLocal {
		return
	}
	k := int64(n)
	atomic.AddInt64(&r.c.AvoidedPromptTokens, k*int64(u.PromptTokens))
	atomic.AddInt64(&r.c.AvoidedCompletionTokens, k*int64(u.CompletionTokens))
	if cost := s.prices.nanoUSD(*u, s.model); cost > 0 {
		atomic.AddInt64(&r.c.AvoidedNanoUSD, k*cost)
	}
}

// called counts a model call of tenant's, and whether the provider refused it with a 429.
func (s *stageLedger) called(tenant string, rateLimited bool) {
	r := s.row(tenant)
	if r == nil {
		return
	}
	atomic.AddInt64(&r.c.Calls, 1)
	if rateLimited {
		atomic.AddInt64(&r.c.RateLimited, 1)
	}
}

// spent counts what a call of tenant's used, as its provider reported it.
func (s *stageLedger) spent(tenant string, u *flight.Usage) {
	r := s.row(tenant)
	if r == nil || u == nil {
		return
	}
	atomic.AddInt64(&r.c.PromptTokens, int64(u.PromptTokens))
	atomic.AddInt64(&r.c.CompletionTokens, int64(u.CompletionTokens))
	if cost := s.prices.nanoUSD(*u, s.model); cost > 0 {
		atomic.AddInt64(&r.c.SpentNanoUSD, cost)
	}
}

// waited counts an owner call of tenant's that a limiter made wait.
func (s *stageLedger) waited(tenant string) {
	if r := s.row(tenant); r != nil {
		atomic.AddInt64(&r.c.LimiterWaits, 1)
	}
}

// ledgerDescs are the Prometheus descriptions of the ledger's counters.
type ledgerDescs struct {
	tasks, calls, limited, waits, tokens, avoided, cost *prometheus.Desc
}

func newLedgerDescs() ledgerDescs {
	st := []string{"stage", "tenant"}
	kind := []string{"stage", "tenant", "kind"}
	return ledgerDescs{
		tasks: prometheus.NewDesc("flightdeck_ledger_tasks_total",
			"Tasks answered, by stage, tenant and path: owner, joined, follower, hit, archive or local.",
			[]string{"stage", "tenant", "path"}, nil),
		calls:   prometheus.NewDesc("flightdeck_ledger_model_calls_total", "Model calls made, by stage and tenant.", st, nil),
		limited: prometheus.NewDesc("flightdeck_ledger_rate_limited_total", "Model calls the provider refused with a 429, by stage and tenant.", st, nil),
		waits:   prometheus.NewDesc("flightdeck_ledger_limiter_waits_total", "Owner calls a limiter made wait, by stage and tenant.", st, nil),
		tokens: prometheus.NewDesc("flightdeck_ledger_tokens_total",
			"Tokens the model calls used, as their providers reported them (kind: prompt, completion).", kind, nil),
		avoided: prometheus.NewDesc("flightdeck_ledger_avoided_tokens_total",
			"Tokens avoided: the usage of the calls whose results answered other tasks, once per such task (kind: prompt, completion).", kind, nil),
		cost: prometheus.NewDesc("flightdeck_ledger_cost_usd_total",
			"What the model calls cost by the stage file's prices, in US dollars (kind: spent, avoided).", kind, nil),
	}
}

// Describe implements prometheus.Collector.
func (l *ledger) Describe(ch chan<- *prometheus.Desc) {
	d := l.descs
	for _, d := range []*prometheus.Desc{d.tasks, d.calls, d.limited, d.waits, d.tokens, d.avoided, d.cost} {
		ch <- d
	}
}

// Collect implements prometheus.Collector: the counts of every stage and tenant.
func (l *ledger) Collect(ch chan<- prometheus.Metric) {
	l.mu.RLock()
	stages := make([]*stageLedger, 0, len(l.stages))
	for _, s := range l.stages {
		stages = append(stages, s)
	}
	l.mu.RUnlock()
	counter := func(d *prometheus.Desc, v int64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, float64(v), labels...)
	}
	d := l.descs
	for _, s := range stages {
		for tenant, c := range s.snapshot() {
			st := s.name
			for i, path := range topics.LedgerNames[:int(pathLocal)+1] {
				counter(d.tasks, *c.Counter(i), st, tenant, path)
			}
			counter(d.calls, c.Calls, st, tenant)
			counter(d.limited, c.RateLimited, st, tenant)
			counter(d.waits, c.LimiterWaits, st, tenant)
			counter(d.tokens, c.PromptTokens, st, tenant, "prompt")
			counter(d.tokens, c.CompletionTokens, st, tenant, "completion")
			counter(d.avoided, c.AvoidedPromptTokens, st, tenant, "prompt")
			counter(d.avoided, c.AvoidedCompletionTokens, st, tenant, "completion")
			ch <- prometheus.MustNewConstMetric(d.cost, prometheus.CounterValue, float64(c.SpentNanoUSD)/1e9, st, tenant, "spent")
			ch <- prometheus.MustNewConstMetric(d.cost, prometheus.CounterValue, float64(c.AvoidedNanoUSD)/1e9, st, tenant, "avoided")
		}
	}
}
