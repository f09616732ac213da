package flight

import (
	"context"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/flightdeck-ai/flightdeck/lua"
)

// fcall runs one flight function for a call under policy p (on its defaults): through
// Config.Calls, or, under DurabilityReplicated, with a WAIT for one replica behind it on the
// same connection (through Config.Calls when it is a lua.ReplicatedCaller, such as a
// lua.Batcher, whose replicated calls share one WAIT per pipeline). confirmed reports that a replica acknowledged the call (always true under
// DurabilityAsync).
func (c *Coordinator) fcall(ctx context.Context, s *lua.Function, p Policy, keys []string, argv []any) (cmd *redis.Cmd, confirmed bool, waitErr error) {
	if p.Durability != DurabilityReplicated {
		return s.RunVia(ctx, c.calls, c.rdb, keys, argv...), true, nil
	}
	cmd, acked, waitErr := s.RunReplicated(ctx, c.repl, c.rdb, p.ReplicationTimeout, keys, argv...)
	return cmd, acked > 0 && waitErr == nil, waitErr
}

// giveUp hands over an ownership no replica confirmed (a failover could lose it while this
// owner runs, and a second owner would run the call too): the next acquire takes the flight
// over at once. A handover that fails (false) leaves the lease to lapse.
func (c *Coordinator) giveUp(ctx context.Context, o Ownership) bool {
	hctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Second)
	defer cancel()
	return c.Handover(hctx, o) == nil
}

// NotReplicatedError is the error of a call that took effect on the master but that no
// replica acknowledged in time. It matches ErrNotReplicated.
type NotReplicatedError struct {
	// Op is the call: acquire, complete or fail.
	Op string
	// Key is the flight's request key.
	Key string
	// Token is the call's owner token; for an acquire, the one it issued.
	Token int64
	// HandedOver (acquire) says that the unconfirmed ownership was handed over: the next
	// acquire takes the flight at once. False: its lease lapses by itself.
	HandedOver bool
	// Err is why the WAIT failed (an ACL without +wait, a timeout of the read), or nil when
	// it answered that no replica had the call in time.
	Err error
}

// Error names the call, the key and the WAIT's failure.
func (e *NotReplicatedError) Error() string {
	if e.Err != nil {
		return fmt.Sprintf("flight: %s %q: %v: WAIT: %v", e.Op, e.Key, ErrNotReplicated, e.Err)
	}
	return fmt.Sprintf("flight: %s %q: %v", e.Op, e.Key, ErrNotReplicated)
}

// Is matches ErrNotReplicated.
func (e *NotReplicatedError) Is(target error) bool { return target == ErrNotReplicated }

// Unwrap returns the WAIT's failure.
func (e *NotReplicatedError) Unwrap() error { return e.Err }

// notReplicated is the error of op on key under token that no replica acknowledged.
func notReplicated(op, key string, token int64, waitErr error) *NotReplicatedError {
	return &NotReplicatedError{Op: op, Key: key, Token: token, Err: waitErr}
}
