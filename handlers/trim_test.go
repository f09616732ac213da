package handlers

import (
	"context"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/flightdeck-ai/flightdeck/internal/redistest"
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
