package handlers

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/flightdeck-ai/flightdeck/internal/testkit/redistest"
	"github.com/flightdeck-ai/flightdeck/topics"
)

// TestTrimAcked: only entries delivered and acknowledged by every group are trimmed; unread
// and pending entries stay.
func TestTrimAcked(t *testing.T) {
	r := redistest.New(t)
	ctx := context.Background()
	s := r.Prefix + ":tasks:x"
	var ids []string
	for range 300 {
		ids = append(ids, r.Client.XAdd(ctx, &redis.XAddArgs{Stream: s, Values: []any{"k", "v"}}).Val())
	}
	r.Client.XGroupCreate(ctx, s, "flightdeck", "0")
	r.Client.XGroupCreate(ctx, s, "other", "0")
	if n, _ := trimAcked(ctx, r.Client, s); n != 0 {
		t.Fatalf("trimmed %d entries nobody read", n)
	}
	// flightdeck reads 250 and acks all but #100; "other" reads 200 and acks them all.
	r.Client.XReadGroup(ctx, &redis.XReadGroupArgs{Group: "flightdeck", Consumer: "c", Streams: []string{s, ">"}, Count: 250})
	for i, id := range ids[:250] {
		if i != 100 {
			r.Client.XAck(ctx, s, "flightdeck", id)
		}
	}
	r.Client.XReadGroup(ctx, &redis.XReadGroupArgs{Group: "other", Consumer: "c", Streams: []string{s, ">"}, Count: 200})
	for _, id := range ids[:200] {
		r.Client.XAck(ctx, s, "other", id)
	}
	if _, err := trimAcked(ctx, r.Client, s); err != nil {
		t.Fatal(err)
	}
	left := r.Client.XRange(ctx, s, "-", "+").Val()
	if len(left) == 0 || topics.IDLess(ids[100], left[0].ID) {
		t.Fatalf("the pending entry %s was trimmed (first left %v)", ids[100], left[0].ID)
	}
	if len(left) == 300 {
		t.Error("nothing trimmed although 100 entries were acknowledged by every group")
	}
	if left[len(left)-1].ID != ids[299] {
		t.Error("unread entries were trimmed")
	}
}

// TestTrimResultsByAge: result events older than the retention (by Redis's clock, from their
// stream ids) are trimmed, whole stream nodes at a time; newer ones stay.
func TestTrimResultsByAge(t *testing.T) {
	r := redistest.New(t)
	ctx := context.Background()
	ks := topics.Keyspace{Prefix: r.Prefix}
	c := &Consumer{rdb: r.Client, cfg: Config{Keyspace: ks, ResultRetention: time.Hour,
		Stages: []StageConfig{{Name: stageEvaluation}}}}
	s := ks.Results(stageEvaluation)
	old := time.Now().Add(-2 * time.Hour).UnixMilli()
	for i := range 300 {
		r.Client.XAdd(ctx, &redis.XAddArgs{Stream: s, ID: fmt.Sprintf("%d-%d", old, i+1), Values: []any{"k", "old"}})
	}
	fresh := r.Client.XAdd(ctx, &redis.XAddArgs{Stream: s, Values: []any{"k", "fresh"}}).Val()
	c.trimResults(ctx)
	left := r.Client.XRange(ctx, s, "-", "+").Val()
	if len(left) > 101 {
		t.Errorf("%d of 301 events left: the events of two hours ago were not trimmed", len(left))
	}
	if len(left) == 0 || left[len(left)-1].ID != fresh {
		t.Errorf("the fresh event was trimmed")
	}
	c.cfg.ResultRetention = -1 // off
	r.Client.XAdd(ctx, &redis.XAddArgs{Stream: s, ID: fmt.Sprintf("%d-0", time.Now().UnixMilli()+1), Values: []any{"k", "x"}})
	n := r.Client.XLen(ctx, s).Val()
	c.trimResults(ctx)
	if r.Client.XLen(ctx, s).Val() != n {
		t.Error("trimmed with the retention off")
	}
}
