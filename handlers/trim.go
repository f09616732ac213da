package handlers

import (
	"context"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/flightdeck-ai/flightdeck/topics"
)

// trimLoop removes task entries every consumer group has acknowledged, and result events older
// than the retention, every interval. Task streams are not capped at enqueue, because a MAXLEN
// would drop unread tasks once a backlog outgrows it. This trims only entries below every
// group's last delivered id and below the oldest pending entry, so nothing unread or
// unacknowledged is ever dropped.
func (c *Consumer) trimLoop(ctx context.Context, interval time.Duration) {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		c.trimResults(ctx)
		for _, s := range c.cfg.Stages {
			for _, stream := range c.cfg.Keyspace.TaskStreams(s.Name) {
				tctx, cancel := context.WithTimeout(ctx, 5*time.Second)
				if n, err := trimAcked(tctx, c.rdb, stream); err != nil {
					c.log.Debug().Err(err).Str("stream", stream).Msg("trim failed")
				} else if n > 0 {
					c.log.Debug().Int64("trimmed", n).Str("stream", stream).Msg("trimmed acknowledged task entries")
				}
				cancel()
			}
		}
	}
}

// trimAcked trims stream with XTRIM MINID ~ below every group's last delivered id and below
// every group's oldest pending id. It returns how many entries went.
func trimAcked(ctx context.Context, rdb redis.UniversalClient, stream string) (int64, error) {
	groups, err := rdb.XInfoGroups(ctx, stream).Result()
	if err != nil || len(groups) == 0 {
		return 0, err
	}
	floor := ""
	lower := func(id string) {
		if id != "" && id != "0-0" && (floor == "" || topics.IDLess(id, floor)) {
			floor = id
		}
	}
	for _, g := range groups {
		if g.LastDeliveredID == "" || g.LastDeliveredID == "0-0" {
			return 0, nil // a group that has read nothing holds everything
		}
		lower(g.LastDeliveredID)
		if g.Pending > 0 {
			p, err := rdb.XPending(ctx, stream, g.Name).Result()
			if err != nil {
				return 0, err
			}
			lower(p.Lower)
		}
	}
	if floor == "" {
		return 0, nil
	}
	return rdb.XTrimMinIDApprox(ctx, stream, floor, 0).Result()
}

// trimResults trims the result streams of the consumer's stages below Redis's now minus
// ResultRetention. XTRIM MINID ~ removes whole listpack nodes only, so a little more may stay.
func (c *Consumer) trimResults(ctx context.Context) {
	if c.cfg.ResultRetention < 0 {
		return
	}
	tctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	now, err := c.rdb.Time(tctx).Result()
	if err != nil {
		c.log.Debug().Err(err).Msg("result trim: reading Redis's clock failed")
		return
	}
	minID := strconv.FormatInt(now.Add(-c.cfg.ResultRetention).UnixMilli(), 10) + "-0"
	for _, s := range c.cfg.Stages {
		stream := c.cfg.Keyspace.Results(s.Name)
		if n, err := c.rdb.XTrimMinIDApprox(tctx, stream, minID, 0).Result(); err != nil {
			c.log.Debug().Err(err).Str("stream", stream).Msg("result trim failed")
		} else if n > 0 {
			c.log.Debug().Int64("trimmed", n).Str("stream", stream).Msg("trimmed result events past the retention")
		}
	}
}
