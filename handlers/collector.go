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
// for cacheFor so that several scrapers do not multiply the load; the parked-follower count
// scans at most maxScan keys per stage and is a lower bound beyond that.
type redisCollector struct {
	rdb      redis.UniversalClient
	ks       topics.Keyspace
	stages   []string
	cacheFor time.Duration
	maxScan  int

	pending, backlog, dlq, parked *prometheus.Desc

	mu      sync.Mutex
	at      time.Time
	metrics []prometheus.Metric
}

func newRedisCollector(rdb redis.UniversalClient, ks topics.Keyspace, stages []string) *redisCollector {
	return &redisCollector{rdb: rdb, ks: ks, stages: stages, cacheFor: 5 * time.Second, maxScan: 10000,
		pending: prometheus.NewDesc("flightdeck_pending_entries",
			"Task entries delivered to a consumer process and not yet acknowledged.", []string{"stage", "consumer"}, nil),
		backlog: prometheus.NewDesc("flightdeck_backlog_entries",
			"Task entries not yet delivered to any consumer (consumer group lag).", []string{"stage"}, nil),
		dlq: prometheus.NewDesc("flightdeck_dlq_length", "Entries in the stage's dead-letter stream.", []string{"stage"}, nil),
		parked: prometheus.NewDesc("flightdeck_parked_followers",
			"Tasks parked on running flights (a lower bound past 10,000 flights).", []string{"stage"}, nil),
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
		var backlog int64
		for _, tasks := range c.ks.TaskStreams(stage) {
			if p, err := c.rdb.XPending(ctx, tasks, topics.ConsumerGroup).Result(); err == nil {
				for name, n := range p.Consumers {
					perProc[ProcessOf(name)] += n
				}
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
		if n, err := c.parkedFollowers(ctx, stage); err == nil {
			gauge(c.parked, float64(n), stage)
		}
	}
	return out
}

// parkedFollowers sums the sizes of the stage's waiter hashes, scanning at most maxScan keys.
func (c *redisCollector) parkedFollowers(ctx context.Context, stage string) (int64, error) {
	prefix := strings.TrimSuffix(c.ks.Waiters("x"), "{x}")
	var (
		mu   sync.Mutex
		keys []string
	)
	scan := func(ctx context.Context, node redis.UniversalClient) error {
		it := node.Scan(ctx, 0, prefix+"{ai:"+stage+":*", 1000).Iterator()
		for it.Next(ctx) {
			mu.Lock()
			full := len(keys) >= c.maxScan
			if !full {
				keys = append(keys, it.Val())
			}
			mu.Unlock()
			if full {
				break
			}
		}
		return it.Err()
	}
	var err error
	if cc, ok := c.rdb.(*redis.ClusterClient); ok {
		err = cc.ForEachMaster(ctx, func(ctx context.Context, n *redis.Client) error { return scan(ctx, n) })
	} else {
		err = scan(ctx, c.rdb)
	}
	if err != nil {
		return 0, err
	}
	var total int64
	for start := 0; start < len(keys); start += 500 {
		cmds, err := c.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
			for _, k := range keys[start:min(start+500, len(keys))] {
				p.HLen(ctx, k)
			}
			return nil
		})
		if err != nil {
			return 0, err
		}
		for _, cmd := range cmds {
			total += cmd.(*redis.IntCmd).Val()
		}
	}
	return total, nil
}
