package handlers

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/flightdeck-ai/flightdeck/internal/testkit/redistest"
	"github.com/flightdeck-ai/flightdeck/topics"
)

// TestStatsRecorderFleetSum: two consumers' recorders add into the same per-minute hash, one
// hash per stage and minute, each with the stats TTL; a flush that failed is carried into the
// next one.
func TestStatsRecorderFleetSum(t *testing.T) {
	ctx := context.Background()
	r := redistest.New(t)
	ks := topics.Keyspace{Prefix: r.Prefix}
	clock := time.Unix(1_800_000_000, 0) // a minute boundary
	now := func() time.Time { return clock }
	ma, mb := newMetrics(nil), newMetrics(nil)
	ra, rb := newStatsRecorder(r.Client, ks, ma), newStatsRecorder(r.Client, ks, mb)
	ra.now, rb.now = now, now

	ma.tasks.WithLabelValues("ev", "owner_SUCCEEDED").Add(3)
	ma.tasks.WithLabelValues("ev", "parked").Inc()
	ma.endToEnd.WithLabelValues("ev").Observe(0.2)
	ma.endToEnd.WithLabelValues("ev").Observe(0.2)
	ma.endToEnd.WithLabelValues("ev").Observe(3)
	mb.tasks.WithLabelValues("ev", "owner_SUCCEEDED").Inc()
	mb.tasks.WithLabelValues("ev", "hit_SUCCEEDED").Inc()
	mb.tasks.WithLabelValues("fu", "owner_FAILED").Inc()
	mb.endToEnd.WithLabelValues("ev").Observe(0.2)
	for _, rec := range []*statsRecorder{ra, rb} {
		if err := rec.flush(ctx); err != nil {
			t.Fatal(err)
		}
	}
	// Nothing new: a second flush writes nothing.
	if err := ra.flush(ctx); err != nil {
		t.Fatal(err)
	}
	key := ks.Stats("ev", clock.Unix()/60)
	got, err := r.Client.HGetAll(ctx, key).Result()
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{"o:owner_SUCCEEDED": "4", "o:parked": "1", "o:hit_SUCCEEDED": "1",
		"le:0.25": "3", "le:5": "1", "n": "4", "sumMs": "3600"}
	for f, v := range want {
		if got[f] != v {
			t.Errorf("%s %s = %q, want %q (hash %v)", key, f, got[f], v, got)
		}
	}
	if len(got) != len(want) {
		t.Errorf("hash %v has fields beyond %v", got, want)
	}
	if ttl := r.Client.TTL(ctx, key).Val(); ttl <= topics.StatsRetention-time.Minute || ttl > topics.StatsRetention {
		t.Errorf("TTL %v, want about %v", ttl, topics.StatsRetention)
	}
	if v := r.Client.HGet(ctx, ks.Stats("fu", clock.Unix()/60), "o:owner_FAILED").Val(); v != "1" {
		t.Errorf("fu owner_FAILED = %q, want 1", v)
	}

	// A flush that fails keeps its counts for the next one, which lands in its own minute.
	ma.tasks.WithLabelValues("ev", "owner_SUCCEEDED").Add(2)
	dead := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1", MaxRetries: -1, DialTimeout: 100 * time.Millisecond})
	defer dead.Close()
	ra.rdb = dead
	if err := ra.flush(ctx); err == nil {
		t.Fatal("a flush to an unreachable Redis succeeded")
	}
	ra.rdb = r.Client
	clock = clock.Add(90 * time.Second)
	if err := ra.flush(ctx); err != nil {
		t.Fatal(err)
	}
	next := ks.Stats("ev", clock.Unix()/60)
	if v := r.Client.HGet(ctx, next, "o:owner_SUCCEEDED").Val(); v != "2" {
		t.Errorf("next minute owner_SUCCEEDED = %q, want 2", v)
	}
	if v := r.Client.HGet(ctx, key, "o:owner_SUCCEEDED").Val(); v != "4" {
		t.Errorf("first minute changed to %q", v)
	}

	// Bounded: one hash per stage and minute written, whatever the number of flushes.
	for i := range 50 {
		ma.tasks.WithLabelValues("ev", "owner_SUCCEEDED").Inc()
		clock = clock.Add(time.Duration(i%3) * 10 * time.Second)
		if err := ra.flush(ctx); err != nil {
			t.Fatal(err)
		}
	}
	keys := r.Client.Keys(ctx, r.Prefix+":stats:ev:*").Val()
	minutes := map[string]bool{}
	for _, k := range keys {
		minutes[k] = true
		if ttl := r.Client.TTL(ctx, k).Val(); ttl <= 0 || ttl > topics.StatsRetention {
			t.Errorf("%s TTL %v", k, ttl)
		}
	}
	span := int(clock.Unix()/60-1_800_000_000/60) + 1
	if len(keys) > span {
		t.Errorf("%d stats hashes for %d minutes", len(keys), span)
	}
	total := 0
	for _, k := range keys {
		n, _ := strconv.Atoi(r.Client.HGet(ctx, k, "o:owner_SUCCEEDED").Val())
		total += n
	}
	if total != 4+2+50 {
		t.Errorf("owner_SUCCEEDED over all minutes = %d, want %d", total, 56)
	}
}
