package broker

import (
	"context"
	"encoding/json"
	"errors"
	"testing"
	"time"

	"github.com/flightdeck-ai/flightdeck/topics"
	"github.com/redis/go-redis/v9"
)

// TestWriterScheduleHorizon: EnqueueTask refuses a notBefore past its horizon before it sends
// anything (the client points at no server), with the reason a consumer dead-letters it with.
func TestWriterScheduleHorizon(t *testing.T) {
	rdb := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1", MaxRetries: -1, DialTimeout: 100 * time.Millisecond})
	defer rdb.Close()
	far := topics.Task{TaskID: "t", Stage: "s", Tenant: "a", Input: json.RawMessage(`1`), NotBefore: "9999-12-31T00:00:00Z"}
	for _, w := range []Writer{{Client: rdb}, {Client: rdb, ScheduleHorizon: time.Hour}} {
		_, err := w.EnqueueTask(context.Background(), far)
		if ite, ok := errors.AsType[*topics.InvalidTaskError](err); !ok || ite.Reason != topics.ReasonNotBeforeTooFar {
			t.Errorf("horizon %v: EnqueueTask = %v, want %s", w.ScheduleHorizon, err, topics.ReasonNotBeforeTooFar)
		}
	}
	// Off: the task goes to Redis (which is not there).
	_, err := Writer{Client: rdb, ScheduleHorizon: -1}.EnqueueTask(context.Background(), far)
	if err == nil || errors.Is(err, topics.ErrInvalidTask) {
		t.Errorf("horizon off: EnqueueTask = %v, want a connection error", err)
	}
}
