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
func (c *Coordinator) fcall(ctx context.Context, s *lua.Function, p Policy, keys []string, argv []any) (cmd *redis.Cmd, confirmed bool) {
	if p.Durability != DurabilityReplicated {
		return s.RunVia(ctx, c.calls, c.rdb, keys, argv...), true
	}
	cmd, acked := s.RunReplicated(ctx, c.repl, c.rdb, p.ReplicationTimeout, keys, argv...)
	return cmd, acked > 0
}

// giveUp hands over an ownership no replica confirmed (a failover could lose it while this
// owner runs, and a second owner would run the call too): the next acquire takes the flight
// over at once. A handover that fails leaves the lease to lapse.
func (c *Coordinator) giveUp(ctx context.Context, o Ownership) {
	hctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Second)
	defer cancel()
	_ = c.Handover(hctx, o)
}

// notReplicated is the error of a call that took effect on the master but that no replica
// acknowledged.
func notReplicated(op, key string) error {
	return fmt.Errorf("flight: %s %q: %w", op, key, ErrNotReplicated)
}
