package main

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/flightdeck-ai/flightdeck/client"
	"github.com/flightdeck-ai/flightdeck/internal/broker"
)

// stale is how long a stage may go unregistered before it counts as having no live consumer.
// A live one registers its stages on every liveness beat, every second by default. A task
// stream whose consumers have not read or claimed for this long has no live reader.
const stale = 5 * time.Second

// hints explains on stderr why the events of the missing tasks did not come. Per stage it
// prints one or two lines from the stage registry and the consumer group of the streams the
// tasks were written to. When a Redis error or an ACL stops a read, it says so in one line.
func (a *app) hints(ctx context.Context, rdb redis.UniversalClient, c *client.Client, missing []client.Receipt) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	var stages []string
	streams := map[string][]string{}
	for _, r := range missing {
		if !slices.Contains(stages, r.Stage) {
			stages = append(stages, r.Stage)
		}
		s := c.Keyspace().TaskStreamFor(r.Stage, r.TaskID)
		if !slices.Contains(streams[r.Stage], s) {
			streams[r.Stage] = append(streams[r.Stage], s)
		}
	}
	reg, now, err := broker.ReadStages(ctx, rdb, c.Keyspace())
	if err != nil {
		fmt.Fprintf(a.stderr, "producer: no hint: %v\n", err)
		return
	}
	paused, err := pausedStages(ctx, rdb, c.Keyspace(), stages)
	if err != nil {
		fmt.Fprintf(a.stderr, "producer: no hint: %v\n", err)
		return
	}
	for _, stage := range stages {
		if p, ok := paused[stage]; ok {
			// That is the cause: the unread entries on the streams only follow from it.
			fmt.Fprintf(a.stderr, "producer: stage %s: the stage is paused (by %s, %s ago): its consumers read none of its tasks until it is resumed on the dashboard\n",
				stage, p.By, ago(time.Duration(now-p.At)*time.Millisecond))
			continue
		}
		sts, err := c.StreamStatuses(ctx, streams[stage]...)
		if err != nil {
			fmt.Fprintf(a.stderr, "producer: stage %s: no hint: %v\n", stage, err)
			continue
		}
		var info *client.StageInfo
		if i := slices.IndexFunc(reg, func(s client.StageInfo) bool { return s.Name == stage }); i >= 0 {
			info = &reg[i]
		}
		for _, line := range stageHints(stage, info, now, max(a.parts, 1), sts) {
			fmt.Fprintf(a.stderr, "producer: stage %s: %s\n", stage, line)
		}
	}
}

// stageHints says what stops the events of a stage: a partition count the consumers do not
// use, and the worst of its streams: no group, no reader, behind, pending, or all answered.
// now is the Redis clock in Unix ms, and parts the producer's partition count.
func stageHints(stage string, info *client.StageInfo, now int64, parts int, sts []client.StreamStatus) []string {
	var out []string
	registry := "; no consumer has ever registered this stage (a typo, or another --prefix?)"
	alive := info != nil && time.Duration(now-info.LastSeen)*time.Millisecond < stale
	if info != nil {
		registry = fmt.Sprintf("; its last consumer %s was seen %s ago", info.Consumer,
			ago(time.Duration(now-info.LastSeen)*time.Millisecond))
		if info.Partitions != parts {
			out = append(out, fmt.Sprintf("the consumers read it in %d partitions, this producer wrote %d (--partitions %d)",
				info.Partitions, parts, info.Partitions))
		}
	}
	worst, line := -1, ""
	for _, st := range sts {
		rank, l := streamHint(stage, st, alive, registry)
		if rank > worst {
			worst, line = rank, l
		}
	}
	if line != "" {
		out = append(out, line)
	}
	return out
}

// streamHint describes one task stream, ranked: the higher the rank, the likelier it is
// the cause. alive tells that a consumer of the stage registered it lately.
func streamHint(stage string, st client.StreamStatus, alive bool, registry string) (int, string) {
	unread := st.Lag != 0 // -1: Redis cannot tell, so maybe
	switch {
	case !st.Exists:
		return 5, fmt.Sprintf("%s does not exist: its entries were deleted", st.Stream)
	case !st.Group:
		return 4, fmt.Sprintf("no consumer group on %s (%s): no consumer ever read it%s", st.Stream, entries(st.Length), registry)
	case unread && !alive && (st.Consumers == 0 || st.LastRead >= stale):
		what := "no consumer has ever read " + st.Stream
		if st.Consumers > 0 {
			what = fmt.Sprintf("no consumer has read %s for %s", st.Stream, ago(st.LastRead))
		}
		return 3, fmt.Sprintf("%s (%s)%s", what, backlog(st.Lag), registry)
	case unread:
		why := "they last read " + ago(st.LastRead) + " ago"
		if alive {
			why = strings.TrimPrefix(registry, "; ")
		}
		return 2, fmt.Sprintf("%s on %s, whose consumers are alive (%s): the stage is behind; a longer --timeout waits for it",
			backlog(st.Lag), st.Stream, why)
	case st.Pending > 0:
		return 1, fmt.Sprintf("%s pending on %s (%d parked on running flights), the oldest held by %s, idle %s",
			entries(st.Pending), st.Stream, st.Parked, st.OldestPendingBy, ago(st.OldestPendingIdle))
	}
	return 0, fmt.Sprintf("every entry of %s was read and answered: see the events with 'producer tail --stages %s --from 0'",
		st.Stream, stage)
}

// backlog says how many entries wait unread.
func backlog(lag int64) string {
	if lag < 0 {
		return "entries not yet read"
	}
	return entries(lag) + " not yet read"
}

// entries counts stream entries in words: "1 entry", "3 entries".
func entries(n int64) string {
	if n == 1 {
		return "1 entry"
	}
	return fmt.Sprintf("%d entries", n)
}
