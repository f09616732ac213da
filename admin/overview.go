package admin

import (
	"context"
	"fmt"
	"math"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/flightdeck-ai/flightdeck/topics"
)

// StageView summarises one stage.
type StageView struct {
	Name string `json:"name"`
	// Backlog is the number of task entries not yet delivered to any consumer: the group
	// lag, summed over the stage's partitions.
	Backlog int64 `json:"backlog"`
	// Pending counts delivered, unacknowledged task entries that consumers hold, running or
	// waiting for a retry, a session lock or a lapsed lease.
	Pending int64 `json:"pending"`
	// Parked counts the task entries parked on running flights. They are pending under the
	// parking consumer until their flight's outcome answers them.
	Parked int64 `json:"parked"`
	// TaskStreamLen, ResultStreamLen and DLQLen are stream lengths.
	TaskStreamLen   int64 `json:"taskStreamLen"`
	ResultStreamLen int64 `json:"resultStreamLen"`
	DLQLen          int64 `json:"dlqLen"`
	// EventsLastMinute counts the terminal events the fleet wrote in the last 60 s. It comes
	// from the per-minute stats, not the result stream: the current minute's hash plus the
	// previous minute's, weighted by the part of it within the last 60 s.
	EventsLastMinute int            `json:"eventsLastMinute"`
	PerSecond        float64        `json:"perSecond"` // their rate
	P50Ms            int64          `json:"p50Ms"`     // their end-to-end latency, queue wait plus run, 0 without any
	P99Ms            int64          `json:"p99Ms"`     // the same at the 99th percentile
	Outcomes         map[string]int `json:"outcomes"`  // their counts by "<shared>/<status>"
	// LastHour is what the fleet answered in the current minute and the 59 before it.
	LastHour WindowStats `json:"lastHour"`
	// Paused tells who paused the stage and when. It is nil while the stage runs.
	Paused *topics.PauseInfo `json:"paused,omitempty"`
}

// WindowStats is what the fleet answered for one stage over a window of time, summed from the
// per-minute stats hashes the consumers flush to topics.Keyspace.Stats.
type WindowStats struct {
	// Events counts the tasks answered with terminal events, leaving out parked tasks until
	// they are answered. Outcomes counts them by "<shared>/<status>".
	Events   int64            `json:"events"`
	Outcomes map[string]int64 `json:"outcomes"`
	// P50Ms and P99Ms are end-to-end latencies interpolated from the latency buckets, -1
	// when the window recorded none.
	P50Ms int64 `json:"p50Ms"`
	P99Ms int64 `json:"p99Ms"`
}

// ConsumerView is one consumer process.
type ConsumerView struct {
	Name string `json:"name"`
	// LastBeatAgeMs is the age of its liveness heartbeat. Alive compares it with the timeout.
	LastBeatAgeMs int64 `json:"lastBeatAgeMs"`
	Alive         bool  `json:"alive"`
	// Pending counts the task entries its subscribers hold, per stage.
	Pending map[string]int64 `json:"pending"`
}

// Overview is the dashboard's main read.
type Overview struct {
	GeneratedAt time.Time      `json:"generatedAt"`
	Stages      []StageView    `json:"stages"`
	Consumers   []ConsumerView `json:"consumers"`
	// FlightsByStatus counts, by status, the flights Flights lists: those of the task
	// entries consumers hold and of the latest events of each stage.
	FlightsByStatus map[string]int `json:"flightsByStatus"`
	// EvictionPolicy is Redis's maxmemory-policy, "" when the credential cannot read it. Any
	// policy but noeviction may drop task streams, parked entries, fences and results.
	EvictionPolicy string `json:"evictionPolicy,omitempty"`
}

// Overview reads stages, consumers and flight counts, with names bounded to MaxFieldBytes
// and consumers to MaxListEntries. Its reads stay bounded whatever the traffic: stream
// lengths, consumer-group summaries, the last hour's per-minute stats hashes and the bounded
// reads of Flights, never the result stream's events.
func (in *Inspector) Overview(ctx context.Context) (Overview, error) {
	now, err := in.rdb.Time(ctx).Result()
	if err != nil {
		return Overview{}, fmt.Errorf("admin: overview: %w", err)
	}
	ov := Overview{GeneratedAt: now, FlightsByStatus: map[string]int{}}
	ov.EvictionPolicy = in.evict.policy(ctx, in.rdb) // shown when known, never a reason to fail
	consumers := map[string]*ConsumerView{}
	beats, err := in.rdb.HGetAll(ctx, in.ks.Consumers(topics.ConsumerGroup)).Result()
	if err != nil {
		return Overview{}, fmt.Errorf("admin: overview: %w", err)
	}
	for name, v := range beats {
		ms, _ := strconv.ParseInt(v, 10, 64)
		// A beat written after the TIME above is fresh: its age is 0, never negative. -1
		// means no beat at all.
		age := max(now.UnixMilli()-ms, 0)
		consumers[name] = &ConsumerView{Name: name, LastBeatAgeMs: age,
			Alive: age <= in.cfg.LivenessTimeout.Milliseconds(), Pending: map[string]int64{}}
	}
	stages := in.Stages(ctx) // one registry read for the whole overview
	paused, err := in.pausedOf(ctx, stages)
	if err != nil {
		return Overview{}, fmt.Errorf("admin: overview: %w", err)
	}
	last := now.Unix() / 60
	hashes, err := in.statsHashes(ctx, stages, last-MaxHistoryMinutes+1, last)
	if err != nil {
		return Overview{}, fmt.Errorf("admin: overview: stats: %w", err)
	}
	for i, stage := range stages {
		sv, pend := in.stage(ctx, stage)
		sv.setStats(hashes[i], now)
		if p, ok := paused[stage]; ok {
			sv.Paused = &p
		}
		ov.Stages = append(ov.Stages, sv)
		for sub, n := range pend {
			if sub == topics.ParkingConsumer {
				continue
			}
			proc := sub
			if i := strings.LastIndexByte(sub, '/'); i >= 0 {
				proc = sub[:i]
			}
			cv := consumers[proc]
			if cv == nil {
				cv = &ConsumerView{Name: proc, LastBeatAgeMs: -1, Pending: map[string]int64{}}
				consumers[proc] = cv
			}
			cv.Pending[stage] += n
		}
	}
	for _, cv := range consumers {
		ov.Consumers = append(ov.Consumers, *cv)
	}
	sort.Slice(ov.Consumers, func(i, j int) bool { return ov.Consumers[i].Name < ov.Consumers[j].Name })
	flights, err := in.flights(ctx, stages, FlightFilter{Limit: in.cfg.MaxFlights})
	if err != nil {
		return Overview{}, err
	}
	for _, f := range flights {
		ov.FlightsByStatus[f.Status]++
	}
	bound(&ov, MaxFieldBytes)
	return ov, nil
}

// stage reads the stream gauges of stage: lengths, backlog, pending and parked entries, and
// the pending entries per consumer.
func (in *Inspector) stage(ctx context.Context, stage string) (StageView, map[string]int64) {
	sv := StageView{Name: stage, Outcomes: map[string]int{}}
	perConsumer := map[string]int64{}
	for _, tasks := range in.ks.TaskStreams(stage) {
		var (
			tl     *redis.IntCmd
			groups *redis.XInfoGroupsCmd
			pend   *redis.XPendingCmd
		)
		_, _ = in.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
			tl = p.XLen(ctx, tasks)
			groups = p.XInfoGroups(ctx, tasks)
			pend = p.XPending(ctx, tasks, topics.ConsumerGroup)
			return nil
		})
		sv.TaskStreamLen += tl.Val()
		for _, g := range groups.Val() {
			if g.Name == topics.ConsumerGroup {
				sv.Backlog += max(g.Lag, 0)
				sv.Pending += g.Pending
			}
		}
		if pend.Err() == nil {
			for name, n := range pend.Val().Consumers {
				perConsumer[name] += n
				if name == topics.ParkingConsumer {
					sv.Parked += n
					sv.Pending -= n
				}
			}
		}
	}
	sv.ResultStreamLen = in.rdb.XLen(ctx, in.ks.Results(stage)).Val()
	sv.DLQLen = in.rdb.XLen(ctx, in.ks.DLQ(stage)).Val()
	return sv, perConsumer
}

// setStats fills the stage's counts from its stats hashes of the last hour. hashes[j] is
// minute last-MaxHistoryMinutes+1+j, the current minute last. The last 60 s are the current
// minute's hash plus the previous minute's weighted by the part of it that lies within them.
// This is a sliding-window estimate, since the stats keep counts per minute only.
func (sv *StageView) setStats(hashes []map[string]string, now time.Time) {
	var hour, minute statsWindow
	elapsed := now.UnixMilli() - now.Unix()/60*60_000
	weight := max(0, min(1, 1-float64(elapsed)/60_000))
	for j, h := range hashes {
		mc := decodeStats(h)
		hour.add(mc, 1)
		switch j {
		case len(hashes) - 1:
			minute.add(mc, 1)
		case len(hashes) - 2:
			minute.add(mc, weight)
		}
	}
	sv.LastHour = hour.stats()
	last := minute.stats()
	sv.EventsLastMinute = int(last.Events)
	sv.PerSecond = float64(last.Events) / 60
	sv.P50Ms, sv.P99Ms = max(last.P50Ms, 0), max(last.P99Ms, 0)
	for o, n := range last.Outcomes {
		sv.Outcomes[o] = int(n)
	}
}

// statsWindow sums weighted minutes of stats.
type statsWindow struct {
	outcomes map[string]float64
	buckets  map[float64]float64
}

// add adds the minute mc, its counts multiplied by weight.
func (w *statsWindow) add(mc minuteCounts, weight float64) {
	if weight <= 0 {
		return
	}
	if w.outcomes == nil {
		w.outcomes, w.buckets = map[string]float64{}, map[float64]float64{}
	}
	for o, n := range mc.outcomes {
		if o == parkedOutcome || (len(w.outcomes) >= maxOutcomes && w.outcomes[o] == 0) {
			continue
		}
		w.outcomes[o] += float64(n) * weight
	}
	for _, b := range mc.buckets {
		if len(w.buckets) < maxOutcomes || w.buckets[b.le] != 0 {
			w.buckets[b.le] += b.n * weight
		}
	}
}

// stats rounds the window's counts: each outcome to the nearest task, Events their sum.
func (w *statsWindow) stats() WindowStats {
	ws := WindowStats{Outcomes: map[string]int64{}, P50Ms: -1, P99Ms: -1}
	for o, n := range w.outcomes {
		if c := int64(math.Round(n)); c > 0 {
			// Stats outcomes are "<shared>_<status>", the overview's "<shared>/<status>".
			shared, status, _ := strings.Cut(o, "_")
			ws.Outcomes[shared+"/"+status] += c
			ws.Events += c
		}
	}
	if len(w.buckets) > 0 {
		buckets := make([]latencyBucket, 0, len(w.buckets))
		for le, n := range w.buckets {
			buckets = append(buckets, latencyBucket{le: le, n: n})
		}
		ws.P50Ms, ws.P99Ms = bucketQuantile(buckets, 0.50), bucketQuantile(buckets, 0.99)
	}
	return ws
}
