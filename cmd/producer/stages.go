package main

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/flightdeck-ai/flightdeck/admin"
	"github.com/flightdeck-ai/flightdeck/client"
	"github.com/flightdeck-ai/flightdeck/internal/broker"
	"github.com/flightdeck-ai/flightdeck/topics"
)

// anyStageUsage is the help text of --any-stage for enqueue and load.
const anyStageUsage = "enqueue even to a stage that no consumer has registered (the stage registry)"

// stageRefusal is an enqueue refused because a stage is not registered: a usage mistake, printed
// as one line and exit status 2.
type stageRefusal struct{ msg string }

func (e stageRefusal) Error() string { return e.msg }

// checkStages refuses stages that no consumer has registered, unless --any-stage.
func (a *app) checkStages(ctx context.Context, c *client.Client, stages []string) error {
	err := c.CheckStages(ctx, stages...)
	if use, ok := errors.AsType[*client.UnknownStageError](err); ok {
		msg := use.Error()
		if len(use.Known) == 0 {
			msg += fmt.Sprintf(" under prefix %q", a.prefix)
		}
		return stageRefusal{msg + "; --any-stage enqueues anyway"}
	}
	if err != nil {
		return fmt.Errorf("cannot check the stages: %w (--any-stage enqueues without the check)", err)
	}
	return nil
}

// stageRow is one line of 'producer stages'.
type stageRow struct {
	Name       string `json:"name"`
	Partitions int    `json:"partitions"`
	Mode       string `json:"mode"`
	Model      string `json:"model"`
	Consumer   string `json:"consumer"`
	LastSeen   string `json:"lastSeen,omitempty"`
	// LastSeenAgoMs is how long ago, by the Redis clock, the consumer last registered the stage.
	LastSeenAgoMs int64 `json:"lastSeenAgoMs"`
	// Backlog counts the entries no consumer has read yet, or is -1 when Redis cannot tell.
	Backlog int64 `json:"backlog"`
	// Pending counts the entries read and not yet answered, parked ones included.
	Pending int64 `json:"pending"`
	// Scheduled counts the tasks waiting in the stage's scheduled set, with a notBefore ahead
	// or a long retry delay.
	Scheduled int64 `json:"scheduled"`
	// Paused says who paused the stage, and is absent when it runs. Its consumers read none
	// of its tasks until it is resumed.
	Paused *topics.PauseInfo `json:"paused,omitempty"`
}

// pausedStages returns the paused stages among stages. The dashboard pauses and resumes them.
func pausedStages(ctx context.Context, rdb redis.UniversalClient, ks topics.Keyspace, stages []string) (map[string]topics.PauseInfo, error) {
	if len(stages) == 0 {
		return nil, nil
	}
	in, err := admin.New(admin.Config{Client: rdb, Keyspace: ks, Stages: stages})
	if err != nil {
		return nil, err
	}
	return in.PausedStages(ctx)
}

func (a *app) stages(ctx context.Context, args []string) error {
	fs := a.newFlagSet("stages", "[--format table|json]")
	format := listFormatFlag(fs)
	pos, err := a.parse(fs, args)
	if err != nil {
		return err
	}
	if len(pos) > 0 {
		return usagef("unexpected argument %q", pos[0])
	}
	if err := checkFormat(*format); err != nil {
		return err
	}
	rdb, c, err := a.connect(ctx)
	if err != nil {
		return err
	}
	defer rdb.Close()
	reg, now, err := broker.ReadStages(ctx, rdb, c.Keyspace())
	if err != nil {
		return err
	}
	rows := make([]stageRow, len(reg))
	var streams []string
	for i, s := range reg {
		rows[i] = stageRow{Name: s.Name, Partitions: s.Partitions, Mode: s.Mode, Model: s.Model,
			Consumer: s.Consumer, LastSeenAgoMs: now - s.LastSeen}
		if t := s.LastSeenTime(); !t.IsZero() {
			rows[i].LastSeen = topics.FormatTime(t)
		}
		streams = append(streams, streamsOf(c.Keyspace(), s)...)
	}
	sts, err := c.StreamStatuses(ctx, streams...)
	if err != nil {
		return err
	}
	names := make([]string, len(reg))
	for i, s := range reg {
		names[i] = s.Name
	}
	paused, err := pausedStages(ctx, rdb, c.Keyspace(), names)
	if err != nil {
		return err
	}
	byStream := map[string]client.StreamStatus{}
	for _, st := range sts {
		byStream[st.Stream] = st
	}
	for i, s := range reg {
		for _, name := range streamsOf(c.Keyspace(), s) {
			st := byStream[name]
			switch {
			case !st.Group && rows[i].Backlog >= 0:
				rows[i].Backlog += st.Length // no consumer ever read it
			case st.Lag < 0 && rows[i].Backlog >= 0:
				rows[i].Backlog = -1
			case st.Lag > 0 && rows[i].Backlog >= 0:
				rows[i].Backlog += st.Lag
			}
			rows[i].Pending += st.Pending
		}
		// The scheduled set, and the one a version without its index kept, drained when due.
		var set, legacy *redis.IntCmd
		_, err := rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
			set, legacy = p.ZCard(ctx, c.Keyspace().Scheduled(s.Name)), p.ZCard(ctx, c.Keyspace().ScheduledLegacy(s.Name))
			return nil
		})
		if err != nil {
			return fmt.Errorf("read the scheduled tasks of %s: %w", s.Name, err)
		}
		rows[i].Scheduled = set.Val() + legacy.Val()
		if p, ok := paused[s.Name]; ok {
			rows[i].Paused = &p
		}
	}
	if *format == "json" {
		return writeJSON(a.stdout, rows)
	}
	if len(rows) == 0 {
		fmt.Fprintf(a.stderr, "producer: no consumer has registered any stage under prefix %q yet\n", a.prefix)
		return nil
	}
	tw := tabwriter.NewWriter(a.stdout, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "STAGE\tPARTITIONS\tMODE\tMODEL\tCONSUMER\tLAST SEEN\tBACKLOG\tPENDING\tSCHEDULED")
	for _, r := range rows {
		backlog := strconv.FormatInt(r.Backlog, 10)
		if r.Backlog < 0 {
			backlog = "?"
		}
		name := r.Name
		if r.Paused != nil {
			name += " (paused)"
		}
		fmt.Fprintf(tw, "%s\t%d\t%s\t%s\t%s\t%s ago\t%s\t%d\t%d\n", name, r.Partitions, r.Mode, r.Model, r.Consumer,
			ago(time.Duration(r.LastSeenAgoMs)*time.Millisecond), backlog, r.Pending, r.Scheduled)
	}
	return tw.Flush()
}

// streamsOf lists the task streams of a registered stage, with the partitions its consumers
// read.
func streamsOf(ks topics.Keyspace, s client.StageInfo) []string {
	ks.Partitions = map[string]int{s.Name: s.Partitions}
	return ks.TaskStreams(s.Name)
}

// ago formats a duration for people: 850ms, 12.3s, 4m5s, 3h2m.
func ago(d time.Duration) string {
	switch {
	case d < 0:
		return "0s"
	case d < time.Second:
		return d.Round(time.Millisecond).String()
	case d < time.Minute:
		return d.Round(100 * time.Millisecond).String()
	case d < time.Hour:
		return d.Round(time.Second).String()
	}
	return strings.TrimSuffix(d.Round(time.Minute).String(), "0s")
}
