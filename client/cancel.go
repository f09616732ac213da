package client

import (
	"context"
	"fmt"

	"github.com/flightdeck-ai/flightdeck/flight"
	"github.com/flightdeck-ai/flightdeck/topics"
)

// CancelResult is the answer of Cancel.
type CancelResult struct {
	// RequestKey is the cancelled flight's key.
	RequestKey string `json:"requestKey"`
	// Stage and Tenant are read from the flight's meta.
	Stage  string `json:"stage"`
	Tenant string `json:"tenant"`
	// OwnerTaskID is the owner's own task. Cancel does not answer it: the owner publishes
	// its CANCELLED event when its next heartbeat sees the cancel (or, when the owner is
	// dead, whoever gets the task redelivered answers it from the CANCELLED state).
	OwnerTaskID string `json:"ownerTaskId,omitempty"`
	// Answered lists the parked task ids that got a CANCELLED event and were released.
	Answered []string `json:"answered"`
}

// Cancel cancels the flight of requestKey and answers the tasks parked on it. It reads the
// flight's meta (flight.Coordinator.Get), makes the flight CANCELLED
// (flight.Coordinator.Cancel; an already cancelled flight is accepted again, which flushes
// what a crashed canceller left parked), publishes one CANCELLED event per parked task
// (shared "follower", errorType and errorCode "cancelled", reason as the error; stage,
// tenant and key from the meta), and only then releases those ids
// (flight.Coordinator.Release). The owner's own task is not answered here: the owner
// answers it when its heartbeat sees the cancel. An empty reason becomes "cancelled".
//
// Errors wrap flight.ErrNotFound when no flight exists and *flight.StateError when the
// flight already ended (SUCCEEDED, FAILED or EXPIRED).
func (c *Client) Cancel(ctx context.Context, requestKey, reason string) (CancelResult, error) {
	if reason == "" {
		reason = "cancelled"
	}
	meta, err := c.coord.Get(ctx, requestKey)
	if err != nil {
		return CancelResult{}, fmt.Errorf("client: cancel: %w", err)
	}
	out, err := c.coord.Cancel(ctx, requestKey, reason, flight.Policy{FailureTTL: c.cfg.CancelTTL})
	if err != nil {
		return CancelResult{}, fmt.Errorf("client: cancel: %w", err)
	}
	res := CancelResult{RequestKey: requestKey, Stage: meta.Stage, Tenant: meta.Tenant, OwnerTaskID: out.OwnerTaskID}
	ids := make([]string, 0, len(out.Parked))
	for _, id := range out.Parked {
		if id != "" && id != out.OwnerTaskID {
			ids = append(ids, id)
		}
	}
	if len(ids) == 0 {
		res.Answered = []string{}
		return res, nil
	}
	if meta.Stage == "" {
		return res, fmt.Errorf("client: cancel %q: the flight's meta has no stage; %d parked tasks left unanswered", requestKey, len(ids))
	}
	now := c.cfg.Now()
	for lo := 0; lo < len(ids); lo += batchSize {
		chunk := ids[lo:min(lo+batchSize, len(ids))]
		events := make([]topics.Event, len(chunk))
		for i, id := range chunk {
			events[i] = topics.Event{
				TaskID: id, RequestKey: requestKey, Stage: meta.Stage, Tenant: meta.Tenant,
				Status: topics.StatusCancelled, Shared: topics.SharedFollower,
				OwnerToken: meta.OwnerToken, Attempts: meta.Attempts,
				ErrorType: "cancelled", ErrorCode: "cancelled", Error: reason, FinishedAt: now,
			}
		}
		if err := c.w.PublishEvents(ctx, events...); err != nil {
			return res, fmt.Errorf("client: cancel %q: %w", requestKey, err)
		}
		if _, err := c.coord.Release(ctx, requestKey, chunk...); err != nil {
			return res, fmt.Errorf("client: cancel %q: %w", requestKey, err)
		}
		res.Answered = append(res.Answered, chunk...)
	}
	return res, nil
}

// Inspect returns the whole stored state of requestKey's flight (flight.Coordinator.Get):
// status, owner, token, attempts, times, error fields, parked task ids and key TTLs.
// The error wraps flight.ErrNotFound when no flight exists.
func (c *Client) Inspect(ctx context.Context, requestKey string) (flight.Meta, error) {
	m, err := c.coord.Get(ctx, requestKey)
	if err != nil {
		return flight.Meta{}, fmt.Errorf("client: inspect: %w", err)
	}
	return m, nil
}

// Result returns the stored result bytes of requestKey's flight
// (flight.Coordinator.Result). The error wraps flight.ErrNotFound when there is none.
func (c *Client) Result(ctx context.Context, requestKey string) ([]byte, error) {
	b, err := c.coord.Result(ctx, requestKey)
	if err != nil {
		return nil, fmt.Errorf("client: %w", err)
	}
	return b, nil
}
