package client_test

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/flightdeck-ai/flightdeck/client"
	"github.com/flightdeck-ai/flightdeck/topics"
)

// TestAwaitMatchesTenantAndKey: on a result stream that every producer of the stage writes
// to, an event under the task's id but of another tenant or request key (a task another
// producer enqueued under the same id first) does not answer Await or Collect; the event of
// a dead-lettered task, which has no request key, does.
func TestAwaitMatchesTenantAndKey(t *testing.T) {
	t.Parallel()
	b := setup(t, client.Config{})
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	tk := newTask(stageA, `{"q":"victim"}`)
	tk.TaskID = "predictable-1"
	r, err := b.c.Enqueue(ctx, tk)
	if err != nil {
		t.Fatal(err)
	}
	otherTenant := eventOf(r, topics.SharedOwner)
	otherTenant.Tenant, otherTenant.Result = "evil", json.RawMessage(`{"forged":1}`)
	otherKey := eventOf(r, topics.SharedOwner)
	otherKey.RequestKey, otherKey.Result = "attacker-key", json.RawMessage(`{"forged":2}`)
	own := eventOf(r, topics.SharedHit)
	if err := b.w.PublishEvents(ctx, otherTenant, otherKey, own); err != nil {
		t.Fatal(err)
	}
	e, err := b.c.Await(ctx, r)
	if err != nil {
		t.Fatal(err)
	}
	if e.Shared != topics.SharedHit || string(e.Result) != `{"ok":true}` {
		t.Errorf("Await = %+v, want the task's own event", e)
	}
	var got []topics.Event
	if err := b.c.Collect(ctx, []client.Receipt{r}, func(e topics.Event) { got = append(got, e) }); err != nil {
		t.Fatal(err)
	}
	if len(got) != 1 || got[0].Shared != topics.SharedHit {
		t.Errorf("Collect = %+v, want the task's own event", got)
	}

	// A dead-lettered task's event carries no request key: it matches by its stream entry. The
	// same event for another entry (another producer's refused task under this id) does not.
	tk2 := newTask(stageA, `{"q":"dead"}`)
	r2, err := b.c.Enqueue(ctx, tk2)
	if err != nil {
		t.Fatal(err)
	}
	dead := topics.Event{TaskID: r2.TaskID, Stage: stageA, Tenant: r2.Tenant, Status: topics.StatusFailed,
		Shared: topics.SharedOwner, ErrorType: client.ErrorTypeInvalidTask, ErrorCode: "deadline_passed",
		Error: "deadline passed", FinishedAt: time.Now(), Entry: r2.StreamID}
	spoof := dead
	spoof.Entry, spoof.ErrorCode = "1-1", "unknown_field"
	if err := b.w.PublishEvents(ctx, spoof, dead); err != nil {
		t.Fatal(err)
	}
	if e, err := b.c.Await(ctx, r2); err != nil || e.ErrorType != client.ErrorTypeInvalidTask || e.ErrorCode != "deadline_passed" {
		t.Errorf("Await(dead-lettered) = %+v, %v; want its invalid_task event", e, err)
	}
}
