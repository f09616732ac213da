package handlers_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill-redisstream/pkg/redisstream"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"

	"github.com/flightdeck-ai/flightdeck/handlers"
	"github.com/flightdeck-ai/flightdeck/topics"
)

// TestQueueWaitFromEntry: the queue wait (the queue-wait histogram, the end-to-end histogram
// and the events' queuedMs) comes from the task's stream entry, not from the producer's
// enqueuedAt: a task claiming to be enqueued 23 hours ago, inside the allowed skew, shows the
// moments it really waited. An entry whose producer gave it an id 23 hours back (XADD with an
// explicit id, on a stream idle since) is bounded by the consumer's last read that found the
// stream drained. A task re-appended from the scheduled set counts from its re-append, when
// it was due.
func TestQueueWaitFromEntry(t *testing.T) {
	b := setup(t)
	reg := prometheus.NewRegistry()
	b.consumer("c1", func(c *handlers.Config) { c.Registry = reg })
	stage := "interview-evaluation"
	dayAgo := time.Now().Add(-23 * time.Hour)
	b.xadd(stage, redisstream.UUIDHeaderKey, "u-old", "payload",
		evalTask("claims-old", `"input":{"a":1},"enqueuedAt":"`+topics.FormatTime(dayAgo)+`"`))
	evs := b.eventsFor([]string{stage}, []string{"claims-old"}, 10*time.Second)

	// The follow-up stream has no entry yet, so an explicit id may lie 23 hours back (ids only
	// have to grow); the subscriber has found that stream drained meanwhile.
	waitFor(t, 5*time.Second, "the first task's entry acknowledged", func() bool {
		return b.r.Client.XPending(b.ctx, b.ks.Tasks(stage), topics.ConsumerGroup).Val().Count == 0
	})
	back := fmt.Sprintf("%d-0", dayAgo.UnixMilli())
	err := b.r.Client.XAdd(b.ctx, &redis.XAddArgs{Stream: b.ks.Tasks("interview-followup"), ID: back,
		Values: []any{redisstream.UUIDHeaderKey, "u-back", "payload",
			`{"taskId":"id-back","stage":"interview-followup","tenant":"acme","input":{"b":1}}`}}).Err()
	if err != nil {
		t.Fatalf("XADD with an id 23 h back on the follow-up stream: %v", err)
	}
	// Scheduled 2.5 s ahead: it waits in the scheduled set, then counts from its re-append.
	b.xadd(stage, redisstream.UUIDHeaderKey, "u-later", "payload", evalTask("later",
		`"input":{"c":1},"enqueuedAt":"`+topics.FormatTime(dayAgo)+`","notBefore":"`+
			topics.FormatTime(time.Now().Add(2500*time.Millisecond))+`"`))
	for id, e := range b.eventsFor([]string{stage, "interview-followup"}, []string{"id-back", "later"}, 15*time.Second) {
		evs[id] = e
	}
	for _, id := range []string{"claims-old", "id-back", "later"} {
		e := evs[id]
		if len(e) == 0 || e[0].Status != topics.StatusSucceeded {
			t.Errorf("%s: %+v", id, e)
			continue
		}
		if q := e[0].QueuedMs; q < 0 || q > 60_000 {
			t.Errorf("%s: queuedMs %d; want the moments it waited, not 23 h", id, q)
		}
	}
	for _, st := range []string{stage, "interview-followup"} {
		if n, sum := histogram(t, reg, "flightdeck_queue_wait_seconds", st); n == 0 || sum > 60 {
			t.Errorf("%s: queue wait %d samples summing to %g s; want moments, not 23 h", st, n, sum)
		}
		if n, sum := histogram(t, reg, "flightdeck_end_to_end_seconds", st); n == 0 || sum > 60 {
			t.Errorf("%s: end to end %d samples summing to %g s; want moments, not 23 h", st, n, sum)
		}
	}
}
