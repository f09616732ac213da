package topics

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/google/uuid"
	"github.com/redis/go-redis/v9"
)

// Default stream caps (approximate MAXLEN, trimmed by XADD).
const (
	// DefaultTaskMaxLen is 0: task streams are not capped at enqueue, since a cap would drop
	// unread tasks once a backlog outgrew it. Consumers trim the entries every group has
	// acknowledged instead.
	DefaultTaskMaxLen = 0
	// DefaultResultMaxLen caps a result stream.
	DefaultResultMaxLen = 1_000_000
	// DefaultDLQMaxLen caps a dead-letter stream.
	DefaultDLQMaxLen = 100_000
)

// Dead-letter entry fields, beside FieldUUID and FieldPayload (the refused entry's own).
const (
	// FieldReason holds the machine-readable reason (a Reason, or a handler reason).
	FieldReason = "reason"
	// FieldDetail holds a human-readable description of what was wrong.
	FieldDetail = "detail"
	// FieldConsumer names the consumer that refused the entry.
	FieldConsumer = "consumer"
	// FieldOriginal holds the refused entry's raw fields as a JSON object, when they could not
	// be kept as uuid and payload.
	FieldOriginal = "original"
)

// Writer appends entries in watermill-redisstream's wire format (FieldUUID, FieldPayload),
// pipelined, with an approximate MAXLEN. It is safe for concurrent use; it does not close its
// client.
type Writer struct {
	// Client is the Redis client. Required.
	Client redis.UniversalClient
	// Keyspace names the streams. Defaults to the "ai" prefix.
	Keyspace Keyspace
	// TaskMaxLen, ResultMaxLen and DLQMaxLen cap the streams (MAXLEN ~). Zero means the
	// Default...MaxLen constant (for tasks: no cap); a negative value turns trimming off.
	TaskMaxLen, ResultMaxLen, DLQMaxLen int64
	// Limits bound the tasks EnqueueTasks accepts. Zero fields take their defaults.
	Limits Limits
	// ScheduleHorizon is how far ahead a task's NotBefore may lie (Task.CheckNotBefore): the
	// consumers' stage setting, which a producer does not read. Zero means
	// DefaultScheduleHorizon; a negative value turns the check off.
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

// EnqueueTask validates t under w.Limits and w.ScheduleHorizon and appends it to its stage's task stream; it
// returns the entry id.
func (w Writer) EnqueueTask(ctx context.Context, t Task) (string, error) {
	ids, err := w.EnqueueTasks(ctx, []Task{t})
	if err != nil {
		return "", err
	}
	return ids[0], nil
}

// EnqueueTasks validates every task under w.Limits and w.ScheduleHorizon, then appends them
// all in one pipeline. An invalid task writes nothing. On a Redis error it returns the ids of the leading tasks
// known to be appended, with the error; later ones may have been appended too.
func (w Writer) EnqueueTasks(ctx context.Context, tasks []Task) ([]string, error) {
	payloads := make([][]byte, len(tasks))
	now := time.Now()
	for i, t := range tasks {
		b, err := t.EncodeWith(w.Limits)
		if err == nil {
			err = t.CheckNotBefore(now, w.ScheduleHorizon)
		}
		if err != nil {
			return nil, fmt.Errorf("topics: enqueue %q: %w", t.TaskID, err)
		}
		payloads[i] = b
	}
	cmds := make([]*redis.StringCmd, 0, len(tasks))
	_, err := w.Client.Pipelined(ctx, func(p redis.Pipeliner) error {
		for i, t := range tasks {
			cmds = append(cmds, p.XAdd(ctx, &redis.XAddArgs{
				Stream: w.Keyspace.TaskStreamFor(t.Stage, t.TaskID), MaxLen: maxLen(w.TaskMaxLen, DefaultTaskMaxLen), Approx: true,
				Values: []any{FieldUUID, uuid.NewString(), FieldPayload, payloads[i]},
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
		return ids, fmt.Errorf("topics: enqueue: %d of %d appended: %w", len(ids), len(tasks), err)
	}
	return ids, nil
}

// PublishEvents appends events to their stages' result streams in one pipeline.
func (w Writer) PublishEvents(ctx context.Context, events ...Event) error {
	if len(events) == 0 {
		return nil
	}
	payloads := make([][]byte, len(events))
	for i, e := range events {
		b, err := EncodeEvent(e)
		if err != nil {
			return err
		}
		payloads[i] = b
	}
	cmds, err := w.Client.Pipelined(ctx, func(p redis.Pipeliner) error {
		for i, e := range events {
			p.XAdd(ctx, &redis.XAddArgs{
				Stream: w.Keyspace.Results(e.Stage), MaxLen: maxLen(w.ResultMaxLen, DefaultResultMaxLen), Approx: true,
				Values: []any{FieldUUID, uuid.NewString(), FieldPayload, payloads[i]},
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
		return fmt.Errorf("topics: publish %d events: %w", len(events), err)
	}
	return nil
}

// ReadEvents reads result-stream entries after the given ids (stream name to id, exclusive:
// "0" for all, "$" for new ones) with XREAD, blocking up to block (negative: do not block;
// zero blocks forever, as XREAD does), and decodes them. Entries that are not valid events
// carry Err and are counted in bad.
func ReadEvents(ctx context.Context, rdb redis.UniversalClient, streams map[string]string, count int64, block time.Duration) (events []StreamEvent, bad int, err error) {
	args := make([]string, 0, 2*len(streams))
	ids := make([]string, 0, len(streams))
	for s, id := range streams {
		args = append(args, s)
		ids = append(ids, id)
	}
	args = append(args, ids...)
	res, err := XRead(ctx, rdb, &redis.XReadArgs{Streams: args, Count: count, Block: block})
	if errors.Is(err, redis.Nil) {
		return nil, 0, nil
	}
	if err != nil {
		return nil, 0, err
	}
	for _, xs := range res {
		for _, m := range xs.Messages {
			se := StreamEvent{Stream: xs.Stream, ID: m.ID}
			p, _ := m.Values[FieldPayload].(string)
			if se.Event, err = DecodeEvent([]byte(p)); err != nil {
				bad++
				se.Err = err
			}
			events = append(events, se)
		}
	}
	return events, bad, nil
}

// StreamEvent is one entry of a result stream.
type StreamEvent struct {
	// Stream and ID locate the entry.
	Stream, ID string
	// Event is the decoded event; Err is set instead when the entry is not a valid event.
	Event Event
	Err   error
}
