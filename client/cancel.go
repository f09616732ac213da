package client

import (
	"context"
	"fmt"

	"github.com/flightdeck-ai/flightdeck/flight"
)

// CancelResult is the answer of Cancel.
type CancelResult struct {
	// RequestKey is the cancelled flight's key.
	RequestKey string `json:"requestKey"`
	// Stage and Tenant are read from the flight's meta.
	Stage  string `json:"stage"`
	Tenant string `json:"tenant"`
	// Already is true when the flight was cancelled before this call. Reason is then the
	// first cancel's reason, the one every event carries.
	Already bool   `json:"already"`
	Reason  string `json:"reason"`
	// Previous is the status the flight had before this call.
	Previous flight.Status `json:"previous"`
	// OwnerTaskID is the owner's own task. Cancel does not answer it: the owner publishes
	// its CANCELLED event when its next heartbeat sees the cancel. When the owner is gone,
	// whoever gets the task's entry answers it from the CANCELLED state.
	OwnerTaskID string `json:"ownerTaskId,omitempty"`
	// Answered counts the parked tasks that got a CANCELLED event from this call.
	Answered int `json:"answered"`
}

// Cancel cancels the flight of requestKey. A flight that may still run the model becomes
// CANCELLED: PENDING, RUNNING, FAILED retryably, or EXPIRED with attempts left. No model
// call runs for the key until its CANCELLED record expires after Config.CancelTTL.
//
// The tasks parked on the flight get a CANCELLED event in the same atomic step on a single
// Redis node, with shared "follower", errorType and errorCode "cancelled" and the reason as
// error. The owner answers its own task. A second cancel reports Already with the first
// reason, and answers tasks still parked if a canceller died half-way. An empty reason
// becomes "cancelled".
//
// Errors wrap flight.ErrNotFound when no flight exists, and *flight.StateError when the
// flight already ended for good: SUCCEEDED, FAILED or EXPIRED.
func (c *Client) Cancel(ctx context.Context, requestKey, reason string) (CancelResult, error) {
	if reason == "" {
		reason = "cancelled"
	}
	meta, err := c.coord.Get(ctx, requestKey)
	if err != nil {
		return CancelResult{}, fmt.Errorf("client: cancel: %w", err)
	}
	res := CancelResult{RequestKey: requestKey, Stage: meta.Stage, Tenant: meta.Tenant}
	if meta.Stage == "" {
		return res, fmt.Errorf("client: cancel %q: the flight's meta has no stage", requestKey)
	}
	out, err := c.coord.Cancel(ctx, requestKey, reason, flight.CancelParams{Stage: meta.Stage, TTL: c.cfg.CancelTTL})
	res.Already, res.Reason, res.Previous, res.OwnerTaskID, res.Answered = out.Already, out.Reason, out.Previous,
		out.OwnerTaskID, out.Answered
	if err != nil {
		return res, fmt.Errorf("client: cancel: %w", err)
	}
	return res, nil
}

// Inspect returns the whole stored state of requestKey's flight, as flight.Coordinator.Get
// does: status, owner, token, attempts, times, error fields, parked task ids and key TTLs.
// The error wraps flight.ErrNotFound when no flight exists.
func (c *Client) Inspect(ctx context.Context, requestKey string) (flight.Meta, error) {
	m, err := c.coord.Get(ctx, requestKey)
	if err != nil {
		return flight.Meta{}, fmt.Errorf("client: inspect: %w", err)
	}
	return m, nil
}

// Result returns the stored result bytes of requestKey's flight, as
// flight.Coordinator.Result does. The error wraps flight.ErrNotFound when there is none.
func (c *Client) Result(ctx context.Context, requestKey string) ([]byte, error) {
	b, err := c.coord.Result(ctx, requestKey)
	if err != nil {
		return nil, fmt.Errorf("client: %w", err)
	}
	return b, nil
}
