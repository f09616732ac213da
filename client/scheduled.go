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

// CancelScheduled cancels the tasks of requestKey that wait in their stage's scheduled set
// (a notBefore ahead, or a long retry delay) and have no flight yet: each is removed from the
// set and gets a CANCELLED event (errorType and errorCode "cancelled", reason as error). It
// returns how many it cancelled. A task the schedule loop took for appending at the same
// moment is not cancelled here: cancel its flight once it runs.
func (c *Client) CancelScheduled(ctx context.Context, requestKey, reason string) (int, error) {
	stage := StageOfKey(requestKey)
	if stage == "" {
		return 0, fmt.Errorf("client: cancel scheduled %q: %w", requestKey, flight.ErrInvalidKey)
	}
	if reason == "" {
		reason = "cancelled"
	}
	set := c.ks.Scheduled(stage)
	members, err := c.rdb.ZRange(ctx, set, 0, -1).Result()
	if err != nil {
		return 0, fmt.Errorf("client: cancel scheduled %q: %w", requestKey, err)
	}
	var events []topics.Event
	for _, m := range members {
		t, err := topics.DecodeTask([]byte(m), c.cfg.Limits)
		if err != nil {
			continue
		}
		if key, err := flight.TaskKey(t); err != nil || key != requestKey {
			continue
		}
		n, err := c.rdb.ZRem(ctx, set, m).Result()
		if err != nil {
			return len(events), fmt.Errorf("client: cancel scheduled %q: %w", requestKey, err)
		}
		if n == 1 { // removed by this call: nobody else will run or answer it
			events = append(events, topics.Event{TaskID: t.TaskID, RequestKey: requestKey, Stage: stage,
				Tenant: t.Tenant, Status: topics.StatusCancelled, Shared: topics.SharedOwner, ErrorType: "cancelled",
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
