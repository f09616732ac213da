package handlers

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"time"

	"github.com/google/uuid"
	"github.com/redis/go-redis/v9"

	"github.com/flightdeck-ai/flightdeck/lua"
	"github.com/flightdeck-ai/flightdeck/stream"
	"github.com/flightdeck-ai/flightdeck/topics"
)

// Scheduled tasks, described in DESIGN.md section 5 under "Scheduled tasks and retry delays". A
// task must wait when its notBefore lies ahead or its flight's retry is delayed. A short wait
// is spent in the subscriber. A longer one is spent in the stage's scheduled set,
// topics.Keyspace.Scheduled. There the task's entry is acknowledged and it holds no handler and
// no custody. A consumer's schedule loop appends it to the task stream again when it is due.

// scheduleAfter is the longest wait kept in the subscriber. Longer ones go to the set.
const scheduleAfter = 2 * time.Second

// scheduleBatch is the most due tasks one schedule call moves.
const scheduleBatch = 100

// horizonSlack is how far past the stage's schedule horizon a task may be due and still have
// been scheduled by a consumer of this horizon. With NTP the consumers' clocks differ by about
// a second.
const horizonSlack = time.Minute

// movingStuck is how long a task taken for appending may stay in the moving set. After that it
// counts as left by a consumer that died in between, and it is appended again, at least once.
const movingStuck = 30 * time.Second

// RetryPolicy is the backoff between a stage's owner attempts after a retryable failure. The
// delay starts at Initial, grows by Multiplier per attempt up to Max, and is spread by the
// fraction ±Jitter. A provider's Retry-After wins when it is longer. Zero fields take the
// defaults.
type RetryPolicy struct {
	// Initial is the delay after the first failed attempt. Defaults to 200 ms.
	Initial time.Duration `yaml:"initial"`
	// Max caps the delay, but not a Retry-After. Defaults to 30 s.
	Max time.Duration `yaml:"max"`
	// Multiplier grows the delay per attempt. Defaults to 2.
	Multiplier float64 `yaml:"multiplier"`
	// Jitter spreads each delay uniformly by ± this fraction, 0 to 1. Defaults to 0.2.
	Jitter float64 `yaml:"jitter"`
}

// withDefaults fills the zero fields.
func (r RetryPolicy) withDefaults() RetryPolicy {
	if r.Initial == 0 {
		r.Initial = 200 * time.Millisecond
	}
	if r.Max == 0 {
		r.Max = 30 * time.Second
	}
	if r.Multiplier == 0 {
		r.Multiplier = 2
	}
	if r.Jitter == 0 {
		r.Jitter = 0.2
	}
	return r
}

// Delay returns the wait before the attempt that follows failed attempt number attempt, counted
// from 1. retryAfter is the provider's hint, 0 for none.
func (r RetryPolicy) Delay(attempt int, retryAfter time.Duration) time.Duration {
	r = r.withDefaults()
	d := float64(r.Initial) * math.Pow(r.Multiplier, float64(max(attempt, 1)-1))
	d = min(d, float64(r.Max))
	d *= 1 + r.Jitter*(2*rand.Float64()-1)
	return max(time.Duration(d), retryAfter)
}

// validate reports a policy that cannot be used.
func (r RetryPolicy) validate() error {
	switch {
	case r.Initial < 0 || r.Max < 0:
		return fmt.Errorf("retry: initial %v and max %v must not be negative", r.Initial, r.Max)
	case r.Multiplier != 0 && r.Multiplier < 1:
		return fmt.Errorf("retry: multiplier %v must be at least 1", r.Multiplier)
	case r.Jitter < 0 || r.Jitter > 1:
		return fmt.Errorf("retry: jitter %v must be within 0-1", r.Jitter)
	}
	return nil
}

// wait keeps the task aside until at. A short wait is kept in the subscriber. A longer one goes
// to the stage's scheduled set, and the message then returns unsettled, so its entry is
// acknowledged. why labels the metric: not_before or retry.
func (t *taskRun) wait(ctx context.Context, at time.Time, why string) error {
	d := time.Until(at)
	h := t.p.stage.ScheduleHorizon
	if h <= 0 {
		h = topics.DefaultScheduleHorizon
	}
	if d > h { // a retry delay, since handle refused a notBefore past the horizon
		d, at = h, time.Now().Add(h)
	}
	if d <= scheduleAfter {
		stream.Delay(t.msg, max(d, 0))
		return nil
	}
	p := t.p
	stage := t.task.Stage
	keys := []string{p.ks.Scheduled(stage), p.ks.ScheduledTasks(stage), p.ks.ScheduledIndex(stage, t.key)}
	err := lua.ScheduleAdd.Run(context.WithoutCancel(ctx), p.rdb, keys, topics.ScheduledID(t.msg.Payload),
		at.UnixMilli(), t.key, t.task.TaskID, string(t.msg.Payload)).Err()
	if err != nil { // the middleware retries the message, nothing was acknowledged
		return fmt.Errorf("handlers: schedule task %s: %w", t.task.TaskID, err)
	}
	p.metrics.scheduled.WithLabelValues(t.task.Stage, why).Inc()
	if debugOn(p.log) {
		l := t.logger()
		l.Debug().Time("due", at).Str("why", why).Msg("task scheduled")
	}
	return nil
}

// scheduleLoop appends the due tasks of every stage's scheduled set to its task stream, every
// interval, until ctx ends.
func (c *Consumer) scheduleLoop(ctx context.Context, interval time.Duration) {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		for _, s := range c.cfg.Stages {
			for ctx.Err() == nil {
				n, err := c.moveDue(ctx, s.Name, s.ScheduleHorizon)
				if err != nil {
					c.log.Warn().Err(err).Str("stage", s.Name).Msg("moving due scheduled tasks failed")
				}
				if err != nil || n < scheduleBatch {
					break
				}
			}
		}
	}
}

// moveDue appends up to scheduleBatch due tasks of stage to its task stream and returns how
// many it took. It takes them from the stage's scheduled set and from ScheduledLegacy, the set
// that versions without the index filled. Tasks due past the stage's horizon are taken too, and
// the consumer that reads them refuses them. They were scheduled under a longer horizon or by a
// version without one.
func (c *Consumer) moveDue(ctx context.Context, stage string, horizon time.Duration) (int, error) {
	ks := c.cfg.Keyspace
	set, moving, tasks := ks.Scheduled(stage), ks.ScheduledMoving(stage), ks.ScheduledTasks(stage)
	legacyMoving := ks.ScheduledLegacyMoving(stage)
	if horizon <= 0 {
		horizon = topics.DefaultScheduleHorizon
	}
	out, err := lua.ScheduleDue.Run(ctx, c.rdb, []string{set, moving, tasks, ks.ScheduledLegacy(stage), legacyMoving},
		scheduleBatch, movingStuck.Milliseconds(), (horizon + horizonSlack).Milliseconds()).StringSlice()
	if err != nil || len(out) == 0 {
		return 0, err
	}
	n := len(out) / 3
	_, err = c.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		for i := 0; i < len(out); i += 3 {
			payload := out[i+1]
			if payload == "" {
				continue // an id without its payload: nothing to append
			}
			// It was valid when it was scheduled. A payload that a changed limit refuses is
			// appended all the same, for the consumer to dead-letter with its reason.
			task, _ := topics.DecodeTask([]byte(payload), c.cfg.Limits)
			p.XAdd(ctx, &redis.XAddArgs{Stream: ks.TaskStreamFor(stage, task.TaskID),
				Values: []any{topics.FieldUUID, uuid.NewString(), topics.FieldPayload, payload}})
		}
		return nil
	})
	if err != nil {
		return 0, err // the members stay in their moving sets and are appended again later
	}
	// The members leave their moving sets. The payloads and index entries go with them.
	keys := []string{set, moving, tasks, legacyMoving}
	index := map[string]int{}
	args := make([]any, 0, 2*n)
	for i := 0; i < len(out); i += 3 {
		pos := 0
		if key := out[i+2]; key != "" {
			if pos = index[key]; pos == 0 {
				keys = append(keys, ks.ScheduledIndex(stage, key))
				pos = len(keys) - 4
				index[key] = pos
			}
		}
		args = append(args, out[i], pos)
	}
	if err := lua.ScheduleDone.Run(ctx, c.rdb, keys, args...).Err(); err != nil {
		return n, err
	}
	c.metrics.scheduled.WithLabelValues(stage, "due").Add(float64(n))
	return n, nil
}
