package admin

import (
	"context"
	"errors"
	"fmt"
	"slices"
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
	// Backlog is the number of task entries not yet delivered to any consumer (group lag,
	// summed over the stage's partitions).
	Backlog int64 `json:"backlog"`
	// Pending counts delivered, unacknowledged task entries that consumers hold (running,
	// or waiting for a retry, a session lock or a lapsed lease).
	Pending int64 `json:"pending"`
	// Parked counts the task entries parked on running flights (pending under the parking
	// consumer until their flight's outcome answers them).
	Parked int64 `json:"parked"`
	// TaskStreamLen, ResultStreamLen and DLQLen are stream lengths.
	TaskStreamLen   int64 `json:"taskStreamLen"`
	ResultStreamLen int64 `json:"resultStreamLen"`
	DLQLen          int64 `json:"dlqLen"`
	// EventsLastMinute counts terminal events of the last 60 s; PerSecond is their rate.
	EventsLastMinute int     `json:"eventsLastMinute"`
	PerSecond        float64 `json:"perSecond"`
	// P50Ms and P99Ms are end-to-end latencies (queue wait + run) of those events.
	P50Ms int64 `json:"p50Ms"`
	P99Ms int64 `json:"p99Ms"`
	// Outcomes counts those events by "<shared>/<status>".
	Outcomes map[string]int `json:"outcomes"`
	// Paused tells who paused the stage and when; nil while it runs.
	Paused *topics.PauseInfo `json:"paused,omitempty"`
}

// ConsumerView is one consumer process.
type ConsumerView struct {
	Name string `json:"name"`
	// LastBeatAgeMs is the age of its liveness heartbeat; Alive compares it with the timeout.
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
	// FlightsByStatus counts the scanned flights by status.
	FlightsByStatus map[string]int `json:"flightsByStatus"`
}

// Overview reads stages, consumers and flight counts; names are bounded to MaxFieldBytes
// and the consumers to MaxListEntries.
func (in *Inspector) Overview(ctx context.Context) (Overview, error) {
	now, err := in.rdb.Time(ctx).Result()
	if err != nil {
		return Overview{}, fmt.Errorf("admin: overview: %w", err)
	}
	ov := Overview{GeneratedAt: now, FlightsByStatus: map[string]int{}}
	consumers := map[string]*ConsumerView{}
	beats, err := in.rdb.HGetAll(ctx, in.ks.Consumers(topics.ConsumerGroup)).Result()
	if err != nil {
		return Overview{}, fmt.Errorf("admin: overview: %w", err)
	}
	for name, v := range beats {
		ms, _ := strconv.ParseInt(v, 10, 64)
		age := now.UnixMilli() - ms
		consumers[name] = &ConsumerView{Name: name, LastBeatAgeMs: age,
			Alive: age <= in.cfg.LivenessTimeout.Milliseconds(), Pending: map[string]int64{}}
	}
	stages := in.Stages(ctx) // one registry read for the whole overview
	paused, err := in.pausedOf(ctx, stages)
	if err != nil {
		return Overview{}, fmt.Errorf("admin: overview: %w", err)
	}
	for _, stage := range stages {
		sv, pend, err := in.stage(ctx, stage, now)
		if err != nil {
			return Overview{}, err
		}
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
	flights, err := in.Flights(ctx, FlightFilter{})
	if err != nil {
		return Overview{}, err
	}
	for _, f := range flights {
		ov.FlightsByStatus[f.Status]++
	}
	bound(&ov, MaxFieldBytes)
	return ov, nil
}

func (in *Inspector) stage(ctx context.Context, stage string, now time.Time) (StageView, map[string]int64, error) {
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
	// Events of the last minute: stream ids carry the Redis time of the XADD.
	from := strconv.FormatInt(now.Add(-time.Minute).UnixMilli(), 10)
	msgs, err := in.rdb.XRangeN(ctx, in.ks.Results(stage), from, "+", 10000).Result()
	if err != nil && !errors.Is(err, redis.Nil) {
		return sv, nil, fmt.Errorf("admin: stage %s: %w", stage, err)
	}
	var lat []int64
	for _, m := range msgs {
		p, _ := m.Values[topics.FieldPayload].(string)
		ev, err := topics.DecodeEvent([]byte(p))
		if err != nil {
			continue
		}
		sv.EventsLastMinute++
		sv.Outcomes[string(ev.Shared)+"/"+string(ev.Status)]++
		lat = append(lat, ev.QueuedMs+ev.RunMs)
	}
	sv.PerSecond = float64(sv.EventsLastMinute) / 60
	sv.P50Ms, sv.P99Ms = percentile(lat, 50), percentile(lat, 99)
	return sv, perConsumer, nil
}

func percentile(v []int64, p int) int64 {
	if len(v) == 0 {
		return 0
	}
	s := slices.Clone(v)
	slices.Sort(s)
	i := (len(s)*p + 99) / 100
	return s[max(0, min(len(s)-1, i-1))]
}
