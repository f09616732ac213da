package stream

import (
	"context"
	"time"

	"github.com/redis/go-redis/v9"
)

// maxCandidates bounds the claim candidates a topic keeps while its handlers are busy.
const maxCandidates = 1000

// claimLoop looks at other consumers' pending entries every ClaimInterval, whether or not a
// handler is free. Per consumer it reads the entries idle at least ClaimIdle, or ParkCheck
// for the parking consumer, from a cursor that moves on every pass. That way no number of
// live entries hides a dead one.
//
// Check decides. Claimed entries wait as candidates until a handler is free. Parked entries
// whose flight is alive are touched so they rest until the next check. This consumer's own
// pending entries that it has lost track of are taken back the same way.
func (l *topicLoop) claimLoop() {
	t := time.NewTicker(l.s.cfg.ClaimInterval)
	defer t.Stop()
	cursors := map[string]string{}
	for {
		select {
		case <-l.ctx.Done():
			return
		case <-t.C:
		}
		if !l.s.reading() {
			continue
		}
		ctx, cancel := context.WithTimeout(l.ctx, max(l.s.cfg.ClaimInterval, 2*time.Second))
		switch err := l.scan(ctx, cursors); {
		case err == nil:
			l.s.stat.passes.Add(1)
		case l.ctx.Err() == nil:
			l.recreateGroup(err)
			l.s.log.Debug().Err(err).Str("stream", l.topic).Msg("claim scan failed")
		}
		cancel()
	}
}

func (l *topicLoop) scan(ctx context.Context, cursors map[string]string) error {
	cfg := &l.s.cfg
	consumers, err := cfg.Client.XInfoConsumers(ctx, l.topic, cfg.Group).Result()
	if err != nil {
		return err
	}
	var cands []Candidate
	var mine []redis.XMessage
	for _, c := range consumers {
		if c.Pending == 0 {
			delete(cursors, c.Name)
			continue
		}
		idle := cfg.ClaimIdle
		if c.Name == cfg.Parking {
			idle = cfg.ParkCheck
		}
		start := "-"
		if at := cursors[c.Name]; at != "" {
			start = "(" + at
		}
		pend, err := cfg.Client.XPendingExt(ctx, &redis.XPendingExtArgs{Stream: l.topic, Group: cfg.Group,
			Idle: idle, Start: start, End: "+", Count: int64(cfg.ClaimBatch), Consumer: c.Name}).Result()
		if err != nil {
			return err
		}
		listed := time.Now()
		if len(pend) < cfg.ClaimBatch {
			delete(cursors, c.Name) // the next pass starts over
		} else {
			cursors[c.Name] = pend[len(pend)-1].ID
		}
		for _, p := range pend {
			if c.Name == cfg.Consumer {
				if !l.isHeld(p.ID) {
					mine = append(mine, redis.XMessage{ID: p.ID})
				}
				continue
			}
			cands = append(cands, Candidate{Stream: l.topic, ID: p.ID, Consumer: c.Name,
				Parked: c.Name == cfg.Parking, Idle: p.Idle, Listed: listed, Deliveries: p.RetryCount})
		}
	}
	if len(mine) > 0 {
		if err := l.fill(ctx, mine); err != nil {
			return err
		}
		if n := l.add(mine, "recovered", nil, time.Time{}); n > 0 {
			l.s.stat.recovered.Add(int64(n))
			l.signal()
		}
	}
	cands = l.s.unpausedCandidates(ctx, cands)
	if len(cands) == 0 {
		return nil
	}
	msgs := make([]redis.XMessage, len(cands))
	for i, c := range cands {
		msgs[i].ID = c.ID
	}
	if err := l.fill(ctx, msgs); err != nil {
		return err
	}
	for i := range cands {
		cands[i].Values = msgs[i].Values
	}
	verdicts := cfg.Check(ctx, cands)
	var keep []string
	l.mu.Lock()
	for i, v := range verdicts {
		if i >= len(cands) {
			break
		}
		switch v {
		case Claim:
			if !l.candIDs[cands[i].ID] && len(l.cands) < maxCandidates {
				l.candIDs[cands[i].ID] = true
				l.cands = append(l.cands, cands[i])
			}
		case Keep:
			if cands[i].Parked {
				keep = append(keep, cands[i].ID)
			}
		}
	}
	l.mu.Unlock()
	if len(keep) > 0 {
		// MIN-IDLE keeps this from touching an entry another consumer claimed meanwhile.
		ids, err := cfg.Client.XClaimJustID(ctx, &redis.XClaimArgs{Stream: l.topic, Group: cfg.Group,
			Consumer: cfg.Parking, MinIdle: cfg.ParkCheck, Messages: keep}).Result()
		if err != nil {
			return err
		}
		l.s.stat.kept.Add(int64(len(ids)))
	}
	l.signal()
	return nil
}

// fill reads the fields of the given entries with pipelined XRANGE. An entry that is gone
// from the stream keeps nil fields.
func (l *topicLoop) fill(ctx context.Context, msgs []redis.XMessage) error {
	cmds, err := l.s.cfg.Client.Pipelined(ctx, func(p redis.Pipeliner) error {
		for _, m := range msgs {
			p.XRangeN(ctx, l.topic, m.ID, m.ID, 1)
		}
		return nil
	})
	if err != nil {
		return err
	}
	for i, c := range cmds {
		if r, ok := c.(*redis.XMessageSliceCmd); ok && len(r.Val()) == 1 {
			msgs[i].Values = r.Val()[0].Values
		}
	}
	return nil
}

func (l *topicLoop) isHeld(id string) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.held[id] != nil
}

// claim takes over up to n candidates and returns how many it took. It sends XCLAIM with
// their idle threshold, so that an entry touched or claimed by someone else meanwhile is
// left alone.
func (l *topicLoop) claim(n int) int {
	cfg := &l.s.cfg
	l.mu.Lock()
	take := l.cands[:min(n, len(l.cands))]
	l.cands = l.cands[len(take):]
	for _, c := range take {
		delete(l.candIDs, c.ID)
	}
	l.mu.Unlock()
	byIdle := map[time.Duration][]Candidate{}
	for _, c := range take {
		idle := cfg.ClaimIdle
		if c.Parked {
			idle = cfg.ParkCheck
		}
		byIdle[idle] = append(byIdle[idle], c)
	}
	got := 0
	for idle, cs := range byIdle {
		ids := make([]string, len(cs))
		deliveries := make(map[string]int64, len(cs))
		parked := map[string]bool{}
		for i, c := range cs {
			ids[i] = c.ID
			deliveries[c.ID] = c.Deliveries + 1
			parked[c.ID] = c.Parked
		}
		msgs, err := cfg.Client.XClaim(l.ctx, &redis.XClaimArgs{Stream: l.topic, Group: cfg.Group,
			Consumer: cfg.Consumer, MinIdle: idle, Messages: ids}).Result()
		if err != nil {
			l.s.log.Warn().Err(err).Str("stream", l.topic).Msg("claim failed")
			continue
		}
		k := l.add(msgs, "claimed", deliveries, time.Time{})
		got += k
		l.s.stat.claimed.Add(int64(k))
		for _, m := range msgs {
			if parked[m.ID] {
				l.s.stat.unparked.Add(1)
			}
		}
	}
	if got > 0 {
		l.s.log.Debug().Str("stream", l.topic).Int("entries", got).Msg("claimed entries")
	}
	return max(got, len(take))
}
