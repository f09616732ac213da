package client

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/flightdeck-ai/flightdeck/flight"
	"github.com/flightdeck-ai/flightdeck/topics"
)

// StageOfKey returns the stage a flight key names ("ai:<stage>:v<n>:<tenant>:..."), or "".
func StageOfKey(requestKey string) string {
	parts := strings.SplitN(requestKey, ":", 4)
	if len(parts) < 4 || parts[0] != "ai" || topics.CheckStage(parts[1]) != nil {
		return ""
	}
	return parts[1]
}

// ScheduledTask is a task waiting in its stage's scheduled set.
type ScheduledTask struct {
	TaskID string `json:"taskId"`
	// DueAt is when the task is appended to its stream.
	DueAt time.Time `json:"dueAt"`
}

// scheduledEntry is a member of a scheduled set whose task has the key asked for.
type scheduledEntry struct {
	member string
	task   topics.Task
	due    time.Time
}

// scheduledOf returns the scheduled set of requestKey's stage and its members for that key.
func (c *Client) scheduledOf(ctx context.Context, requestKey string) (string, []scheduledEntry, error) {
	stage := StageOfKey(requestKey)
	if stage == "" {
		return "", nil, flight.ErrInvalidKey
	}
	set := c.ks.Scheduled(stage)
	members, err := c.rdb.ZRangeWithScores(ctx, set, 0, -1).Result()
	if err != nil {
		return "", nil, err
	}
	var out []scheduledEntry
	for _, z := range members {
		m, _ := z.Member.(string)
		t, err := topics.DecodeTask([]byte(m), c.cfg.Limits)
		if err != nil {
			continue
		}
		if key, err := flight.TaskKey(t); err != nil || key != requestKey {
			continue
		}
		out = append(out, scheduledEntry{member: m, task: t, due: time.UnixMilli(int64(z.Score))})
	}
	return set, out, nil
}

// Scheduled returns the tasks of requestKey that wait in their stage's scheduled set (a
// notBefore ahead, or a long retry delay), soonest first.
func (c *Client) Scheduled(ctx context.Context, requestKey string) ([]ScheduledTask, error) {
	_, entries, err := c.scheduledOf(ctx, requestKey)
	if err != nil {
		return nil, fmt.Errorf("client: scheduled %q: %w", requestKey, err)
	}
	out := make([]ScheduledTask, len(entries))
	for i, e := range entries {
		out[i] = ScheduledTask{TaskID: e.task.TaskID, DueAt: e.due}
	}
	return out, nil
}

// CancelScheduled cancels the tasks of requestKey that wait in their stage's scheduled set
// (a notBefore ahead, or a long retry delay) and have no flight yet: each is removed from the
// set and gets a CANCELLED event (errorType and errorCode "cancelled", reason as error). It
// returns how many it cancelled. A task the schedule loop took for appending at the same
// moment is not cancelled here: cancel its flight once it runs.
func (c *Client) CancelScheduled(ctx context.Context, requestKey, reason string) (int, error) {
	if reason == "" {
		reason = "cancelled"
	}
	set, entries, err := c.scheduledOf(ctx, requestKey)
	if err != nil {
		return 0, fmt.Errorf("client: cancel scheduled %q: %w", requestKey, err)
	}
	stage := StageOfKey(requestKey)
	var events []topics.Event
	for _, e := range entries {
		n, err := c.rdb.ZRem(ctx, set, e.member).Result()
		if err != nil {
			return len(events), fmt.Errorf("client: cancel scheduled %q: %w", requestKey, err)
		}
		if n == 1 { // removed by this call: nobody else will run or answer it
			events = append(events, topics.Event{TaskID: e.task.TaskID, RequestKey: requestKey, Stage: stage,
				Tenant: e.task.Tenant, Status: topics.StatusCancelled, Shared: topics.SharedOwner, ErrorType: "cancelled",
				ErrorCode: "cancelled", Error: reason, FinishedAt: time.Now()})
		}
	}
	if len(events) > 0 {
		if err := c.w.PublishEvents(ctx, events...); err != nil {
			return len(events), fmt.Errorf("client: cancel scheduled %q: %w", requestKey, err)
		}
	}
	return len(events), nil
}
