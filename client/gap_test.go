package client_test

import (
	"context"
	"testing"
	"time"

	"github.com/flightdeck-ai/flightdeck/client"
	"github.com/flightdeck-ai/flightdeck/flight"
	"github.com/flightdeck-ai/flightdeck/topics"
)

// finish runs the flight of receipt r to its end as a consumer would (owner, complete), then
// trims the stage's result stream to nothing: the task's event is gone.
func (b *testBundle) finishAndTrim(t *testing.T, rs []client.Receipt, result string) {
	t.Helper()
	ctx := context.Background()
	coord, err := flight.NewCoordinator(flight.Config{Client: b.r.Client, Keyspace: b.ks})
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range rs {
		d, err := coord.Acquire(ctx, flight.AcquireParams{Key: r.RequestKey, OwnerID: "c", Task: flight.Task{ID: r.TaskID},
			Stage: r.Stage, Tenant: r.Tenant, Start: true})
		if err != nil {
			t.Fatal(err)
		}
		if d.Owner != nil {
			if _, err := coord.Complete(ctx, *d.Owner, []byte(result), 0); err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := b.r.Client.XTrimMaxLen(ctx, b.ks.Results(stageA), 0).Err(); err != nil {
		t.Fatal(err)
	}
}

// TestAwaitAfterTrim: a task whose event was trimmed from the capped result stream before the
// client read it is answered from its flight's stored outcome, instead of waiting until the
// timeout.
func TestAwaitAfterTrim(t *testing.T) {
	t.Parallel()
	b := setup(t, client.Config{})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	r, err := b.c.Enqueue(ctx, newTask(stageA, `{"q":"trimmed"}`))
	if err != nil {
		t.Fatal(err)
	}
	if r.RequestKey == "" || r.Tenant != "acme" {
		t.Fatalf("receipt %+v carries no request key", r)
	}
	b.finishAndTrim(t, []client.Receipt{r}, `{"score":5}`)
	start := time.Now()
	ev, err := b.c.Await(ctx, r)
	if err != nil {
		t.Fatalf("Await: %v", err)
	}
	if ev.TaskID != r.TaskID || ev.Status != topics.StatusSucceeded || string(ev.Result) != `{"score":5}` ||
		ev.Shared != topics.SharedHit || ev.RequestKey != r.RequestKey {
		t.Errorf("event %+v", ev)
	}
	if took := time.Since(start); took > 3*time.Second {
		t.Errorf("Await took %v", took)
	}
}

// TestCollectAfterTrim: the same for Collect, over several receipts.
func TestCollectAfterTrim(t *testing.T) {
	t.Parallel()
	b := setup(t, client.Config{})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var rs []client.Receipt
	for _, in := range []string{`{"q":1}`, `{"q":2}`, `{"q":3}`} {
		r, err := b.c.Enqueue(ctx, newTask(stageA, in))
		if err != nil {
			t.Fatal(err)
		}
		rs = append(rs, r)
	}
	b.finishAndTrim(t, rs, `"ok"`)
	got := map[string]topics.Event{}
	if err := b.c.Collect(ctx, rs, func(ev topics.Event) { got[ev.TaskID] = ev }); err != nil {
		t.Fatalf("Collect: %v (got %d)", err, len(got))
	}
	for _, r := range rs {
		if ev := got[r.TaskID]; ev.Status != topics.StatusSucceeded || string(ev.Result) != `"ok"` {
			t.Errorf("%s: %+v", r.TaskID, ev)
		}
	}
}
