package handlers_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/flightdeck-ai/flightdeck/handlers"
	"github.com/flightdeck-ai/flightdeck/internal/testkit/flighttest"
	"github.com/flightdeck-ai/flightdeck/topics"
)

// TestHandlerFailureIsRetriedThenDeadLettered: a task whose every run fails for a reason of its
// own (here its flight's record is unreadable, a protocol error) is run four times, the first
// and three retries, then dead-lettered handler_failed with a FAILED event, and its entry is
// acknowledged; a task behind it still runs, so the consumer keeps going.
func TestHandlerFailureIsRetriedThenDeadLettered(t *testing.T) {
	b := setup(t)
	bad := topics.Task{TaskID: "bent", Stage: "interview-evaluation", Tenant: "acme", Input: simInput(1, 0)}
	key, err := handlers.TaskKey(bad)
	if err != nil {
		t.Fatal(err)
	}
	if err := flighttest.Set(b.ctx, b.r.Client, b.ks.Flight(key), "status", "WHATEVER"); err != nil {
		t.Fatal(err)
	}
	log := testLog(t)
	b.consumer("c1", func(c *handlers.Config) {
		l := c.Logger.Output(log)
		c.Logger = &l
	})
	start := time.Now()
	b.enqueue(bad)
	b.enqueue(topics.Task{TaskID: "fine", Stage: "interview-evaluation", Input: simInput(2, 0)})
	got := b.eventsFor([]string{"interview-evaluation"}, []string{"bent", "fine"}, 20*time.Second)
	if e := got["fine"]; len(e) != 1 || e[0].Status != topics.StatusSucceeded {
		t.Fatalf("the task behind: %+v", e)
	}
	e := got["bent"]
	if len(e) != 1 || e[0].Status != topics.StatusFailed || e[0].ErrorCode != "handler_failed" {
		t.Fatalf("the failing task: %+v, want one FAILED event handler_failed", e)
	}
	// Three retries wait 200, 400 and 800 ms, with 30% jitter.
	if took := time.Since(start); took < 900*time.Millisecond {
		t.Errorf("dead-lettered after %v: the retries did not wait", took)
	}
	if n := strings.Count(log.String(), "trying again"); n != 3 {
		t.Errorf("%d retries logged, want 3", n)
	}
	dlq := b.r.Client.XRange(b.ctx, b.ks.DLQ("interview-evaluation"), "-", "+").Val()
	if len(dlq) != 1 || dlq[0].Values["reason"] != "handler_failed" ||
		!strings.Contains(fmt.Sprint(dlq[0].Values["detail"]), "corrupt flight record") {
		t.Errorf("dead letters: %+v", dlq)
	}
	for deadline := time.Now().Add(5 * time.Second); b.r.Client.XPending(b.ctx, b.ks.Tasks("interview-evaluation"), topics.ConsumerGroup).Val().Count != 0; {
		if time.Now().After(deadline) {
			t.Fatal("the dead-lettered entry is still pending")
		}
		time.Sleep(50 * time.Millisecond)
	}
}
