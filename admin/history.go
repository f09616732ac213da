package admin

import (
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"sort"
	"strconv"
	"strings"

	"github.com/redis/go-redis/v9"

	"github.com/flightdeck-ai/flightdeck/topics"
)

// MaxHistoryMinutes bounds the minutes one history read covers. It is about what the
// per-minute stats hashes keep, topics.StatsRetention.
const MaxHistoryMinutes = 60

// MinuteStats is what the fleet answered for one stage in one minute.
type MinuteStats struct {
	// Minute is the minute's start, Unix seconds.
	Minute int64 `json:"minute"`
	// Outcomes counts the tasks answered by outcome: "<shared>_<status>", such as
	// owner_SUCCEEDED, follower_FAILED or hit_SUCCEEDED, and "parked".
	Outcomes map[string]int64 `json:"outcomes,omitempty"`
	// Total counts the terminal events, every outcome but parked.
	Total int64 `json:"total"`
	// Count is the number of end-to-end latencies recorded. P50Ms, P99Ms and MeanMs are
	// computed from their histogram buckets, and are -1 when Count is 0.
	Count  int64 `json:"count"`
	P50Ms  int64 `json:"p50Ms"`
	P99Ms  int64 `json:"p99Ms"`
	MeanMs int64 `json:"meanMs"`
}

// StageHistory is one stage's last minutes, oldest first, the current partial minute last.
type StageHistory struct {
	// Stage is the stage and Minutes its minutes, each one present.
	Stage   string        `json:"stage"`
	Minutes []MinuteStats `json:"minutes"`
}

// History reads the per-minute stats that the fleet's consumers flush into Redis at
// topics.Keyspace.Stats, for the last minutes of the given stages or of all stages when none
// are given. It covers at most MaxHistoryMinutes, the current one included, and fills
// minutes without data with zero counts, so that every stage has the same minutes.
func (in *Inspector) History(ctx context.Context, stages []string, minutes int) ([]StageHistory, error) {
	if minutes <= 0 || minutes > MaxHistoryMinutes {
		minutes = MaxHistoryMinutes
	}
	if len(stages) == 0 {
		stages = in.Stages(ctx)
	}
	known := in.Stages(ctx)
	for _, s := range stages {
		if !slices.Contains(known, s) {
			return nil, fmt.Errorf("admin: history: %w: stage %q", ErrNotFound, s)
		}
	}
	now, err := in.rdb.Time(ctx).Result()
	if err != nil {
		return nil, fmt.Errorf("admin: history: %w", err)
	}
	last := now.Unix() / 60
	first := last - int64(minutes) + 1
	hashes, err := in.statsHashes(ctx, stages, first, last)
	if err != nil {
		return nil, fmt.Errorf("admin: history: %w", err)
	}
	out := make([]StageHistory, len(stages))
	for i, s := range stages {
		out[i] = StageHistory{Stage: s, Minutes: make([]MinuteStats, 0, minutes)}
		for j, h := range hashes[i] {
			out[i].Minutes = append(out[i].Minutes, minuteStats((first+int64(j))*60, h))
		}
	}
	return out, nil
}

// statsHashes reads the stats hashes of the minutes first to last of every stage, in one
// pipeline. out[i][j] is stage i's minute first+j, empty when it has none.
func (in *Inspector) statsHashes(ctx context.Context, stages []string, first, last int64) ([][]map[string]string, error) {
	cmds := make([][]*redis.MapStringStringCmd, len(stages))
	_, err := in.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		for i, s := range stages {
			for m := first; m <= last; m++ {
				cmds[i] = append(cmds[i], p.HGetAll(ctx, in.ks.Stats(s, m)))
			}
		}
		return nil
	})
	if err != nil && !errors.Is(err, redis.Nil) {
		return nil, err
	}
	out := make([][]map[string]string, len(stages))
	for i := range stages {
		for _, c := range cmds[i] {
			out[i] = append(out[i], c.Val())
		}
	}
	return out, nil
}

// minuteCounts is one stats hash decoded: at most maxOutcomes outcomes and buckets, leaving
// out the fields that are not positive integers.
type minuteCounts struct {
	outcomes     map[string]int64 // by "<shared>_<status>" and "parked"
	buckets      []latencyBucket
	count, sumMs int64
}

// decodeStats decodes one stats hash.
func decodeStats(h map[string]string) minuteCounts {
	var mc minuteCounts
	for f, v := range h {
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil || n <= 0 {
			continue
		}
		switch {
		case strings.HasPrefix(f, topics.StatsOutcomePrefix):
			if len(mc.outcomes) >= maxOutcomes {
				continue
			}
			if mc.outcomes == nil {
				mc.outcomes = map[string]int64{}
			}
			mc.outcomes[strings.TrimPrefix(f, topics.StatsOutcomePrefix)] = n
		case strings.HasPrefix(f, topics.StatsBucketPrefix):
			b, err := strconv.ParseFloat(strings.TrimPrefix(f, topics.StatsBucketPrefix), 64)
			if err == nil && !math.IsNaN(b) && len(mc.buckets) < maxOutcomes {
				mc.buckets = append(mc.buckets, latencyBucket{le: b, n: float64(n)})
			}
		case f == topics.StatsCount:
			mc.count = n
		case f == topics.StatsSumMs:
			mc.sumMs = n
		}
	}
	return mc
}

// minuteStats decodes one stats hash.
func minuteStats(minute int64, h map[string]string) MinuteStats {
	mc := decodeStats(h)
	ms := MinuteStats{Minute: minute, Outcomes: mc.outcomes, Count: mc.count, P50Ms: -1, P99Ms: -1, MeanMs: -1}
	for o, n := range mc.outcomes {
		if o != parkedOutcome {
			ms.Total += n
		}
	}
	if ms.Count > 0 {
		ms.MeanMs = mc.sumMs / ms.Count
	}
	if len(mc.buckets) > 0 {
		ms.P50Ms, ms.P99Ms = bucketQuantile(mc.buckets, 0.50), bucketQuantile(mc.buckets, 0.99)
	}
	return ms
}

// parkedOutcome is the stats outcome that counts parked tasks, not answered ones.
const parkedOutcome = "parked"

// maxOutcomes bounds the fields read from one stats hash. Anyone who may write to Redis may
// add fields to it.
const maxOutcomes = 100

// latencyBucket holds the n latencies above the previous bucket's bound and at most le
// seconds. n is a fraction when statsWindow weights a minute.
type latencyBucket struct {
	le float64
	n  float64
}

// bucketQuantile estimates the q-quantile, in milliseconds, of the latencies counted in
// non-cumulative buckets. It interpolates linearly inside the bucket the quantile falls in,
// as Prometheus' histogram_quantile does. A quantile in the +Inf bucket is the largest
// finite bound.
func bucketQuantile(buckets []latencyBucket, q float64) int64 {
	sort.Slice(buckets, func(i, j int) bool { return buckets[i].le < buckets[j].le })
	var total float64
	for _, b := range buckets {
		total += b.n
	}
	if total <= 0 {
		return -1
	}
	rank := q * total
	var below float64
	lower := 0.0
	for _, b := range buckets {
		if b.n > 0 && below+b.n >= rank {
			if math.IsInf(b.le, 1) {
				return int64(math.Round(lower * 1000))
			}
			frac := (rank - below) / b.n
			return int64(math.Round((lower + (b.le-lower)*frac) * 1000))
		}
		below += b.n
		if !math.IsInf(b.le, 1) {
			lower = b.le
		}
	}
	return int64(math.Round(lower * 1000))
}
