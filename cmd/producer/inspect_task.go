package main

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"

	"github.com/redis/go-redis/v9"

	"github.com/flightdeck-ai/flightdeck/archive/postgres"
	"github.com/flightdeck-ai/flightdeck/flight"
	"github.com/flightdeck-ai/flightdeck/internal/broker"
	"github.com/flightdeck-ai/flightdeck/topics"
)

// taskInspection is what inspect --task prints: where the task is, its event and its flight.
type taskInspection struct {
	TaskID string `json:"taskId"`
	Stage  string `json:"stage,omitempty"`
	// Entry is the task's stream entry, empty when it was trimmed or is beyond --scan. Task is
	// its payload.
	Entry  string          `json:"entry,omitempty"`
	Stream string          `json:"stream,omitempty"`
	Task   json.RawMessage `json:"task,omitempty"`
	// Pending says who holds the entry while it is not answered: a consumer, or ~parked for
	// a task that follows a running flight.
	Pending *pendingEntry `json:"pending,omitempty"`
	// RequestKey is the task's flight key. Event is its terminal event, null while there is none.
	RequestKey string        `json:"requestKey,omitempty"`
	Event      *topics.Event `json:"event"`
	// Flight is the flight of RequestKey as inspect KEY prints it, when Redis or the archive
	// knows it.
	Flight *inspection `json:"flight,omitempty"`
}

// pendingEntry is a pending entry's holder.
type pendingEntry struct {
	Consumer   string `json:"consumer"`
	IdleMs     int64  `json:"idleMs"`
	Deliveries int64  `json:"deliveries"`
}

// inspectTask finds task id among the newest scan entries of the task and result streams of
// stage, then prints it with its flight. An empty stage means every registered stage.
func (a *app) inspectTask(ctx context.Context, id, stage string, scan int, acfg postgres.Config) error {
	if err := topics.CheckID(id, topics.Limits{}); err != nil {
		return usagef("--task: %v", err)
	}
	if scan < 1 {
		return usagef("--scan %d: want at least 1", scan)
	}
	rdb, c, err := a.connect(ctx)
	if err != nil {
		return err
	}
	defer rdb.Close()
	ks := c.Keyspace()
	stages := []string{stage}
	if stage == "" {
		infos, _, err := broker.ReadStages(ctx, rdb, ks)
		if err != nil {
			return err
		}
		stages = stages[:0]
		parts := map[string]int{}
		for k, v := range ks.Partitions {
			parts[k] = v
		}
		for _, s := range infos {
			stages = append(stages, s.Name)
			if s.Partitions > 1 { // the stage's consumers know its partitions best
				parts[s.Name] = s.Partitions
			}
		}
		ks.Partitions = parts
		if len(stages) == 0 {
			return usagef("no stage is registered under prefix %q: give --stage", a.prefix)
		}
	}
	needle := `"taskId":"` + id + `"`
	out := taskInspection{TaskID: id}
	for _, st := range stages {
		if out.Entry == "" {
			for _, s := range ks.TaskStreams(st) {
				msg, ok, err := findNewest(ctx, rdb, s, needle, scan)
				if err != nil {
					return err
				}
				if !ok {
					continue
				}
				payload, _ := msg.Values[topics.FieldPayload].(string)
				out.Stage, out.Entry, out.Stream, out.Task = st, msg.ID, s, json.RawMessage(payload)
				if t, err := topics.DecodeTask([]byte(payload), topics.Limits{}); err == nil {
					out.RequestKey, _ = flight.TaskKey(t)
				}
				out.Pending, err = pendingOf(ctx, rdb, s, msg.ID)
				if err != nil {
					return err
				}
				break
			}
		}
		if out.Event == nil {
			msg, ok, err := findNewest(ctx, rdb, ks.Results(st), needle, scan)
			if err != nil {
				return err
			}
			if ok {
				payload, _ := msg.Values[topics.FieldPayload].(string)
				if ev, err := topics.DecodeEvent([]byte(payload)); err == nil {
					out.Event, out.Stage = &ev, st
					if out.RequestKey == "" {
						out.RequestKey = ev.RequestKey
					}
				}
			}
		}
	}
	if out.Entry == "" && out.Event == nil {
		return fmt.Errorf("task %q not found in the newest %d entries of the task and result streams of %s",
			id, scan, strings.Join(stages, ", "))
	}
	if out.RequestKey != "" {
		if out.Flight, err = flightInspection(ctx, rdb, ks, out.RequestKey, acfg); err != nil {
			return err
		}
	}
	return a.printIndented(out)
}

// findNewest returns the newest entry among the newest scan entries of stream whose payload
// holds needle.
func findNewest(ctx context.Context, rdb redis.UniversalClient, stream, needle string, scan int) (redis.XMessage, bool, error) {
	end := "+"
	for left := scan; left > 0; {
		msgs, err := rdb.XRevRangeN(ctx, stream, end, "-", int64(min(left, 1000))).Result()
		if err != nil {
			return redis.XMessage{}, false, fmt.Errorf("read %s: %w", stream, err)
		}
		for _, m := range msgs {
			if p, _ := m.Values[topics.FieldPayload].(string); strings.Contains(p, needle) {
				return m, true, nil
			}
		}
		if len(msgs) < min(left, 1000) {
			break
		}
		left -= len(msgs)
		end = "(" + msgs[len(msgs)-1].ID
	}
	return redis.XMessage{}, false, nil
}

// pendingOf returns who holds entry id of stream in the consumer group, or nil when it is not
// pending because it was answered or never read.
func pendingOf(ctx context.Context, rdb redis.UniversalClient, stream, id string) (*pendingEntry, error) {
	ps, err := rdb.XPendingExt(ctx, &redis.XPendingExtArgs{Stream: stream, Group: topics.ConsumerGroup,
		Start: id, End: id, Count: 1}).Result()
	if err != nil {
		if strings.Contains(err.Error(), "NOGROUP") {
			return nil, nil
		}
		return nil, fmt.Errorf("read the pending entries of %s: %w", stream, err)
	}
	if len(ps) == 0 {
		return nil, nil
	}
	return &pendingEntry{Consumer: ps[0].Consumer, IdleMs: ps[0].Idle.Milliseconds(), Deliveries: ps[0].RetryCount}, nil
}
