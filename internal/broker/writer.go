package broker

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/google/uuid"
	"github.com/redis/go-redis/v9"

	"github.com/flightdeck-ai/flightdeck/topics"
)

// Writer appends entries pipelined, with an approximate MAXLEN, in watermill-redisstream's
// wire format of FieldUUID and FieldPayload. It is safe for concurrent use. It does not
// close its client.
type Writer struct {
	// Client is the Redis client. Required.
	Client redis.UniversalClient
	// Keyspace names the streams. Defaults to the "ai" prefix.
	Keyspace topics.Keyspace
	// TaskMaxLen, ResultMaxLen and DLQMaxLen cap the streams with MAXLEN ~. Zero means the
	// Default...MaxLen constant, which for tasks is no cap. A negative value turns trimming
	// off.
	TaskMaxLen, ResultMaxLen, DLQMaxLen int64
	// Limits bound the tasks EnqueueTasks accepts. Zero fields take their defaults.
	Limits topics.Limits
	// ScheduleHorizon is how far ahead a task's NotBefore may lie, as Task.CheckNotBefore
	// checks. It is the consumers' stage setting, which a producer does not read. Zero
	// means DefaultScheduleHorizon. A negative value turns the check off.
	ScheduleHorizon time.Duration
}

func maxLen(v, def int64) int64 {
	switch {
	case v == 0:
		return def
	case v < 0:
		return 0
	}
	return v
}

// EnqueueTask validates t under w.Limits and w.ScheduleHorizon, appends it to its stage's
// task stream, and returns the entry id.
func (w Writer) EnqueueTask(ctx context.Context, t topics.Task) (string, error) {
	ids, err := w.EnqueueTasks(ctx, []topics.Task{t})
	if err != nil {
		return "", err
	}
	return ids[0], nil
}

// EnqueueTasks validates every task under w.Limits and w.ScheduleHorizon, then appends them
// all in one pipeline. An invalid task writes nothing. On a Redis error it returns the
// error with the ids of the leading tasks known to be appended. Later ones may have been
// appended too.
func (w Writer) EnqueueTasks(ctx context.Context, tasks []topics.Task) ([]string, error) {
	payloads := make([][]byte, len(tasks))
	now := time.Now()
	for i, t := range tasks {
		b, err := t.EncodeWith(w.Limits)
		if err == nil {
			err = t.CheckNotBefore(now, w.ScheduleHorizon)
		}
		if err != nil {
			return nil, fmt.Errorf("broker: enqueue %q: %w", t.TaskID, err)
		}
		payloads[i] = b
	}
	cmds := make([]*redis.StringCmd, 0, len(tasks))
	_, err := w.Client.Pipelined(ctx, func(p redis.Pipeliner) error {
		for i, t := range tasks {
			cmds = append(cmds, p.XAdd(ctx, &redis.XAddArgs{
				Stream: w.Keyspace.TaskStreamFor(t.Stage, t.TaskID), MaxLen: maxLen(w.TaskMaxLen, topics.DefaultTaskMaxLen), Approx: true,
				Values: []any{topics.FieldUUID, uuid.NewString(), topics.FieldPayload, payloads[i]},
			}))
		}
		return nil
	})
	ids := make([]string, 0, len(tasks))
	for _, c := range cmds {
		if c.Err() != nil {
			break
		}
		ids = append(ids, c.Val())
	}
	if err != nil {
		return ids, fmt.Errorf("broker: enqueue: %d of %d appended: %w", len(ids), len(tasks), err)
	}
	return ids, nil
}

// PublishEvents appends events to their stages' result streams in one pipeline.
func (w Writer) PublishEvents(ctx context.Context, events ...topics.Event) error {
	if len(events) == 0 {
		return nil
	}
	payloads := make([][]byte, len(events))
	for i, e := range events {
		b, err := topics.EncodeEvent(e)
		if err != nil {
			return err
		}
		payloads[i] = b
	}
	cmds, err := w.Client.Pipelined(ctx, func(p redis.Pipeliner) error {
		for i, e := range events {
			p.XAdd(ctx, &redis.XAddArgs{
				Stream: w.Keyspace.Results(e.Stage), MaxLen: maxLen(w.ResultMaxLen, topics.DefaultResultMaxLen), Approx: true,
				Values: []any{topics.FieldUUID, uuid.NewString(), topics.FieldPayload, payloads[i]},
			})
		}
		return nil
	})
	if err == nil {
		for _, c := range cmds {
			if err = c.Err(); err != nil {
				break
			}
		}
	}
	if err != nil {
		return fmt.Errorf("broker: publish %d events: %w", len(events), err)
	}
	return nil
}

// DeadLetter appends d, cut by Bound to at most MaxDeadLetterBytes, to its stage's
// dead-letter stream.
func (w Writer) DeadLetter(ctx context.Context, d topics.DeadLetter) error {
	if d.Stage == "" || d.Reason == "" {
		return errors.New("broker: dead letter needs a stage and a reason")
	}
	d = d.Bound()
	id := d.UUID
	if id == "" {
		id = uuid.NewString()
	}
	values := []any{topics.FieldUUID, id, topics.FieldPayload, d.Payload, topics.FieldReason, d.Reason,
		topics.FieldDetail, d.Detail, topics.FieldConsumer, d.Consumer}
	if len(d.Raw) > 0 {
		raw, err := json.Marshal(d.Raw)
		if err != nil { // cannot happen, as Bound leaves strings only
			return fmt.Errorf("broker: dead letter: original fields: %w", err)
		}
		values = append(values, topics.FieldOriginal, raw)
	}
	err := w.Client.XAdd(ctx, &redis.XAddArgs{
		Stream: w.Keyspace.DLQ(d.Stage), MaxLen: maxLen(w.DLQMaxLen, topics.DefaultDLQMaxLen), Approx: true, Values: values,
	}).Err()
	if err != nil {
		return fmt.Errorf("broker: dead letter to %s: %w", w.Keyspace.DLQ(d.Stage), err)
	}
	return nil
}
