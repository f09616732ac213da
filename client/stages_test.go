package client_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/redis/go-redis/v9"

	"github.com/flightdeck-ai/flightdeck/client"
	"github.com/flightdeck-ai/flightdeck/internal/broker"
	"github.com/flightdeck-ai/flightdeck/topics"
)

// TestCheckStages: an empty registry refuses every stage; a registered stage passes, and an
// unknown one is refused with the known ones listed.
func TestCheckStages(t *testing.T) {
	b := setup(t, client.Config{})
	ctx := context.Background()
	err := b.c.CheckStages(ctx, stageA)
	use, ok := errors.AsType[*client.UnknownStageError](err)
	if !errors.Is(err, client.ErrUnknownStage) || !ok || len(use.Known) != 0 ||
		err.Error() != `unknown stage "interview-evaluation": no consumer has registered any stage yet` {
		t.Errorf("empty registry: %v", err)
	}
	infos := []topics.StageInfo{{Name: stageB, Partitions: 2, Mode: "HYBRID", Model: "sim", Consumer: "c-1"},
		{Name: stageA, Partitions: 1, Mode: "BYPASS", Model: "openai", Consumer: "c-2"}}
	if _, err := broker.RegisterStages(ctx, b.r.Client, b.ks, 1234, infos); err != nil {
		t.Fatal(err)
	}
	st, err := b.c.Stages(ctx)
	want := []client.StageInfo{{Name: stageA, Partitions: 1, Mode: "BYPASS", Model: "openai", Consumer: "c-2", LastSeen: 1234},
		{Name: stageB, Partitions: 2, Mode: "HYBRID", Model: "sim", Consumer: "c-1", LastSeen: 1234}}
	if err != nil || !cmp.Equal(st, want) {
		t.Errorf("Stages = %+v, %v; want %+v", st, err, want)
	}
	if err := b.c.CheckStages(ctx, stageA, stageB, stageA); err != nil {
		t.Errorf("registered stages: %v", err)
	}
	err = b.c.CheckStages(ctx, stageA, "interview-evalution", "x", "x")
	if !errors.Is(err, client.ErrUnknownStage) ||
		err.Error() != `unknown stages "interview-evalution", "x" (known: interview-evaluation, interview-followup)` {
		t.Errorf("typo: %v", err)
	}
	// A value that is not a StageInfo still names a known stage.
	b.r.Client.HSet(ctx, b.ks.Stages(), "odd", "not json")
	if err := b.c.CheckStages(ctx, "odd"); err != nil {
		t.Errorf("stage with a malformed entry: %v", err)
	}
}

// TestStreamStatuses: what the consumer group shows of a task stream that does not exist,
// one nobody read, and one with pending, parked and unread entries.
func TestStreamStatuses(t *testing.T) {
	b := setup(t, client.Config{})
	ctx := context.Background()
	rdb := b.r.Client
	none, fresh, busy := b.ks.Tasks("none"), b.ks.Tasks(stageA), b.ks.Tasks(stageB)
	add := func(stream string, n int) {
		for range n {
			if err := rdb.XAdd(ctx, &redis.XAddArgs{Stream: stream, Values: []any{"k", "v"}}).Err(); err != nil {
				t.Fatal(err)
			}
		}
	}
	add(fresh, 2)
	rdb.XGroupCreateMkStream(ctx, busy, topics.ConsumerGroup, "$")
	add(busy, 5)
	read := func(consumer string, n int64) []redis.XMessage {
		res, err := rdb.XReadGroup(ctx, &redis.XReadGroupArgs{Group: topics.ConsumerGroup, Consumer: consumer,
			Streams: []string{busy, ">"}, Count: n, Block: -1}).Result()
		if err != nil {
			t.Fatal(err)
		}
		return res[0].Messages
	}
	held := read("c-1/0", 2)
	parked := read("c-2/0", 1)
	rdb.XClaim(ctx, &redis.XClaimArgs{Stream: busy, Group: topics.ConsumerGroup, Consumer: topics.ParkingConsumer,
		Messages: []string{parked[0].ID}})
	time.Sleep(20 * time.Millisecond)

	got, err := b.c.StreamStatuses(ctx, none, fresh, busy)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 3 {
		t.Fatalf("%d statuses", len(got))
	}
	if g := got[0]; g != (client.StreamStatus{Stream: none, Lag: -1, LastRead: -1}) {
		t.Errorf("missing stream: %+v", g)
	}
	if g := got[1]; g != (client.StreamStatus{Stream: fresh, Exists: true, Length: 2, Lag: -1, LastRead: -1}) {
		t.Errorf("stream without a group: %+v", g)
	}
	g := got[2]
	if g.Stream != busy || !g.Exists || !g.Group || g.Length != 5 || g.Lag != 2 || g.Pending != 3 || g.Parked != 1 ||
		g.Consumers != 2 || g.LastRead < 0 || g.LastRead > 5*time.Second ||
		g.OldestPending != held[0].ID || g.OldestPendingBy != "c-1/0" || g.OldestPendingIdle < 10*time.Millisecond {
		t.Errorf("busy stream: %+v", g)
	}
}

// TestTallyMissing: the receipts without an event, in enqueue order.
func TestTallyMissing(t *testing.T) {
	t0 := time.Unix(1000, 0)
	tl := client.NewTally(t0)
	for _, r := range []client.Receipt{{TaskID: "c", StreamID: "10-1", EnqueuedAt: t0.Add(time.Second)},
		{TaskID: "a", StreamID: "9-0", EnqueuedAt: t0}, {TaskID: "b", StreamID: "10-0", EnqueuedAt: t0.Add(time.Second)},
		{TaskID: "d", StreamID: "2-0", EnqueuedAt: t0}} {
		tl.Expect(r)
	}
	tl.Observe(topics.Event{TaskID: "a", Status: topics.StatusSucceeded}, t0)
	var ids []string
	for _, r := range tl.Missing() {
		ids = append(ids, r.TaskID)
	}
	if !cmp.Equal(ids, []string{"d", "b", "c"}) {
		t.Errorf("Missing = %v, want [d b c]", ids)
	}
}
