package chaos

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/flightdeck-ai/flightdeck/internal/broker"
	"github.com/flightdeck-ai/flightdeck/topics"
)

// What the runner reads from Redis after the run: the events, dead letters, backlog.

// drain waits until every task of want has an event and no entry is pending or undelivered,
// or until timeout. want holds task ids and is emptied as events arrive.
func drain(ctx context.Context, rdb redis.UniversalClient, ks topics.Keyspace, want map[string]bool, timeout time.Duration, logf func(string, ...any)) bool {
	from := map[string]string{}
	for _, s := range chaosStages {
		from[ks.Results(s)] = "0"
	}
	deadline := time.Now().Add(timeout)
	lastLog := time.Now()
	for {
		for {
			evs, _, err := broker.ReadEvents(ctx, rdb, from, 5000, -1)
			if err != nil || len(evs) == 0 {
				break
			}
			for _, ev := range evs {
				from[ev.Stream] = ev.ID
				delete(want, ev.Event.TaskID)
			}
		}
		var pending int64
		if len(want) == 0 {
			bl, err := backlog(ctx, rdb, ks)
			if err != nil {
				pending = -1
			}
			for _, b := range bl {
				pending += b.Pending + max(b.Lag, 0)
			}
			if err == nil && pending == 0 {
				return true
			}
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return false
		}
		if time.Since(lastLog) > 10*time.Second {
			logf("draining: %d tasks without an event, %d entries pending", len(want), pending)
			lastLog = time.Now()
		}
		time.Sleep(500 * time.Millisecond)
	}
}

// readAllEvents reads both result streams from the start.
func readAllEvents(ctx context.Context, rdb redis.UniversalClient, ks topics.Keyspace) ([]topics.Event, error) {
	var out []topics.Event
	for _, s := range chaosStages {
		from := map[string]string{ks.Results(s): "0"}
		for {
			evs, _, err := broker.ReadEvents(ctx, rdb, from, 5000, -1)
			if err != nil {
				return nil, err
			}
			if len(evs) == 0 {
				break
			}
			for _, ev := range evs {
				from[ev.Stream] = ev.ID
				if ev.Err != nil {
					return nil, fmt.Errorf("undecodable event %s: %w", ev.ID, ev.Err)
				}
				out = append(out, ev.Event)
			}
		}
	}
	return out, nil
}

// readDeadLetters reads both dead-letter streams.
func readDeadLetters(ctx context.Context, rdb redis.UniversalClient, ks topics.Keyspace) ([]DeadLetter, error) {
	var out []DeadLetter
	for _, s := range chaosStages {
		msgs, err := rdb.XRange(ctx, ks.DLQ(s), "-", "+").Result()
		if err != nil {
			return nil, err
		}
		for _, m := range msgs {
			str := func(k string) string { v, _ := m.Values[k].(string); return v }
			d := DeadLetter{Stage: s, Reason: str(topics.FieldReason), Detail: str(topics.FieldDetail),
				Consumer: str(topics.FieldConsumer), At: m.ID}
			if ms, _, ok := strings.Cut(m.ID, "-"); ok {
				if v, err := strconv.ParseInt(ms, 10, 64); err == nil {
					d.At = time.UnixMilli(v).UTC().Format("15:04:05.000")
				}
			}
			var t struct {
				TaskID string `json:"taskId"`
			}
			if json.Unmarshal([]byte(str(topics.FieldPayload)), &t) == nil {
				d.TaskID = t.TaskID
			}
			out = append(out, d)
		}
	}
	return out, nil
}

// backlog reads each task stream's pending entries per holder, the parking consumer's
// included, and lag in group flightdeck.
func backlog(ctx context.Context, rdb redis.UniversalClient, ks topics.Keyspace) ([]Backlog, error) {
	var out []Backlog
	for _, s := range chaosStages {
		b := Backlog{Stage: s}
		for _, stream := range ks.TaskStreams(s) {
			groups, err := rdb.XInfoGroups(ctx, stream).Result()
			if err != nil && !strings.Contains(err.Error(), "no such key") {
				return nil, fmt.Errorf("chaos: XINFO GROUPS %s: %w", stream, err)
			}
			for _, g := range groups {
				if g.Name != topics.ConsumerGroup {
					continue
				}
				b.Pending += g.Pending
				lag := g.Lag
				// The lag XINFO GROUPS reports derives from the group's entries-read counter,
				// which Redis 7.0 does not keep in step on replicas. This is redis/redis#12898,
				// fixed in later releases. After a cluster failover the promoted replica reports
				// a lag of entries long delivered. Count the undelivered entries instead.
				if g.Lag != 0 {
					undelivered, err := rdb.XRangeN(ctx, stream, "("+g.LastDeliveredID, "+", 1_000_000).Result()
					if err != nil {
						return nil, fmt.Errorf("chaos: XRANGE %s: %w", stream, err)
					}
					lag = int64(len(undelivered))
				}
				b.Lag += lag
				if g.Pending == 0 {
					continue
				}
				// Who holds them: a parked follower nobody answered sits under the parking
				// consumer, anything else under a consumer process.
				p, err := rdb.XPending(ctx, stream, topics.ConsumerGroup).Result()
				if err != nil {
					return nil, fmt.Errorf("chaos: XPENDING %s: %w", stream, err)
				}
				if b.Holders == nil {
					b.Holders = map[string]int64{}
				}
				for name, n := range p.Consumers {
					b.Holders[name] += n
				}
				b.Parked += p.Consumers[topics.ParkingConsumer]
			}
		}
		out = append(out, b)
	}
	return out, nil
}

// redisDiagnostics writes the server's command statistics and its slow log since its last
// restart, for a look at where Redis spent its time. It is best effort.
func redisDiagnostics(ctx context.Context, rdb redis.UniversalClient, path string) {
	var b strings.Builder
	if s, err := rdb.Info(ctx, "commandstats", "stats", "persistence", "cpu").Result(); err == nil {
		b.WriteString(s)
	}
	if entries, err := rdb.SlowLogGet(ctx, 50).Result(); err == nil {
		b.WriteString("\n# slowlog (last 50 since the last restart)\n")
		for _, e := range entries {
			fmt.Fprintf(&b, "%s %8dus %s\n", e.Time.Format("15:04:05"), e.Duration.Microseconds(), clip([]byte(strings.Join(e.Args, " "))))
		}
	}
	_ = os.WriteFile(path, []byte(b.String()), 0o644)
}

func writeJSON(path string, v any) error {
	b, err := json.MarshalIndent(v, "", " ")
	if err != nil {
		return err
	}
	return os.WriteFile(path, b, 0o644)
}
