package handlers_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill-redisstream/pkg/redisstream"

	"github.com/flightdeck-ai/flightdeck/handlers"
	"github.com/flightdeck-ai/flightdeck/topics"
)

// TestScheduleHorizon: a task whose notBefore lies past its stage's scheduleHorizon (1 h on
// the evaluation stage, the 7-day default on the follow-up stage) is dead-lettered
// not_before_too_far, its detail naming the limit, and gets a FAILED event; the scheduled set
// never holds it. A task just inside the horizon waits in the scheduled set.
func TestScheduleHorizon(t *testing.T) {
	b := setup(t)
	b.consumer("c1", func(c *handlers.Config) {
		for i := range c.Stages {
			if c.Stages[i].Name == "interview-evaluation" {
				c.Stages[i].ScheduleHorizon = time.Hour
			}
		}
	})
	now := time.Now()
	payload := func(id, stage string, nb string) string {
		return `{"taskId":"` + id + `","stage":"` + stage + `","tenant":"acme","input":"` + id + `","notBefore":"` + nb + `"}`
	}
	ev, fu := "interview-evaluation", "interview-followup"
	b.xadd(ev, redisstream.UUIDHeaderKey, "u1", "payload", payload("far-1h", ev, topics.FormatTime(now.Add(time.Hour+time.Minute))))
	b.xadd(ev, redisstream.UUIDHeaderKey, "u2", "payload", payload("near-1h", ev, topics.FormatTime(now.Add(time.Hour-time.Minute))))
	b.xadd(fu, redisstream.UUIDHeaderKey, "u3", "payload", payload("far-9999", fu, "9999-12-31T00:00:00Z"))
	b.xadd(fu, redisstream.UUIDHeaderKey, "u4", "payload",
		payload("near-7d", fu, topics.FormatTime(now.Add(topics.DefaultScheduleHorizon-time.Minute))))

	for stage, c := range map[string]struct{ id, limit string }{ev: {"far-1h", "1h0m0s"}, fu: {"far-9999", "168h0m0s"}} {
		dl := b.dlq(stage, 1, 10*time.Second)
		if len(dl) != 1 {
			t.Fatalf("%s: %d dead letters, want the far task's", stage, len(dl))
		}
		reason, _ := dl[0].Values[topics.FieldReason].(string)
		detail, _ := dl[0].Values[topics.FieldDetail].(string)
		if reason != string(topics.ReasonNotBeforeTooFar) || !strings.Contains(detail, c.limit) || !strings.Contains(detail, "scheduleHorizon") {
			t.Errorf("%s: dead letter %q %q; want not_before_too_far naming %s and scheduleHorizon", c.id, reason, detail, c.limit)
		}
		evs := b.eventsFor([]string{stage}, []string{c.id}, 10*time.Second)[c.id]
		if len(evs) == 0 || evs[0].Status != topics.StatusFailed || evs[0].ErrorCode != string(topics.ReasonNotBeforeTooFar) ||
			evs[0].ErrorType != "invalid_task" || !strings.Contains(evs[0].Error, c.limit) {
			t.Errorf("%s: events %+v; want FAILED invalid_task not_before_too_far naming %s", c.id, evs, c.limit)
		}
	}
	for stage, id := range map[string]string{ev: "near-1h", fu: "near-7d"} {
		deadline := time.Now().Add(10 * time.Second)
		for {
			members := b.r.Client.ZRange(b.ctx, b.ks.Scheduled(stage), 0, -1).Val()
			if len(members) == 1 {
				break
			}
			if len(members) > 1 || time.Now().After(deadline) {
				t.Fatalf("%s: scheduled set %q; want %s alone", stage, members, id)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	b.waitAcked(ev, 10*time.Second)
	b.waitAcked(fu, 10*time.Second)
	if got := b.events([]string{ev, fu}, 3, 300*time.Millisecond); len(got["near-1h"]) > 0 || len(got["near-7d"]) > 0 {
		t.Errorf("a task inside the horizon was answered early: %+v", got)
	}
}

// TestStageScheduleHorizonConfig: the stage file sets scheduleHorizon; 0 takes the 7-day
// default and a negative one is refused.
func TestStageScheduleHorizonConfig(t *testing.T) {
	stages, err := handlers.LoadStages("", []string{"interview-evaluation"})
	if err != nil || stages[0].ScheduleHorizon != topics.DefaultScheduleHorizon {
		t.Fatalf("default scheduleHorizon: %v, %v", stages, err)
	}
	path := filepath.Join(t.TempDir(), "stages.yaml")
	if err := os.WriteFile(path, []byte("stages:\n  interview-evaluation:\n    scheduleHorizon: 36h\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if set, err := handlers.LoadStages(path, []string{"interview-evaluation"}); err != nil || set[0].ScheduleHorizon != 36*time.Hour {
		t.Errorf("scheduleHorizon: 36h in the stage file: %v, %v", set, err)
	}
	bad := stages[0]
	bad.ScheduleHorizon = -time.Hour
	if err := bad.Validate(); err == nil || !strings.Contains(err.Error(), "scheduleHorizon") {
		t.Errorf("a negative scheduleHorizon: %v", err)
	}
}
