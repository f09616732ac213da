package flight_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/flightdeck-ai/flightdeck/flight"
	"github.com/flightdeck-ai/flightdeck/topics"
)

// TestAnswerContextsOfManyStages: the scripts keep the answer contexts (result stream, group,
// parking consumer) they parsed, by their text, and start over after 64. Owners of 70 stages,
// then the first stages again, each with a follower parked on its flight, answer both tasks
// into their own stage's result stream and acknowledge both entries in their own task stream.
func TestAnswerContextsOfManyStages(t *testing.T) {
	b := setup(t)
	stages := make([]string, 0, 75)
	for i := range 70 {
		stages = append(stages, fmt.Sprintf("stage-%02d", i))
	}
	stages = append(stages, stages[:5]...)
	for i, stage := range stages {
		stream := b.ks.Tasks(stage)
		if i < 70 {
			if err := b.rdb.XGroupCreateMkStream(b.ctx, stream, topics.ConsumerGroup, "$").Err(); err != nil {
				t.Fatal(err)
			}
		}
		task := func(id string) flight.Task {
			entry, err := b.rdb.XAdd(b.ctx, &redis.XAddArgs{Stream: stream, Values: []any{"task", id}}).Result()
			if err != nil {
				t.Fatal(err)
			}
			if err := b.rdb.XReadGroup(b.ctx, &redis.XReadGroupArgs{Group: topics.ConsumerGroup, Consumer: "c1",
				Streams: []string{stream, ">"}, Count: 1, Block: -1}).Err(); err != nil {
				t.Fatal(err)
			}
			return flight.Task{ID: id, Stream: stream, Entry: entry}
		}
		key := fmt.Sprintf("k%d", i)
		owner, follower := task(fmt.Sprintf("t%d", i)), task(fmt.Sprintf("f%d", i))
		d := b.acquireWith(flight.AcquireParams{Key: key, Stage: stage, OwnerID: "A", Task: owner, Start: true})
		if d.Owner == nil {
			t.Fatalf("%s: not the owner: %+v", stage, d)
		}
		if f := b.acquireWith(flight.AcquireParams{Key: key, Stage: stage, OwnerID: "B", Task: follower}); f.Action != flight.ActionFollowerWait {
			t.Fatalf("%s: follower not parked: %+v", stage, f)
		}
		if _, err := b.complete(*d.Owner, `{"n":1}`); err != nil {
			t.Fatal(err)
		}
		for _, tk := range []flight.Task{owner, follower} {
			if h := b.holder(tk); h != "" {
				t.Errorf("%s: entry %s of %s still pending under %q", stage, tk.Entry, tk.ID, h)
			}
		}
	}
	for i, stage := range stages[:70] {
		msgs, err := b.rdb.XRange(b.ctx, b.ks.Results(stage), "-", "+").Result()
		if err != nil {
			t.Fatal(err)
		}
		want := 2 // the owner's task and the parked one
		if i < 5 {
			want = 4
		}
		if len(msgs) != want {
			t.Errorf("%s: %d events on its result stream, want %d", stage, len(msgs), want)
		}
	}
}

// TestPinnedPoliciesOfManyFlights: the scripts keep the pinned policies they parsed, by their
// text, and start over after 64. Each of 70 flights, then the first ones again, is judged by
// its own pinned running TTL: a follower with another policy hears the owner's end of attempt.
func TestPinnedPoliciesOfManyFlights(t *testing.T) {
	b := setup(t)
	owners := map[int]flight.Decision{}
	for i := range 75 {
		k := i % 70
		key := fmt.Sprintf("pol-%d", k)
		if _, ok := owners[k]; !ok {
			pol := b.pol
			pol.RunningTTL = time.Minute + time.Duration(k)*time.Second
			owners[k] = b.acquireWith(flight.AcquireParams{Key: key, OwnerID: "A", Task: b.task(fmt.Sprintf("a%d", k)),
				Start: true, Policy: pol})
		}
		other := b.pol
		other.RunningTTL = 5 * time.Minute
		got := b.acquireWith(flight.AcquireParams{Key: key, OwnerID: "B", Task: b.task(fmt.Sprintf("b%d", i)), Policy: other})
		own := owners[k]
		if got.Action != flight.ActionFollowerWait || !got.ExpireAt.Equal(own.Owner.ExpireAt) {
			t.Errorf("%s: follower heard %s end at %v, the owner's attempt ends at %v", key, got.Action, got.ExpireAt, own.Owner.ExpireAt)
		}
	}
}
