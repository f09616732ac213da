package admin_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/flightdeck-ai/flightdeck/admin"
	"github.com/flightdeck-ai/flightdeck/flight"
	"github.com/flightdeck-ai/flightdeck/internal/testkit/redistest"
	"github.com/flightdeck-ai/flightdeck/topics"
)

// The amplification load: one flight with a 40 KB result, then loadHits result-cache hits of
// its key, each event carrying the result inline (as consumers write them).
const (
	loadResultBytes = 40 << 10
	loadHits        = 5000
)

// streamReads counts the stream entries (XRANGE, XREVRANGE) a client's commands returned,
// and their bytes (field names and values).
type streamReads struct {
	entries, bytes atomic.Int64
}

func (s *streamReads) DialHook(next redis.DialHook) redis.DialHook { return next }

func (s *streamReads) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		err := next(ctx, cmd)
		s.count(cmd)
		return err
	}
}

func (s *streamReads) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		err := next(ctx, cmds)
		for _, c := range cmds {
			s.count(c)
		}
		return err
	}
}

func (s *streamReads) count(cmd redis.Cmder) {
	c, ok := cmd.(*redis.XMessageSliceCmd)
	if !ok {
		return
	}
	for _, m := range c.Val() {
		s.entries.Add(1)
		for k, v := range m.Values {
			str, _ := v.(string)
			s.bytes.Add(int64(len(k) + len(str)))
		}
	}
}

func (s *streamReads) reset() { s.entries.Store(0); s.bytes.Store(0) }

// ampLoad is the amplification load written into a private Redis, and an Inspector that
// reads it through a client counting its stream reads.
type ampLoad struct {
	r     *redistest.Target
	ks    topics.Keyspace
	key   string
	in    *admin.Inspector
	reads *streamReads
	// minute is the minute (Unix seconds / 60, Redis time) whose stats hold the load.
	minute int64
}

// newAmpLoad writes the load: the flight (SUCCEEDED, its 40 KB result stored), loadHits hit
// events with the result inline, and the per-minute stats the consumers would have flushed for
// them (the owner and the hits in the current minute, two failures ten minutes earlier).
func newAmpLoad(tb testing.TB) *ampLoad {
	tb.Helper()
	ctx := context.Background()
	r := redistest.New(tb)
	l := &ampLoad{r: r, ks: topics.Keyspace{Prefix: r.Prefix}, reads: &streamReads{}}
	stage := "interview-evaluation"
	coord, err := flight.NewCoordinator(flight.Config{Client: r.Client, Keyspace: l.ks})
	if err != nil {
		tb.Fatal(err)
	}
	l.key, err = flight.NamespacedKey(stage, "acme", "big-report", 1)
	if err != nil {
		tb.Fatal(err)
	}
	result, _ := json.Marshal(map[string]string{"report": strings.Repeat("x", loadResultBytes)})
	d, err := coord.Acquire(ctx, flight.AcquireParams{Key: l.key, OwnerID: "c1", Stage: stage, Tenant: "acme", Start: true,
		Policy: flight.Policy{ResultTTL: time.Hour}})
	if err != nil || d.Owner == nil {
		tb.Fatalf("acquire: %+v %v", d, err)
	}
	if _, err := coord.Complete(ctx, *d.Owner, result, 2*time.Second); err != nil {
		tb.Fatal(err)
	}
	now, err := r.Client.Time(ctx).Result()
	if err != nil {
		tb.Fatal(err)
	}
	// Each hit event as a consumer writes it, the result inline; encoded once, then only the
	// task id changes.
	ev := topics.Event{TaskID: "hit-00000", RequestKey: l.key, Stage: stage, Tenant: "acme",
		Status: topics.StatusSucceeded, Shared: topics.SharedHit, OwnerToken: d.Owner.Token, Attempts: 1,
		QueuedMs: 3, FinishedAt: now, Consumer: "c1"}
	ev.SetResult(result, flight.DefaultMaxInline, l.ks.Flight(l.key))
	payload, err := topics.EncodeEvent(ev)
	if err != nil || len(ev.Result) == 0 {
		tb.Fatalf("event: %v (inline result %d bytes)", err, len(ev.Result))
	}
	for start := 0; start < loadHits; start += 250 {
		_, err := r.Client.Pipelined(ctx, func(p redis.Pipeliner) error {
			for i := start; i < start+250; i++ {
				id := fmt.Sprintf("hit-%05d", i)
				p.XAdd(ctx, &redis.XAddArgs{Stream: l.ks.Results(stage), Values: []any{topics.FieldUUID, id,
					topics.FieldPayload, strings.Replace(string(payload), `"hit-00000"`, `"`+id+`"`, 1)}})
			}
			return nil
		})
		if err != nil {
			tb.Fatal(err)
		}
	}
	l.minute = now.Unix() / 60
	stats := map[int64]map[string]int64{
		l.minute: {"o:owner_SUCCEEDED": 1, "o:hit_SUCCEEDED": loadHits, "le:0.005": loadHits, "le:2.5": 1,
			"n": loadHits + 1, "sumMs": 3*loadHits + 2000},
		l.minute - 10: {"o:owner_FAILED": 2, "le:5": 2, "n": 2, "sumMs": 8000},
	}
	_, err = r.Client.Pipelined(ctx, func(p redis.Pipeliner) error {
		for m, fields := range stats {
			for f, n := range fields {
				p.HIncrBy(ctx, l.ks.Stats(stage, m), f, n)
			}
			p.Expire(ctx, l.ks.Stats(stage, m), topics.StatsRetention)
		}
		return nil
	})
	if err != nil {
		tb.Fatal(err)
	}
	rdb := redis.NewClient(r.Client.Options())
	tb.Cleanup(func() { _ = rdb.Close() })
	rdb.AddHook(l.reads)
	l.in, err = admin.New(admin.Config{Client: rdb, Keyspace: l.ks, Stages: []string{stage}})
	if err != nil {
		tb.Fatal(err)
	}
	return l
}

// BenchmarkOverview reads the dashboard's overview under the amplification load; it reports
// the stream entries and bytes one read takes from Redis beside its time and allocations.
func BenchmarkOverview(b *testing.B) {
	l := newAmpLoad(b)
	ctx := context.Background()
	b.ReportAllocs()
	l.reads.reset()
	n := 0
	for b.Loop() {
		if _, err := l.in.Overview(ctx); err != nil {
			b.Fatal(err)
		}
		n++
	}
	b.ReportMetric(float64(l.reads.entries.Load())/float64(n), "entries/op")
	b.ReportMetric(float64(l.reads.bytes.Load())/float64(n), "streamB/op")
}
