package admin_test

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/flightdeck-ai/flightdeck/admin"
	"github.com/flightdeck-ai/flightdeck/flight"
	"github.com/flightdeck-ai/flightdeck/internal/broker"
	"github.com/flightdeck-ai/flightdeck/internal/testkit/redistest"
	"github.com/flightdeck-ai/flightdeck/topics"
)

// TestFlightsOnCluster: on a 3-master Redis Cluster, with a stage split over 3 partitions,
// the flight list finds a running flight by its owner's pending entry (on whichever master its
// partition lives) and finished flights by their events, and the overview counts the parked
// entry: every read names its key, which go-redis routes.
func TestFlightsOnCluster(t *testing.T) {
	c := redistest.StartCluster(t, 3)
	rdb := c.Client()
	ctx := context.Background()
	const stage = "summarize"
	ks := topics.Keyspace{Prefix: redistest.Prefix(), Partitions: map[string]int{stage: 3}}
	coord, err := flight.NewCoordinator(flight.Config{Client: rdb, Keyspace: ks})
	if err != nil {
		t.Fatal(err)
	}
	if err := coord.Load(ctx); err != nil {
		t.Fatal(err)
	}
	for _, s := range ks.TaskStreams(stage) {
		if err := rdb.XGroupCreateMkStream(ctx, s, topics.ConsumerGroup, "0").Err(); err != nil {
			t.Fatal(err)
		}
	}
	w := broker.Writer{Client: rdb, Keyspace: ks}
	// The running flight: its owner's task entry delivered to c1 and its flight RUNNING; a
	// duplicate's entry parked.
	owner := topics.Task{TaskID: "own", Stage: stage, Tenant: "acme", RequestKey: "running", Input: json.RawMessage(`{}`)}
	dup := owner
	dup.TaskID = "dup"
	for _, tk := range []topics.Task{owner, dup} {
		stream := ks.TaskStreamFor(stage, tk.TaskID)
		if _, err := w.EnqueueTask(ctx, tk); err != nil {
			t.Fatal(err)
		}
		got, err := rdb.XReadGroup(ctx, &redis.XReadGroupArgs{Group: topics.ConsumerGroup, Consumer: "c1/0",
			Streams: []string{stream, ">"}, Count: 1}).Result()
		if err != nil {
			t.Fatal(err)
		}
		if tk.TaskID == "dup" {
			if err := rdb.XClaimJustID(ctx, &redis.XClaimArgs{Stream: stream, Group: topics.ConsumerGroup,
				Consumer: topics.ParkingConsumer, Messages: []string{got[0].Messages[0].ID}}).Err(); err != nil {
				t.Fatal(err)
			}
		}
	}
	running, _ := flight.TaskKey(owner)
	if d, err := coord.Acquire(ctx, flight.AcquireParams{Key: running, OwnerID: "c1", Stage: stage, Tenant: "acme",
		Start: true}); err != nil || d.Owner == nil {
		t.Fatalf("acquire: %+v %v", d, err)
	}
	// Finished flights, named by their events.
	finished := map[string]bool{}
	for i := range 3 {
		key, _ := flight.NamespacedKey(stage, "acme", fmt.Sprintf("done-%d", i), 1)
		d, err := coord.Acquire(ctx, flight.AcquireParams{Key: key, OwnerID: "c1", Stage: stage, Tenant: "acme", Start: true})
		if err != nil || d.Owner == nil {
			t.Fatalf("acquire: %+v %v", d, err)
		}
		if _, err := coord.Complete(ctx, *d.Owner, []byte(`{"ok":true}`), time.Millisecond); err != nil {
			t.Fatal(err)
		}
		if err := w.PublishEvents(ctx, topics.Event{TaskID: fmt.Sprintf("t%d", i), RequestKey: key, Stage: stage,
			Tenant: "acme", Status: topics.StatusSucceeded, Shared: topics.SharedOwner, FinishedAt: time.Now()}); err != nil {
			t.Fatal(err)
		}
		finished[key] = true
	}

	in, err := admin.New(admin.Config{Client: rdb, Keyspace: ks, Stages: []string{stage}})
	if err != nil {
		t.Fatal(err)
	}
	fs, err := in.Flights(ctx, admin.FlightFilter{})
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]string{}
	for _, f := range fs {
		got[f.Key] = f.Status
	}
	if len(got) != 4 || got[running] != "RUNNING" {
		t.Errorf("flights %v, want %s RUNNING and 3 SUCCEEDED", got, running)
	}
	for k := range finished {
		if got[k] != "SUCCEEDED" {
			t.Errorf("flight %s: %q, want SUCCEEDED", k, got[k])
		}
	}
	ov, err := in.Overview(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if st := ov.Stages[0]; st.Parked != 1 || st.Pending != 1 || ov.FlightsByStatus["RUNNING"] != 1 || ov.FlightsByStatus["SUCCEEDED"] != 3 {
		t.Errorf("overview: stage %+v, flights %v", st, ov.FlightsByStatus)
	}
}
