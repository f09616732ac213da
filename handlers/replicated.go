package handlers

import (
	"context"

	"github.com/flightdeck-ai/flightdeck/flight"
	"github.com/flightdeck-ai/flightdeck/internal/broker"
)

// checkReplicated warns at start when a stage asks for replicated claims and the master has no
// replica. Each of the stage's claims then waits the replication timeout and is given up, so
// its tasks wait until a replica connects.
func (c *Consumer) checkReplicated(ctx context.Context) {
	var names []string
	for _, s := range c.cfg.Stages {
		if s.Durability == flight.DurabilityReplicated {
			names = append(names, s.Name)
		}
	}
	if len(names) == 0 {
		return
	}
	n, err := broker.Replicas(ctx, c.rdb)
	switch {
	case err != nil:
		c.log.Error().Err(err).Strs("stages", names).Msg("durability replicated, but the master's replicas cannot be counted or WAIT is refused (grant +wait and +info): these stages' claims may all be given up")
	case n == 0:
		c.log.Warn().Strs("stages", names).Msg("durability replicated, but the master has no replica: these stages' claims are given up and their tasks wait until one connects")
	default:
		c.log.Info().Strs("stages", names).Int("replicas", n).Msg("replicated claims: each claim and outcome waits for a replica")
	}
}
