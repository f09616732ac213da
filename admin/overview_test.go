package admin_test

import (
	"context"
	"math"
	"runtime"
	"strconv"
	"testing"

	"github.com/flightdeck-ai/flightdeck/admin"
	"github.com/flightdeck-ai/flightdeck/internal/testkit/redistest"
	"github.com/flightdeck-ai/flightdeck/topics"
)

// TestOverviewUnderAmplification: with one flight's 40 KB result inline in 5,000 hit events,
// the overview answers its counts from the per-minute stats (the last hour exactly, the last
// minute as the sliding-window estimate), reads a bounded number of stream entries and bytes
// (never the 200 MB of events), and allocates a few MB per call.
func TestOverviewUnderAmplification(t *testing.T) {
	l := newAmpLoad(t)
	ctx := context.Background()
	if _, err := l.in.Overview(ctx); err != nil { // warm the connection pool
		t.Fatal(err)
	}
	l.reads.reset()
	runtime.GC()
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	ov, err := l.in.Overview(ctx)
	runtime.ReadMemStats(&after)
	if err != nil {
		t.Fatal(err)
	}
	if alloc := after.TotalAlloc - before.TotalAlloc; alloc > 20<<20 {
		t.Errorf("one overview allocated %d MB, want under 20", alloc>>20)
	} else {
		t.Logf("one overview allocated %.1f MB", float64(alloc)/(1<<20))
	}
	entries, bytes := l.reads.entries.Load(), l.reads.bytes.Load()
	t.Logf("one overview read %d stream entries, %d bytes", entries, bytes)
	if entries > admin.RecentEventFlights || bytes > admin.MaxFlightReadBytes+10*(64<<10) {
		t.Errorf("one overview read %d stream entries (%d bytes), want at most %d entries and about %d bytes",
			entries, bytes, admin.RecentEventFlights, admin.MaxFlightReadBytes)
	}

	if len(ov.Stages) != 1 {
		t.Fatalf("stages %+v", ov.Stages)
	}
	st := ov.Stages[0]
	hour := st.LastHour
	if hour.Events != loadHits+3 || hour.Outcomes["hit/SUCCEEDED"] != loadHits || hour.Outcomes["owner/SUCCEEDED"] != 1 ||
		hour.Outcomes["owner/FAILED"] != 2 || len(hour.Outcomes) != 3 {
		t.Errorf("last hour %+v, want %d events: %d hits, 1 owner, 2 failures", hour, loadHits+3, loadHits)
	}
	if hour.P50Ms < 0 || hour.P50Ms > 5 || hour.P99Ms > 5 {
		t.Errorf("last hour latencies p50 %d ms, p99 %d ms, want within the 5 ms bucket", hour.P50Ms, hour.P99Ms)
	}
	// The last 60 s: the load's minute whole while it is the current one, weighted by the
	// part of it still within the last 60 s once it is the previous one.
	weight := 1.0
	switch gen := ov.GeneratedAt; gen.Unix() / 60 {
	case l.minute:
	case l.minute + 1:
		weight = 1 - float64(gen.UnixMilli()-gen.Unix()/60*60_000)/60_000
	default:
		t.Fatalf("the test took over a minute: the load's minute %d, the overview's %d", l.minute, gen.Unix()/60)
	}
	hits, owners := int(math.Round(loadHits*weight)), int(math.Round(weight))
	if st.EventsLastMinute != hits+owners || st.Outcomes["hit/SUCCEEDED"] != hits || st.Outcomes["owner/SUCCEEDED"] != owners ||
		st.Outcomes["owner/FAILED"] != 0 {
		t.Errorf("last minute: %d events %v, want %d hits and %d owner (weight %.3f)", st.EventsLastMinute, st.Outcomes,
			hits, owners, weight)
	}
	if math.Abs(st.PerSecond-float64(st.EventsLastMinute)/60) > 1e-9 || st.P99Ms > 5 {
		t.Errorf("last minute: %.2f/s, p99 %d ms", st.PerSecond, st.P99Ms)
	}
	if st.ResultStreamLen != loadHits {
		t.Errorf("result stream length %d, want %d", st.ResultStreamLen, loadHits)
	}
	if ov.FlightsByStatus["SUCCEEDED"] != 1 || len(ov.FlightsByStatus) != 1 {
		t.Errorf("flights by status %v, want the one SUCCEEDED flight", ov.FlightsByStatus)
	}
	fs, err := l.in.Flights(ctx, admin.FlightFilter{})
	if err != nil || len(fs) != 1 || fs[0].Key != l.key || fs[0].Status != "SUCCEEDED" {
		t.Errorf("flights %+v %v, want the one SUCCEEDED flight %s", fs, err, l.key)
	}
}

// TestBeatAfterTheOverviewsClock: a liveness beat written after the overview read Redis's
// clock (its timestamp is ahead of the overview's) is fresh: age 0, alive, never a negative
// age (-1 means no beat at all).
func TestBeatAfterTheOverviewsClock(t *testing.T) {
	r := redistest.New(t)
	ctx := context.Background()
	ks := topics.Keyspace{Prefix: r.Prefix}
	in, err := admin.New(admin.Config{Client: r.Client, Keyspace: ks, Stages: []string{"interview-evaluation"}})
	if err != nil {
		t.Fatal(err)
	}
	now, err := r.Client.Time(ctx).Result()
	if err != nil {
		t.Fatal(err)
	}
	ahead := strconv.FormatInt(now.UnixMilli()+500, 10)
	if err := r.Client.HSet(ctx, ks.Consumers(topics.ConsumerGroup), "node-a", ahead).Err(); err != nil {
		t.Fatal(err)
	}
	ov, err := in.Overview(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(ov.Consumers) != 1 || ov.Consumers[0].LastBeatAgeMs != 0 || !ov.Consumers[0].Alive {
		t.Errorf("consumers %+v, want node-a alive with age 0", ov.Consumers)
	}
}
