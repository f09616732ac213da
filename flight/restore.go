package flight

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
)

// Restore writes back an uncertain outcome (DESIGN.md section 6): o.Result was produced by the
// owner holding o.Token, but Complete could not store it because Redis was away. It is
// Complete under the same rule: accepted while o.Token owns the flight (PENDING, RUNNING, or
// EXPIRED by its own heartbeat), or when the meta is gone and the fence admits the token
// (Settlement.Restored); the tasks waiting for the flight, and the owner's own task and its
// joined tasks when the outcome names them, are answered. A nil error also covers a retry whose result is stored
// already. ErrStaleToken, ErrCancelled, ErrExpired and *StateError mean another outcome
// stands: the spooled one is settled and dropped. Any other error (Redis unreachable, or
// ErrNotReplicated for a replicated outcome no replica acknowledged) leaves it uncertain:
// keep it and try again later.
func (c *Coordinator) Restore(ctx context.Context, o Outcome) (Settlement, error) {
	if err := o.validate(); err != nil {
		return Settlement{}, err
	}
	own := Ownership{Key: o.Key, Token: o.Token, Attempts: o.Attempts, OwnerID: o.OwnerID, Task: o.Task,
		Joined: o.Joined, Stage: o.Stage, Tenant: o.Tenant,
		Policy: Policy{ResultTTL: o.ResultTTL, RunningTTL: o.RunningTTL, FailureTTL: o.FailureTTL,
			Durability: o.Durability, ReplicationTimeout: min(o.ReplicationTimeout, maxReplicationTimeout)}}
	return c.Complete(ctx, own, o.Result, 0)
}

// compactJSON returns b without insignificant whitespace.
func compactJSON(b []byte) ([]byte, error) {
	if compactAlready(b) {
		// No white space outside strings: compact when valid (no copy).
		if !json.Valid(b) {
			return nil, errors.New("flight: invalid JSON")
		}
		return b, nil
	}
	var buf bytes.Buffer
	buf.Grow(len(b))
	if err := json.Compact(&buf, b); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// compactAlready reports whether b has no white space outside its strings.
func compactAlready(b []byte) bool {
	inString := false
	for i := 0; i < len(b); i++ {
		c := b[i]
		switch {
		case inString && c == '\\':
			i++
		case c == '"':
			inString = !inString
		case !inString && (c == ' ' || c == '\t' || c == '\r' || c == '\n'):
			return false
		}
	}
	return true
}
