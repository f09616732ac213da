package handlers

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/redis/go-redis/v9"

	"github.com/flightdeck-ai/flightdeck/internal/testkit/redistest"
	"github.com/flightdeck-ai/flightdeck/topics"
)

// noScanClient returns a client of r's server for a new ACL user that may run every command
// but SCAN, on r's prefix only; the user is deleted with the test.
func noScanClient(t *testing.T, r *redistest.Target) *redis.Client {
	t.Helper()
	ctx := context.Background()
	var b [6]byte
	_, _ = rand.Read(b[:])
	name, pw := "noscan-"+hex.EncodeToString(b[:]), "pw-"+hex.EncodeToString(b[:])
	if err := r.Client.Do(ctx, "ACL", "SETUSER", name, "on", ">"+pw, "resetkeys", "~"+r.Prefix+":*",
		"resetchannels", "+@all", "-scan").Err(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = r.Client.Do(context.Background(), "ACL", "DELUSER", name).Err() })
	opt := *r.Client.Options()
	opt.Username, opt.Password = name, pw
	c := redis.NewClient(&opt)
	t.Cleanup(func() { _ = c.Close() })
	if err := c.Scan(ctx, 0, "*", 10).Err(); err == nil || !strings.Contains(err.Error(), "NOPERM") {
		t.Fatalf("SCAN under the test user: %v, want NOPERM", err)
	}
	return c
}

// collectGauges reads the collector's gauges, named "<gauge>{<label values, by label name>}".
func collectGauges(c *redisCollector) map[string]float64 {
	names := map[*prometheus.Desc]string{c.pending: "flightdeck_pending_entries", c.backlog: "flightdeck_backlog_entries",
		c.dlq: "flightdeck_dlq_length", c.parked: "flightdeck_parked_followers"}
	ch := make(chan prometheus.Metric, 64)
	go func() { c.Collect(ch); close(ch) }()
	out := map[string]float64{}
	for m := range ch {
		var d dto.Metric
		if m.Write(&d) != nil {
			continue
		}
		var labels []string
		for _, l := range d.GetLabel() {
			labels = append(labels, l.GetValue())
		}
		out[names[m.Desc()]+"{"+strings.Join(labels, ",")+"}"] = d.GetGauge().GetValue()
	}
	return out
}

// TestParkedGaugeWithoutScan: flightdeck_parked_followers counts the entries pending under
// the parking consumer on every partition of the stage, read by XPENDING under a Redis user
// that may not SCAN; the gauges of a stage with no stream yet are zero.
func TestParkedGaugeWithoutScan(t *testing.T) {
	ctx := context.Background()
	r := redistest.New(t)
	ks := topics.Keyspace{Prefix: r.Prefix, Partitions: map[string]int{"ev": 2}}
	rdb := noScanClient(t, r)
	// Two partitions: 5 entries each, delivered to c1; 3 of the first and 1 of the second
	// are then parked (XCLAIM to the parking consumer, as acquire does).
	parked := 0
	for i, stream := range ks.TaskStreams("ev") {
		if err := rdb.XGroupCreateMkStream(ctx, stream, topics.ConsumerGroup, "0").Err(); err != nil {
			t.Fatal(err)
		}
		for range 5 {
			if err := rdb.XAdd(ctx, &redis.XAddArgs{Stream: stream, Values: []any{topics.FieldUUID, "u", topics.FieldPayload, "{}"}}).Err(); err != nil {
				t.Fatal(err)
			}
		}
		got, err := rdb.XReadGroup(ctx, &redis.XReadGroupArgs{Group: topics.ConsumerGroup, Consumer: "c1/0",
			Streams: []string{stream, ">"}, Count: 5}).Result()
		if err != nil {
			t.Fatal(err)
		}
		park := 3 - 2*i
		var ids []string
		for _, m := range got[0].Messages[:park] {
			ids = append(ids, m.ID)
		}
		if err := rdb.XClaimJustID(ctx, &redis.XClaimArgs{Stream: stream, Group: topics.ConsumerGroup,
			Consumer: topics.ParkingConsumer, Messages: ids}).Err(); err != nil {
			t.Fatal(err)
		}
		parked += park
	}
	c := newRedisCollector(rdb, ks, []string{"ev", "fu"})
	got := collectGauges(c)
	want := map[string]float64{
		"flightdeck_parked_followers{ev}":        float64(parked),
		"flightdeck_pending_entries{c1,ev}":      float64(10 - parked),
		"flightdeck_pending_entries{~parked,ev}": float64(parked),
		"flightdeck_parked_followers{fu}":        0,
		"flightdeck_backlog_entries{fu}":         0,
		"flightdeck_backlog_entries{ev}":         0,
	}
	for k, v := range want {
		if g, ok := got[k]; !ok || g != v {
			t.Errorf("%s = %v (reported %v), want %v; all: %v", k, g, ok, v, got)
		}
	}
}
