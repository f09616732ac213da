// Package admin is Flightdeck's operations read model and web dashboard: what the stages,
// flights, consumers, dead letters, queued tasks and recent events look like in Redis right now,
// the fleet's last hour per stage (from the per-minute stats the consumers flush), the operator
// actions (cancel a flight, pause or resume a stage, requeue or purge dead letters), and the
// HTTP handler that serves them as JSON and as the embedded /ui page. `producer inspect` and `producer tail` read
// through the same Inspector.
package admin

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/flightdeck-ai/flightdeck/archive"
	"github.com/flightdeck-ai/flightdeck/client"
	"github.com/flightdeck-ai/flightdeck/flight"
	"github.com/flightdeck-ai/flightdeck/topics"
)

// Config configures an Inspector.
type Config struct {
	// Client reads Redis. Required. Not closed by the Inspector.
	Client redis.UniversalClient
	// Keyspace names keys and streams. Defaults to the "ai" prefix.
	Keyspace topics.Keyspace
	// Stages are the stages shown. Required.
	Stages []string
	// LivenessTimeout: a consumer silent this long is shown as dead. Defaults to 3 s.
	LivenessTimeout time.Duration
	// MaxFlights bounds the flights one listing scans. Defaults to 500.
	MaxFlights int
	// Archive, when set, is the durable archive: a flight's detail shows the key's archived
	// row beside its Redis state, also when Redis no longer knows the key.
	Archive *archive.Store
}

// Inspector reads Flightdeck's state from Redis for the dashboard and the CLI. Safe for
// concurrent use.
type Inspector struct {
	cfg    Config
	rdb    redis.UniversalClient
	ks     topics.Keyspace
	coord  *flight.Coordinator
	client *client.Client
}

// New returns an Inspector.
func New(cfg Config) (*Inspector, error) {
	if cfg.Client == nil {
		return nil, errors.New("admin: Config.Client is required")
	}
	if cfg.LivenessTimeout == 0 {
		cfg.LivenessTimeout = 3 * time.Second
	}
	if cfg.MaxFlights == 0 {
		cfg.MaxFlights = 500
	}
	coord, err := flight.NewCoordinator(flight.Config{Client: cfg.Client, Keyspace: cfg.Keyspace})
	if err != nil {
		return nil, err
	}
	cl, err := client.New(client.Config{Client: cfg.Client, Keyspace: cfg.Keyspace})
	if err != nil {
		return nil, err
	}
	return &Inspector{cfg: cfg, rdb: cfg.Client, ks: cfg.Keyspace, coord: coord, client: cl}, nil
}

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

// FlightView is one flight as the dashboard lists it.
type FlightView struct {
	Key            string `json:"key"`
	Stage          string `json:"stage"`
	Tenant         string `json:"tenant"`
	Status         string `json:"status"`
	OwnerID        string `json:"ownerId"`
	TaskID         string `json:"taskId"`
	Token          int64  `json:"token"`
	Attempts       int    `json:"attempts"`
	HeartbeatAgeMs int64  `json:"heartbeatAgeMs"`
	ProgressAgeMs  int64  `json:"progressAgeMs"`
	ExpiresInMs    int64  `json:"expiresInMs"`
	Parked         int64  `json:"parked"`
	ErrorType      string `json:"errorType,omitempty"`
	ErrorCode      string `json:"errorCode,omitempty"`
	Error          string `json:"error,omitempty"`
	UpdatedAt      int64  `json:"updatedAt"`
}

// FlightFilter narrows a flight listing.
type FlightFilter struct {
	// Status keeps flights in this status ("" = all).
	Status string
	// Stage keeps flights of this stage ("" = all).
	Stage string
	// Limit bounds the answer. Defaults to Config.MaxFlights.
	Limit int
}

// Flights scans up to Config.MaxFlights flight metas (SCAN, on every master of a cluster),
// newest update first, every string field at most MaxFieldBytes.
func (in *Inspector) Flights(ctx context.Context, f FlightFilter) ([]FlightView, error) {
	if f.Limit <= 0 || f.Limit > in.cfg.MaxFlights {
		f.Limit = in.cfg.MaxFlights
	}
	metaPrefix := strings.TrimSuffix(in.ks.Meta("x"), "{x}")
	keys, err := in.scan(ctx, metaPrefix+"*", in.cfg.MaxFlights)
	if err != nil {
		return nil, fmt.Errorf("admin: flights: %w", err)
	}
	now, err := in.rdb.Time(ctx).Result()
	if err != nil {
		return nil, fmt.Errorf("admin: flights: %w", err)
	}
	out := make([]FlightView, 0, len(keys))
	for _, k := range keys {
		key := strings.TrimSuffix(strings.TrimPrefix(k, metaPrefix+"{"), "}")
		var (
			meta *redis.MapStringStringCmd
			n    *redis.IntCmd
		)
		_, err := in.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
			meta = p.HGetAll(ctx, k)
			n = p.HLen(ctx, in.ks.Waiters(key))
			return nil
		})
		if err != nil || len(meta.Val()) == 0 {
			continue
		}
		m := meta.Val()
		fv := flightView(key, m, now.UnixMilli())
		fv.Parked = n.Val()
		if (f.Status != "" && fv.Status != f.Status) || (f.Stage != "" && fv.Stage != f.Stage) {
			continue
		}
		out = append(out, fv)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].UpdatedAt > out[j].UpdatedAt })
	out, _ = boundList(out, f.Limit, MaxFieldBytes)
	return out, nil
}

func flightView(key string, m map[string]string, now int64) FlightView {
	i64 := func(f string) int64 { v, _ := strconv.ParseInt(m[f], 10, 64); return v }
	age := func(f string) int64 {
		if v := i64(f); v > 0 {
			return now - v
		}
		return -1
	}
	fv := FlightView{Key: key, Stage: m["stage"], Tenant: m["tenant"], Status: m["status"], OwnerID: m["ownerId"],
		TaskID: m["taskId"], Token: i64("ownerToken"), Attempts: int(i64("attempts")),
		HeartbeatAgeMs: age("heartbeatAt"), ProgressAgeMs: age("progressAt"), ErrorType: m["errorType"],
		ErrorCode: m["errorCode"], Error: m["error"], UpdatedAt: i64("updatedAt"), ExpiresInMs: -1}
	if st := fv.Status; st == string(flight.StatusPending) || st == string(flight.StatusRunning) {
		fv.ExpiresInMs = i64("expireAt") - now
	}
	return fv
}

// scan lists keys matching pattern, at most limit, on every master of a cluster.
func (in *Inspector) scan(ctx context.Context, pattern string, limit int) ([]string, error) {
	var (
		mu   sync.Mutex
		keys []string
	)
	scanNode := func(ctx context.Context, c redis.UniversalClient) error {
		it := c.Scan(ctx, 0, pattern, 500).Iterator()
		for it.Next(ctx) {
			mu.Lock()
			full := len(keys) >= limit
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
	if cc, ok := in.rdb.(*redis.ClusterClient); ok {
		err := cc.ForEachMaster(ctx, func(ctx context.Context, c *redis.Client) error { return scanNode(ctx, c) })
		return keys, err
	}
	return keys, scanNode(ctx, in.rdb)
}

// FlightDetail is one flight with everything stored about it, bounded: every string at
// most MaxFieldBytes (then marked "…(N bytes)"), every list and map (parked tasks, raw
// fields) at most MaxListEntries entries.
type FlightDetail struct {
	Meta flight.Meta `json:"meta"`
	// Result is the stored result (at most MaxFieldBytes), when there is one.
	Result string `json:"result,omitempty"`
	// Attempts are the flight's owner attempts, oldest first (see AttemptLogField).
	Attempts []AttemptView `json:"attempts"`
	// Archived is the key's row in the durable archive (Config.Archive), when it holds one;
	// ArchiveError says why it could not be read.
	Archived     *ArchivedView `json:"archived,omitempty"`
	ArchiveError string        `json:"archiveError,omitempty"`
	// Claim is the key's takeover claim in the archive, when it holds one: the token of the
	// last owner that took the flight over, which refuses older owners' writes after a Redis
	// data loss.
	Claim *ClaimView `json:"claim,omitempty"`
	// Truncated tells that a field, list or map was cut.
	Truncated bool `json:"truncated,omitempty"`
}

// ArchivedView is a key's row in the durable archive.
type ArchivedView struct {
	Status    string `json:"status"`
	Stage     string `json:"stage"`
	Tenant    string `json:"tenant"`
	Token     int64  `json:"token"`
	Attempts  int    `json:"attempts"`
	Result    string `json:"result,omitempty"`
	ErrorType string `json:"errorType,omitempty"`
	ErrorCode string `json:"errorCode,omitempty"`
	Error     string `json:"error,omitempty"`
	// FinishedAt and ExpiresAt are Unix ms; Expired is true once the retention ran out.
	FinishedAt int64 `json:"finishedAt"`
	ExpiresAt  int64 `json:"expiresAt"`
	Expired    bool  `json:"expired"`
}

// ClaimView is a key's takeover claim in the durable archive; times are Unix ms.
type ClaimView struct {
	Token     int64 `json:"token"`
	ClaimedAt int64 `json:"claimedAt"`
	ExpiresAt int64 `json:"expiresAt"`
	Expired   bool  `json:"expired"`
}

// Flight reads one flight (ErrNotFound when neither Redis nor the archive knows it).
func (in *Inspector) Flight(ctx context.Context, key string) (FlightDetail, error) {
	var d FlightDetail
	if in.cfg.Archive != nil {
		in.archived(ctx, key, &d)
	}
	m, err := in.coord.Get(ctx, key)
	switch {
	case errors.Is(err, flight.ErrNotFound) && (d.Archived != nil || d.Claim != nil):
		// Only the archive knows the key: show its row and claim.
	case err != nil:
		return FlightDetail{}, err
	default:
		d.Meta, d.Attempts = m, attempts(m)
		if res, err := in.coord.Result(ctx, key); err == nil {
			d.Result = string(res)
		}
	}
	_, d.Truncated = bound(&d, MaxFieldBytes)
	return d, nil
}

// archived reads key's archived row and claim into d (ArchiveError when it cannot).
func (in *Inspector) archived(ctx context.Context, key string, d *FlightDetail) {
	actx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	r, ok, err := in.cfg.Archive.Inspect(actx, key)
	switch {
	case err != nil:
		d.ArchiveError = err.Error()
		return
	case ok:
		d.Archived = &ArchivedView{Status: string(r.Status), Stage: r.Stage, Tenant: r.Tenant, Token: r.Token,
			Attempts: r.Attempts, Result: string(r.Result), ErrorType: r.ErrorType, ErrorCode: r.ErrorCode,
			Error: r.Error, FinishedAt: r.FinishedAt.UnixMilli(), ExpiresAt: r.ExpiresAt.UnixMilli(), Expired: r.Expired}
	}
	c, ok, err := in.cfg.Archive.InspectClaim(actx, key)
	switch {
	case err != nil:
		d.ArchiveError = err.Error()
	case ok:
		d.Claim = &ClaimView{Token: c.Token, ClaimedAt: c.ClaimedAt.UnixMilli(), ExpiresAt: c.ExpiresAt.UnixMilli(),
			Expired: c.Expired}
	}
}

// EventView is one terminal event with its stream id.
type EventView struct {
	ID    string       `json:"id"`
	Event topics.Event `json:"event"`
}

// Events returns the newest n terminal events of the given stages (all stages when none),
// newest first: at most MaxListEntries, every string field (and the inline result) at most
// MaxFieldBytes, fewer events when their fields pass MaxResponseBytes.
func (in *Inspector) Events(ctx context.Context, stages []string, n int64) ([]EventView, error) {
	n = min(n, MaxListEntries)
	if len(stages) == 0 {
		stages = in.Stages(ctx)
	}
	out := []EventView{} // [] in JSON when there are none, never null
	for _, s := range stages {
		msgs, err := in.rdb.XRevRangeN(ctx, in.ks.Results(s), "+", "-", n).Result()
		if err != nil {
			return nil, fmt.Errorf("admin: events: %w", err)
		}
		for _, m := range msgs {
			p, _ := m.Values[topics.FieldPayload].(string)
			if ev, err := topics.DecodeEvent([]byte(p)); err == nil {
				out = append(out, EventView{ID: m.ID, Event: ev})
			}
		}
	}
	sort.Slice(out, func(i, j int) bool { return topics.IDLess(out[j].ID, out[i].ID) })
	out, _ = boundList(out, int(n), MaxFieldBytes)
	return out, nil
}

// DeadLetterView is one dead-letter entry.
type DeadLetterView struct {
	// Stage names the DLQ; ID is the entry's id in it, UUID the refused entry's uuid.
	Stage string `json:"stage"`
	ID    string `json:"id"`
	UUID  string `json:"uuid"`
	// Reason is machine-readable, Detail human-readable; Consumer refused the entry.
	Reason   string `json:"reason"`
	Detail   string `json:"detail"`
	Consumer string `json:"consumer"`
	// TaskID is the task id the payload names (read from the whole payload), when it names
	// one.
	TaskID string `json:"taskId,omitempty"`
	// Payload is the refused payload: truncated to MaxPayloadBytes in a listing
	// (DeadLetters), whole in DeadLetter.
	Payload string `json:"payload"`
}

// DeadLetters returns the newest n dead letters of the given stages' DLQs (all stages when
// none), newest first: at most MaxListEntries, every field at most MaxFieldBytes (the
// payload MaxPayloadBytes), fewer entries when their fields pass MaxResponseBytes. A
// dead letter holds whatever a producer sent, so any field may be huge.
func (in *Inspector) DeadLetters(ctx context.Context, stages []string, n int64) ([]DeadLetterView, error) {
	n = min(n, MaxListEntries)
	if len(stages) == 0 {
		stages = in.Stages(ctx)
	}
	out := []DeadLetterView{} // [] in JSON when there are none, never null
	for _, s := range stages {
		msgs, err := in.rdb.XRevRangeN(ctx, in.ks.DLQ(s), "+", "-", n).Result()
		if err != nil {
			return nil, fmt.Errorf("admin: dead letters: %w", err)
		}
		for _, m := range msgs {
			d := deadLetterEntry(s, m).DeadLetterView
			d.Payload = Truncate(d.Payload, MaxPayloadBytes)
			out = append(out, d)
		}
	}
	sort.SliceStable(out, func(i, j int) bool { return topics.IDLess(out[j].ID, out[i].ID) })
	out, _ = boundList(out, int(n), MaxFieldBytes)
	return out, nil
}

// ErrNotFound: the entry or flight an action names does not exist.
var ErrNotFound = errors.New("admin: not found")

// Requeue moves a dead letter back onto its stage's task stream (same uuid and payload) and
// deletes it from the DLQ (see RequeueDLQ). It answers the new task entry id. A payload that
// is still invalid simply comes back to the DLQ.
func (in *Inspector) Requeue(ctx context.Context, stage, id string) (string, error) {
	res, err := in.RequeueDLQ(ctx, DLQSelection{Stage: stage, IDs: []string{id}})
	switch {
	case err != nil:
		return "", err
	case res.Missing > 0:
		return "", fmt.Errorf("admin: requeue: %w: entry %s", ErrNotFound, id)
	case len(res.IDs) == 0:
		return "", fmt.Errorf("admin: requeue: entry %s was not added to the task stream", id)
	}
	return res.IDs[0], nil
}

// Cancel cancels a flight and answers its parked tasks (see client.Client.Cancel).
func (in *Inspector) Cancel(ctx context.Context, key, reason string) (client.CancelResult, error) {
	return in.client.Cancel(ctx, key, reason)
}
