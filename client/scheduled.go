package client

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/flightdeck-ai/flightdeck/flight"
	"github.com/flightdeck-ai/flightdeck/lua"
	"github.com/flightdeck-ai/flightdeck/topics"
)

// stageOfKey returns the stage a flight key names, or "".
func stageOfKey(requestKey string) string {
	s, _ := flight.ParseKey(requestKey)
	return s.Stage
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

// Scheduled returns the tasks of requestKey that wait in their stage's scheduled set,
// soonest first. A task waits there for a notBefore ahead or a long retry delay. It reads
// only the key's own members through its index. It looks through the set of a version
// without the index only while that set holds tasks.
func (c *Client) Scheduled(ctx context.Context, requestKey string) ([]ScheduledTask, error) {
	stage := stageOfKey(requestKey)
	if stage == "" {
		return nil, fmt.Errorf("client: scheduled %q: %w", requestKey, flight.ErrInvalidKey)
	}
	out, err := c.scheduled(ctx, stage, requestKey)
	if err != nil {
		return nil, fmt.Errorf("client: scheduled %q: %w", requestKey, err)
	}
	return out, nil
}

// scheduled reads the key's index and the due times of its members, and the payload members
// of the key in the set of a version without the index, when that holds any.
func (c *Client) scheduled(ctx context.Context, stage, requestKey string) ([]ScheduledTask, error) {
	var (
		index  *redis.MapStringStringCmd
		legacy *redis.IntCmd
	)
	_, err := c.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		index = p.HGetAll(ctx, c.ks.ScheduledIndex(stage, requestKey))
		legacy = p.ZCard(ctx, c.ks.ScheduledLegacy(stage))
		return nil
	})
	if err != nil {
		return nil, err
	}
	var out []ScheduledTask
	if ids := index.Val(); len(ids) > 0 {
		scores := make(map[string]*redis.FloatCmd, len(ids))
		_, err := c.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
			for id := range ids {
				scores[id] = p.ZScore(ctx, c.ks.Scheduled(stage), id)
			}
			return nil
		})
		if err != nil && !errors.Is(err, redis.Nil) {
			return nil, err
		}
		for id, sc := range scores {
			if sc.Err() == nil { // redis.Nil: not in the set, being appended or just gone
				out = append(out, ScheduledTask{TaskID: ids[id], DueAt: time.UnixMilli(int64(sc.Val()))})
			}
		}
	}
	if legacy.Val() > 0 {
		entries, err := c.legacyScheduled(ctx, stage, requestKey)
		if err != nil {
			return nil, err
		}
		for _, e := range entries {
			out = append(out, ScheduledTask{TaskID: e.task.TaskID, DueAt: e.due})
		}
	}
	slices.SortFunc(out, func(a, b ScheduledTask) int {
		return cmp.Or(a.DueAt.Compare(b.DueAt), strings.Compare(a.TaskID, b.TaskID))
	})
	return out, nil
}

// legacyScheduled scans the set in which a version without the index kept its stage's
// scheduled task payloads, and returns the members of requestKey.
func (c *Client) legacyScheduled(ctx context.Context, stage, requestKey string) ([]scheduledEntry, error) {
	var out []scheduledEntry
	var cursor uint64
	for {
		kv, next, err := c.rdb.ZScan(ctx, c.ks.ScheduledLegacy(stage), cursor, "", 1000).Result()
		if err != nil {
			return nil, err
		}
		for i := 0; i+1 < len(kv); i += 2 {
			t, err := topics.DecodeTask([]byte(kv[i]), c.cfg.Limits)
			if err != nil {
				continue
			}
			if key, err := flight.TaskKey(t); err != nil || key != requestKey {
				continue
			}
			score, err := strconv.ParseFloat(kv[i+1], 64)
			if err != nil {
				continue
			}
			out = append(out, scheduledEntry{member: kv[i], task: t, due: time.UnixMilli(int64(score))})
		}
		if cursor = next; cursor == 0 {
			return out, nil
		}
	}
}

// CancelScheduled cancels the tasks of requestKey that wait in their stage's scheduled set
// and have no flight yet, and returns how many it cancelled. Each is removed from the set
// and gets a CANCELLED event with errorType and errorCode "cancelled" and reason as error.
// Like Scheduled, it finds the key's own members through its index and also handles the
// set of a version without the index. A task the schedule loop took for appending at the
// same moment is not cancelled here: cancel its flight once it runs.
func (c *Client) CancelScheduled(ctx context.Context, requestKey, reason string) (int, error) {
	if reason == "" {
		reason = "cancelled"
	}
	stage := stageOfKey(requestKey)
	if stage == "" {
		return 0, fmt.Errorf("client: cancel scheduled %q: %w", requestKey, flight.ErrInvalidKey)
	}
	keys := []string{c.ks.Scheduled(stage), c.ks.ScheduledMoving(stage), c.ks.ScheduledTasks(stage),
		c.ks.ScheduledIndex(stage, requestKey), c.ks.ScheduledLegacy(stage)}
	res, err := lua.ScheduleCancel.Run(ctx, c.rdb, keys).Slice()
	if err != nil {
		return 0, fmt.Errorf("client: cancel scheduled %q: %w", requestKey, err)
	}
	var removed []topics.Task // removed by this call: nobody else will run or answer them
	for _, v := range res[1:] {
		p, _ := v.(string)
		t, err := topics.DecodeTask([]byte(p), c.cfg.Limits)
		if err != nil { // valid when it was scheduled, but a changed limit may refuse it now
			t = topics.Task{TaskID: topics.NamedField([]byte(p), "taskId"), Tenant: topics.NamedField([]byte(p), "tenant")}
		}
		removed = append(removed, t)
	}
	if legacy, _ := res[0].(int64); legacy > 0 {
		err = c.cancelLegacy(ctx, stage, requestKey, &removed)
	}
	if perr := c.publishCancelled(ctx, requestKey, stage, reason, removed); perr != nil {
		err = errors.Join(err, perr)
	}
	if err != nil {
		return len(removed), fmt.Errorf("client: cancel scheduled %q: %w", requestKey, err)
	}
	return len(removed), nil
}

// cancelLegacy removes the members of requestKey from the set a version without the index
// kept its stage's scheduled tasks in, adding those this call removed to removed.
func (c *Client) cancelLegacy(ctx context.Context, stage, requestKey string, removed *[]topics.Task) error {
	entries, err := c.legacyScheduled(ctx, stage, requestKey)
	if err != nil {
		return err
	}
	for _, e := range entries {
		n, err := c.rdb.ZRem(ctx, c.ks.ScheduledLegacy(stage), e.member).Result()
		if err != nil {
			return err
		}
		if n == 1 {
			*removed = append(*removed, e.task)
		}
	}
	return nil
}

// publishCancelled publishes a CANCELLED event for each task.
func (c *Client) publishCancelled(ctx context.Context, requestKey, stage, reason string, tasks []topics.Task) error {
	if len(tasks) == 0 {
		return nil
	}
	events := make([]topics.Event, 0, len(tasks))
	for _, t := range tasks {
		events = append(events, topics.Event{TaskID: t.TaskID, RequestKey: requestKey, Stage: stage,
			Tenant: t.Tenant, Status: topics.StatusCancelled, Shared: topics.SharedOwner, ErrorType: "cancelled",
			ErrorCode: "cancelled", Error: reason, FinishedAt: time.Now()})
	}
	return c.w.PublishEvents(ctx, events...)
}
