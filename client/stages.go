package client

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/flightdeck-ai/flightdeck/internal/broker"
	"github.com/flightdeck-ai/flightdeck/topics"
)

// StageInfo is an entry of the stage registry at topics.Keyspace.Stages. It names a stage
// that a consumer process consumes or consumed, with its partitions, mode and model, and
// the last consumer that registered it and when.
type StageInfo = topics.StageInfo

// ErrUnknownStage is matched by the error CheckStages returns for a stage that no consumer
// has registered. That error is an *UnknownStageError, which lists the known stages.
var ErrUnknownStage = errors.New("client: unknown stage")

// UnknownStageError is the error of CheckStages: stages no consumer has registered. It
// matches ErrUnknownStage.
type UnknownStageError struct {
	// Unknown are the stages asked for that the registry does not hold, in the order asked.
	Unknown []string
	// Known are the registered stages, sorted. It is empty when no consumer has registered
	// any stage under the client's keyspace yet.
	Known []string
}

// Error names the unknown stages and the known ones.
func (e *UnknownStageError) Error() string {
	quoted := make([]string, len(e.Unknown))
	for i, s := range e.Unknown {
		quoted[i] = strconv.Quote(s)
	}
	word := "stage"
	if len(quoted) > 1 {
		word = "stages"
	}
	if len(e.Known) == 0 {
		return fmt.Sprintf("unknown %s %s: no consumer has registered any stage yet", word, strings.Join(quoted, ", "))
	}
	return fmt.Sprintf("unknown %s %s (known: %s)", word, strings.Join(quoted, ", "), strings.Join(e.Known, ", "))
}

// Is reports whether target is ErrUnknownStage.
func (e *UnknownStageError) Is(target error) bool { return target == ErrUnknownStage }

// Stages returns the stage registry of the client's keyspace, sorted by name. It holds
// every stage that a consumer process has registered at start or on a liveness beat,
// including stages whose consumers have stopped since. LastSeen tells which.
func (c *Client) Stages(ctx context.Context) ([]StageInfo, error) {
	st, _, err := broker.ReadStages(ctx, c.rdb, c.ks)
	if err != nil {
		return nil, fmt.Errorf("client: %w", err)
	}
	return st, nil
}

// CheckStages returns an *UnknownStageError, matching ErrUnknownStage, when one of stages
// is not in the stage registry. No consumer has ever consumed such a stage, so a task
// enqueued there would wait on a stream that nobody reads. The cause is often a typo or a
// prefix that differs from the consumers'. Enqueue does not check, because that would cost
// a registry read per call and a producer's ACL need not allow reading the registry. Call
// CheckStages once before enqueueing, as the producer CLI does.
func (c *Client) CheckStages(ctx context.Context, stages ...string) error {
	reg, err := c.Stages(ctx)
	if err != nil {
		return err
	}
	known := make([]string, len(reg))
	for i, s := range reg {
		known[i] = s.Name
	}
	var unknown []string
	for _, s := range stages {
		if !slices.Contains(known, s) && !slices.Contains(unknown, s) {
			unknown = append(unknown, s)
		}
	}
	if len(unknown) > 0 {
		return &UnknownStageError{Unknown: unknown, Known: known}
	}
	return nil
}

// StreamStatus is what the consumer group shows of one task stream: whether anyone reads it,
// and what waits there. A field Redis cannot tell is -1.
type StreamStatus struct {
	// Stream is the task stream.
	Stream string
	// Exists is false when the stream does not exist: nothing was ever enqueued there, or
	// it was deleted.
	Exists bool
	// Length counts the stream's entries. Acknowledged ones stay until consumers trim them.
	Length int64
	// Group is true when the consumer group exists on the stream: some consumer has read it.
	Group bool
	// Lag counts the entries not yet delivered to the group, or -1 when Redis cannot tell.
	Lag int64
	// Pending counts the entries delivered and not yet acknowledged, parked ones included.
	Pending int64
	// Parked counts the pending entries of tasks that follow a running flight.
	Parked int64
	// Consumers counts the consumers of the group, leaving out the parking consumer.
	Consumers int
	// LastRead is how long ago the group's most recently active consumer read or claimed,
	// or -1 when there is no consumer.
	LastRead time.Duration
	// OldestPending is the id of the lowest pending entry, or "" when nothing is pending.
	OldestPending string
	// OldestPendingBy is the consumer that holds OldestPending.
	OldestPendingBy string
	// OldestPendingIdle is how long OldestPending has been idle.
	OldestPendingIdle time.Duration
}

// StreamStatuses reads each task stream's length and consumer group in one round trip. It
// sends XLEN, XINFO GROUPS, XINFO CONSUMERS, and XPENDING for the lowest pending entry.
func (c *Client) StreamStatuses(ctx context.Context, streams ...string) ([]StreamStatus, error) {
	type cmds struct {
		length    *redis.IntCmd
		groups    *redis.XInfoGroupsCmd
		consumers *redis.XInfoConsumersCmd
		oldest    *redis.XPendingExtCmd
	}
	all := make([]cmds, len(streams))
	_, err := c.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		for i, s := range streams {
			all[i] = cmds{length: p.XLen(ctx, s), groups: p.XInfoGroups(ctx, s), consumers: p.XInfoConsumers(ctx, s, topics.ConsumerGroup),
				oldest: p.XPendingExt(ctx, &redis.XPendingExtArgs{Stream: s, Group: topics.ConsumerGroup, Start: "-", End: "+", Count: 1})}
		}
		return nil
	})
	if err != nil && !missing(err) {
		return nil, fmt.Errorf("client: read the consumer group: %w", err)
	}
	out := make([]StreamStatus, len(streams))
	for i, s := range streams {
		st := StreamStatus{Stream: s, Lag: -1, LastRead: -1}
		groups, err := all[i].groups.Result()
		if err != nil {
			if !missing(err) {
				return nil, fmt.Errorf("client: XINFO GROUPS %s: %w", s, err)
			}
			out[i] = st
			continue
		}
		st.Exists, st.Length = true, all[i].length.Val()
		for _, g := range groups {
			if g.Name == topics.ConsumerGroup {
				st.Group, st.Lag, st.Pending = true, g.Lag, g.Pending
			}
		}
		if st.Group {
			cons, _ := all[i].consumers.Result()
			for _, cn := range cons {
				if cn.Name == topics.ParkingConsumer {
					st.Parked = cn.Pending
					continue
				}
				st.Consumers++
				if st.LastRead < 0 || cn.Idle < st.LastRead {
					st.LastRead = cn.Idle
				}
			}
			if pe, _ := all[i].oldest.Result(); len(pe) > 0 {
				st.OldestPending, st.OldestPendingBy, st.OldestPendingIdle = pe[0].ID, pe[0].Consumer, pe[0].Idle
			}
		}
		out[i] = st
	}
	return out, nil
}

// missing reports a Redis error for a stream or group that does not exist.
func missing(err error) bool {
	if err == nil {
		return false
	}
	msg := err.Error()
	return strings.Contains(msg, "no such key") || strings.HasPrefix(msg, "NOGROUP")
}
