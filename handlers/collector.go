package handlers

import (
	"context"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"

	"github.com/flightdeck-ai/flightdeck/topics"
)

// redisCollector reports gauges read from Redis at scrape time: pending entries per consumer
// process, backlog and DLQ length per stage, and parked followers per stage. Reads are cached
// for cacheFor so that several scrapers do not multiply the load. Every read names its key with
// XPENDING, XINFO GROUPS or XLEN per stream. Nothing enumerates keys, so the consumer needs no
// SCAN, which an ACL cannot limit to its own prefix.
type redisCollector struct {
	rdb      redis.UniversalClient
	ks       topics.Keyspace
	stages   []string
	cacheFor time.Duration

	pending, backlog, dlq, parked *prometheus.Desc

	mu      sync.Mutex
	at      time.Time
	metrics []prometheus.Metric
}

func newRedisCollector(rdb redis.UniversalClient, ks topics.Keyspace, stages []string) *redisCollector {
	return &redisCollector{rdb: rdb, ks: ks, stages: stages, cacheFor: 5 * time.Second,
		pending: prometheus.NewDesc("flightdeck_pending_entries",
			"Task entries delivered to a consumer process and not yet acknowledged.", []string{"stage", "consumer"}, nil),
		backlog: prometheus.NewDesc("flightdeck_backlog_entries",
			"Task entries not yet delivered to any consumer (consumer group lag).", []string{"stage"}, nil),
		dlq: prometheus.NewDesc("flightdeck_dlq_length", "Entries in the stage's dead-letter stream.", []string{"stage"}, nil),
		parked: prometheus.NewDesc("flightdeck_parked_followers",
			"Tasks parked on running flights: their entries pending under the parking consumer.", []string{"stage"}, nil),
	}
}

func (c *redisCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.pending
	ch <- c.backlog
	ch <- c.dlq
	ch <- c.parked
}

func (c *redisCollector) Collect(ch chan<- prometheus.Metric) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if time.Since(c.at) > c.cacheFor {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		c.metrics = c.read(ctx)
		cancel()
		c.at = time.Now()
	}
	for _, m := range c.metrics {
		ch <- m
	}
}

func (c *redisCollector) read(ctx context.Context) []prometheus.Metric {
	var out []prometheus.Metric
	gauge := func(d *prometheus.Desc, v float64, labels ...string) {
		out = append(out, prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, labels...))
	}
	for _, stage := range c.stages {
		perProc := map[string]int64{}
		var backlog, parked int64
		parkedOK := true
		for _, tasks := range c.ks.TaskStreams(stage) {
			// A parked task is a pending entry of the parking consumer, as DESIGN.md section 2
			// describes under "Parked tasks". The XPENDING summary counts them per stream.
			p, err := c.rdb.XPending(ctx, tasks, topics.ConsumerGroup).Result()
			switch {
			case err == nil:
				for name, n := range p.Consumers {
					perProc[processOf(name)] += n
				}
				parked += p.Consumers[topics.ParkingConsumer]
			case !noGroup(err):
				parkedOK = false
			}
			if groups, err := c.rdb.XInfoGroups(ctx, tasks).Result(); err == nil {
				for _, g := range groups {
					if g.Name == topics.ConsumerGroup && g.Lag > 0 {
						backlog += g.Lag
					}
				}
			}
		}
		for proc, n := range perProc {
			gauge(c.pending, float64(n), stage, proc)
		}
		gauge(c.backlog, float64(backlog), stage)
		if n, err := c.rdb.XLen(ctx, c.ks.DLQ(stage)).Result(); err == nil {
			gauge(c.dlq, float64(n), stage)
		}
		if parkedOK {
			gauge(c.parked, float64(parked), stage)
		}
	}
	return out
}

// noGroup reports the error of XPENDING on a stream or group that does not exist yet: no
// entry is pending there.
func noGroup(err error) bool {
	return err != nil && strings.HasPrefix(err.Error(), "NOGROUP")
}
