package stream

import (
	"context"
	"sync"
	"time"
)

// pauseCache holds the last answer of Config.Paused.
type pauseCache struct {
	mu      sync.Mutex
	checked time.Time
	paused  bool
}

// paused reports whether the stage is paused, asking Config.Paused at most once per
// PauseCheck. On an error the last answer stands.
func (s *Subscriber) paused(ctx context.Context) bool {
	if s.cfg.Paused == nil {
		return false
	}
	c := &s.pause
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.checked.IsZero() && time.Since(c.checked) < s.cfg.PauseCheck {
		return c.paused
	}
	cctx, cancel := context.WithTimeout(ctx, s.cfg.PauseCheck)
	p, err := s.cfg.Paused(cctx)
	cancel()
	c.checked = time.Now()
	switch {
	case err != nil:
		if ctx.Err() == nil {
			s.log.Debug().Err(err).Msg("reading the pause state failed; keeping the last one")
		}
	case p != c.paused:
		c.paused = p
		if p {
			s.log.Info().Msg("stage paused: reading no new entries")
		} else {
			s.log.Info().Msg("stage resumed")
		}
	}
	return c.paused
}

// unpausedCandidates returns cands, or only the parked ones while the stage is paused. A
// paused stage takes no other consumer's work over, but still answers parked tasks.
func (s *Subscriber) unpausedCandidates(ctx context.Context, cands []Candidate) []Candidate {
	if len(cands) == 0 || !s.paused(ctx) {
		return cands
	}
	parked := cands[:0]
	for _, c := range cands {
		if c.Parked {
			parked = append(parked, c)
		}
	}
	return parked
}
