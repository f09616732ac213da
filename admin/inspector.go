// Package admin is Flightdeck's operations read model and web dashboard.
//
// Its Inspector shows what the stages, flights, consumers, dead letters, queued tasks and
// recent events look like in Redis right now, and the fleet's last hour per stage from the
// per-minute stats the consumers flush. It also runs the operator actions: cancel a flight,
// pause or resume a stage, requeue or purge dead letters. Handler serves all of it as JSON
// and as the embedded /ui page. `producer inspect` and `producer tail` read through the same
// Inspector.
package admin

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/flightdeck-ai/flightdeck/archive/postgres"
	"github.com/flightdeck-ai/flightdeck/client"
	"github.com/flightdeck-ai/flightdeck/flight"
	"github.com/flightdeck-ai/flightdeck/topics"
)

// Config configures an Inspector.
type Config struct {
	// Client reads Redis and is required. The Inspector does not close it.
	Client redis.UniversalClient
	// Keyspace names keys and streams. Defaults to the "ai" prefix.
	Keyspace topics.Keyspace
	// Stages are the stages shown. Required.
	Stages []string
	// LivenessTimeout is how long a consumer may be silent before it is shown as dead.
	// Defaults to 3 s.
	LivenessTimeout time.Duration
	// MaxFlights bounds the flights one Inspector.Flights listing reads. Defaults to 500.
	MaxFlights int
	// Archive, when set, is the durable archive. A flight's detail then shows the key's
	// archived row beside its Redis state, also when Redis no longer knows the key.
	Archive *postgres.Store
}

// Inspector reads Flightdeck's state from Redis for the dashboard and the CLI. It is safe for
// concurrent use.
type Inspector struct {
	cfg    Config
	rdb    redis.UniversalClient
	ks     topics.Keyspace
	coord  *flight.Coordinator
	client *client.Client
	evict  *evictionCache
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
	return &Inspector{cfg: cfg, rdb: cfg.Client, ks: cfg.Keyspace, coord: coord, client: cl, evict: &evictionCache{}}, nil
}

// EventView is one terminal event with its stream id.
type EventView struct {
	ID    string       `json:"id"`
	Event topics.Event `json:"event"`
}

// Events returns the newest n terminal events of the given stages, or of all stages when
// none are given, newest first. It returns at most MaxListEntries, fewer when their fields
// pass MaxResponseBytes, with every string field and the inline result cut to MaxFieldBytes.
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
	// Stage names the DLQ, ID is the entry's id in it, and UUID is the refused entry's uuid.
	Stage string `json:"stage"`
	ID    string `json:"id"`
	UUID  string `json:"uuid"`
	// Reason is machine-readable and Detail human-readable. Consumer refused the entry.
	Reason   string `json:"reason"`
	Detail   string `json:"detail"`
	Consumer string `json:"consumer"`
	// TaskID is the task id the payload names, read from the whole payload, when it names
	// one.
	TaskID string `json:"taskId,omitempty"`
	// Payload is the refused payload, truncated to MaxPayloadBytes in a DeadLetters listing
	// and whole in DeadLetter.
	Payload string `json:"payload"`
}

// DeadLetters returns the newest n dead letters of the given stages' DLQs, or of all stages
// when none are given, newest first. It returns at most MaxListEntries, fewer when their
// fields pass MaxResponseBytes, with every field cut to MaxFieldBytes and the payload to
// MaxPayloadBytes, since a dead letter holds whatever a producer sent.
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

// ErrNotFound is returned when the entry or flight an action names does not exist.
var ErrNotFound = errors.New("admin: not found")

// Requeue moves a dead letter back onto its stage's task stream with the same uuid and
// payload, deletes it from the DLQ as RequeueDLQ does, and returns the new task entry id. A
// payload that is still invalid simply comes back to the DLQ.
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

// Cancel cancels a flight and answers its parked tasks, as client.Client.Cancel does.
func (in *Inspector) Cancel(ctx context.Context, key, reason string) (client.CancelResult, error) {
	return in.client.Cancel(ctx, key, reason)
}
