package handlers

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/redis/go-redis/v9"

	"github.com/flightdeck-ai/flightdeck/topics"
)

// statsInterval is how often a consumer adds what it answered to the fleet's per-minute stats
// hashes, topics.Keyspace.Stats.
const statsInterval = 2 * time.Second

// statsCounts is what one stage's collectors counted: cumulative, as Prometheus keeps them.
type statsCounts struct {
	outcomes map[string]float64 // flightdeck_task_events_total by outcome
	buckets  []float64          // flightdeck_end_to_end_seconds cumulative counts by bucket
	bounds   []float64          // the buckets' upper bounds
	count    uint64
	sumSec   float64
}

// statsRecorder turns the consumer's task-event counter and end-to-end histogram into the
// fleet's per-minute stats. Every flush adds, per stage, what grew since the last flush to the
// hash of the current minute and renews its TTL. It uses HINCRBY in one pipeline for every
// stage. It reads the collectors the handlers feed anyway, so the hot path pays nothing. A
// flush that fails is retried with the next one: nothing is lost, but the minute may shift.
type statsRecorder struct {
	rdb     redis.UniversalClient
	ks      topics.Keyspace
	metrics *metrics
	now     func() time.Time
	last    map[string]statsCounts // per stage, as of the last successful flush
	// lastLedger is the ledger's counts per stage and tenant as of the last successful flush.
	lastLedger map[string]map[string]topics.LedgerCounts
}

func newStatsRecorder(rdb redis.UniversalClient, ks topics.Keyspace, m *metrics) *statsRecorder {
	return &statsRecorder{rdb: rdb, ks: ks, metrics: m, now: time.Now, last: map[string]statsCounts{},
		lastLedger: map[string]map[string]topics.LedgerCounts{}}
}

// statsLoop flushes the consumer's stats every statsInterval until ctx ends, then once more.
func (c *Consumer) statsLoop(ctx context.Context) {
	r := newStatsRecorder(c.rdb, c.cfg.Keyspace, c.metrics)
	t := time.NewTicker(statsInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			fctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			defer cancel()
			if err := r.flush(fctx); err != nil {
				c.log.Debug().Err(err).Msg("last stats flush failed")
			}
			return
		case <-t.C:
		}
		fctx, cancel := context.WithTimeout(ctx, statsInterval)
		if err := r.flush(fctx); err != nil {
			c.log.Debug().Err(err).Msg("stats flush failed; retrying with the next one")
		}
		cancel()
	}
}

// flush adds what the collectors and the ledger counted since the last flush to the current
// minute's hash of each stage, and the ledger's counts to the current hour's hash too.
func (r *statsRecorder) flush(ctx context.Context) error {
	cur := r.collect()
	ledger := r.collectLedger()
	now := r.now().Unix()
	minute, hour := now/60, now/3600
	type incr struct {
		key    string
		ttl    time.Duration
		fields map[string]int64
	}
	var incrs []incr
	stages := make(map[string]bool, len(cur)+len(ledger))
	for stage := range cur {
		stages[stage] = true
	}
	for stage := range ledger {
		stages[stage] = true
	}
	for stage := range stages {
		fields := diffCounts(r.last[stage], cur[stage])
		lf := diffLedger(r.lastLedger[stage], ledger[stage])
		for f, n := range lf {
			fields[f] = n
		}
		if len(fields) > 0 {
			incrs = append(incrs, incr{r.ks.Stats(stage, minute), topics.StatsRetention, fields})
		}
		if len(lf) > 0 {
			incrs = append(incrs, incr{r.ks.StatsHour(stage, hour), topics.StatsHourRetention, lf})
		}
	}
	if len(incrs) == 0 {
		return nil
	}
	_, err := r.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		for _, in := range incrs {
			for f, n := range in.fields {
				p.HIncrBy(ctx, in.key, f, n)
			}
			p.Expire(ctx, in.key, in.ttl)
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("handlers: stats flush: %w", err)
	}
	r.last, r.lastLedger = cur, ledger
	return nil
}

// collectLedger reads the ledger's counts per stage and tenant.
func (r *statsRecorder) collectLedger() map[string]map[string]topics.LedgerCounts {
	l := r.metrics.ledger
	l.mu.RLock()
	defer l.mu.RUnlock()
	out := make(map[string]map[string]topics.LedgerCounts, len(l.stages))
	for name, s := range l.stages {
		out[name] = s.snapshot()
	}
	return out
}

// diffLedger returns the non-zero stats hash increments of one stage's ledger from prev to cur.
func diffLedger(prev, cur map[string]topics.LedgerCounts) map[string]int64 {
	out := map[string]int64{}
	for tenant, c := range cur {
		p := prev[tenant]
		for i, name := range topics.LedgerNames {
			if d := *c.Counter(i) - *p.Counter(i); d > 0 {
				out[topics.LedgerField(tenant, name)] = d
			}
		}
	}
	return out
}

// diffCounts returns the non-zero hash increments from prev to cur.
func diffCounts(prev, cur statsCounts) map[string]int64 {
	out := map[string]int64{}
	for o, v := range cur.outcomes {
		if d := int64(math.Round(v - prev.outcomes[o])); d > 0 {
			out[topics.StatsOutcomePrefix+o] = d
		}
	}
	var below, prevBelow float64
	for i, cum := range cur.buckets {
		pc := 0.0
		if i < len(prev.buckets) {
			pc = prev.buckets[i]
		}
		if d := int64(math.Round((cum - below) - (pc - prevBelow))); d > 0 {
			out[topics.StatsBucketPrefix+boundName(cur.bounds[i])] = d
		}
		below, prevBelow = cum, pc
	}
	if d := int64(cur.count - prev.count); d > 0 {
		out[topics.StatsCount] = d
		out[topics.StatsSumMs] = int64(math.Round((cur.sumSec - prev.sumSec) * 1000))
	}
	return out
}

// boundName names a bucket's upper bound as the stats hash does: "0.25", "+Inf".
func boundName(b float64) string {
	if math.IsInf(b, 1) {
		return "+Inf"
	}
	return strconv.FormatFloat(b, 'g', -1, 64)
}

// collect reads the cumulative task events and end-to-end latencies per stage.
func (r *statsRecorder) collect() map[string]statsCounts {
	out := map[string]statsCounts{}
	get := func(stage string) statsCounts {
		c, ok := out[stage]
		if !ok {
			c = statsCounts{outcomes: map[string]float64{}}
		}
		return c
	}
	for _, m := range gather(r.metrics.tasks) {
		stage, outcome := label(m, "stage"), label(m, "outcome")
		c := get(stage)
		c.outcomes[outcome] += m.GetCounter().GetValue()
		out[stage] = c
	}
	for _, m := range gather(r.metrics.endToEnd) {
		stage, h := label(m, "stage"), m.GetHistogram()
		c := get(stage)
		c.buckets, c.bounds = c.buckets[:0], c.bounds[:0]
		for _, b := range h.GetBucket() {
			c.buckets = append(c.buckets, float64(b.GetCumulativeCount()))
			c.bounds = append(c.bounds, b.GetUpperBound())
		}
		// The +Inf bucket is implicit in Prometheus: the sample count.
		c.buckets = append(c.buckets, float64(h.GetSampleCount()))
		c.bounds = append(c.bounds, math.Inf(1))
		c.count, c.sumSec = h.GetSampleCount(), h.GetSampleSum()
		out[stage] = c
	}
	return out
}

// gather returns the metrics a collector holds now.
func gather(c prometheus.Collector) []*dto.Metric {
	ch := make(chan prometheus.Metric, 64)
	go func() { c.Collect(ch); close(ch) }()
	var out []*dto.Metric
	for m := range ch {
		var d dto.Metric
		if m.Write(&d) == nil {
			out = append(out, &d)
		}
	}
	return out
}

func label(m *dto.Metric, name string) string {
	for _, l := range m.GetLabel() {
		if l.GetName() == name {
			return l.GetValue()
		}
	}
	return ""
}

// pauseCheck reports whether stage is paused, which is when its field in the Paused hash
// exists. It serves as the stream subscriber's Paused, which the subscriber asks at most once a
// second.
func pauseCheck(rdb redis.UniversalClient, ks topics.Keyspace, stage string) func(context.Context) (bool, error) {
	key := ks.Paused()
	return func(ctx context.Context) (bool, error) {
		ok, err := rdb.HExists(ctx, key, stage).Result()
		if err != nil && !errors.Is(err, redis.Nil) {
			return false, fmt.Errorf("handlers: pause state of %s: %w", stage, err)
		}
		return ok, nil
	}
}
