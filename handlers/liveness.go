package handlers

import (
	"context"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/rs/zerolog"

	"github.com/flightdeck-ai/flightdeck/lua"
)

// Liveness keeps a consumer process's heartbeat in ai:consumers:<group> and answers whether
// the process behind a stream consumer name is alive. It is what lets a consumer claim the
// pending entries of a dead consumer quickly without ever claiming those of a slow, live one.
// Methods are safe for concurrent use.
type Liveness struct {
	rdb      redis.UniversalClient
	key      string
	name     string
	interval time.Duration
	timeout  time.Duration
	log      zerolog.Logger

	mu     sync.Mutex
	beats  map[string]int64 // process name -> last beat (Redis ms)
	now    int64            // Redis ms when beats was read
	readAt time.Time        // local time when beats was read
}

// ProcessOf returns the process name of a stream consumer name "<process>/<n>".
func ProcessOf(consumer string) string {
	if i := strings.LastIndexByte(consumer, '/'); i >= 0 {
		return consumer[:i]
	}
	return consumer
}

// Beat records one heartbeat now.
func (l *Liveness) Beat(ctx context.Context) error {
	forget := (24 * time.Hour).Milliseconds()
	return lua.Liveness.Run(ctx, l.rdb, []string{l.key}, l.name, forget).Err()
}

// Run beats every interval until ctx ends, then removes the process's entry so that its
// pending stream entries can be claimed at once.
func (l *Liveness) Run(ctx context.Context) {
	t := time.NewTicker(l.interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			bctx, cancel := context.WithTimeout(ctx, l.interval)
			if err := l.Beat(bctx); err != nil && ctx.Err() == nil {
				l.log.Warn().Err(err).Msg("liveness beat failed")
			}
			cancel()
		}
	}
}

// Forget removes the process's liveness entry (on shutdown).
func (l *Liveness) Forget(ctx context.Context) error {
	return l.rdb.HDel(ctx, l.key, l.name).Err()
}

// Alive reports whether the process behind the stream consumer name has beaten within the
// timeout. It reads the liveness hash at most every 500 ms. On a Redis error it answers true:
// not claiming is always safe, claiming a live consumer's entry is not.
func (l *Liveness) Alive(ctx context.Context, consumer string) bool {
	proc := ProcessOf(consumer)
	if proc == l.name {
		return true
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if time.Since(l.readAt) > 500*time.Millisecond {
		var (
			all *redis.MapStringStringCmd
			tm  *redis.TimeCmd
		)
		_, err := l.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
			all = p.HGetAll(ctx, l.key)
			tm = p.Time(ctx)
			return nil
		})
		if err != nil {
			return true
		}
		l.beats = make(map[string]int64, len(all.Val()))
		for k, v := range all.Val() {
			l.beats[k], _ = strconv.ParseInt(v, 10, 64)
		}
		l.now = tm.Val().UnixMilli()
		l.readAt = time.Now()
	}
	beat, ok := l.beats[proc]
	return ok && l.now-beat <= l.timeout.Milliseconds()
}

// streamHook is installed on every subscriber's own go-redis client. It
//   - stamps each entry read by XREADGROUP or XCLAIM with its stream id (field xidField), so
//     that the handler knows which entry it holds (watermill does not pass the id on), and
//   - turns the subscriber's XACK into lua.StreamAck: an entry another consumer has claimed
//     meanwhile is not acknowledged away by a zombie.
type streamHook struct {
	rdb      redis.UniversalClient
	group    string
	consumer string
	slot     *slot
}

// slot is the state of one subscriber that its claim veto needs. watermill's claim loop
// pushes every entry it claims through the subscriber's one-message channel, so a subscriber
// that claimed several entries would run them one after another; the veto lets a subscriber
// claim one entry at a time, and only while it is idle.
type slot struct {
	busy     atomic.Bool // the handler is running a message
	claiming atomic.Bool // the veto approved a claim that has not reached the handler yet
}

// mayClaim reserves the slot for one claimed entry.
func (s *slot) mayClaim() bool {
	return !s.busy.Load() && s.claiming.CompareAndSwap(false, true)
}

// xidField is the entry field the hook adds; it overwrites any value a producer put there.
const xidField = "_flightdeck_xid"

func (h *streamHook) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h *streamHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

func (h *streamHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		switch cmd.Name() {
		case "xack":
			ic, ok := cmd.(*redis.IntCmd)
			args := cmd.Args()
			if !ok || len(args) < 4 {
				return next(ctx, cmd)
			}
			stream, _ := args[1].(string)
			argv := []any{h.group, h.consumer}
			argv = append(argv, args[3:]...)
			n, err := lua.StreamAck.Run(ctx, h.rdb, []string{stream}, argv...).Int64()
			if err != nil && strings.Contains(err.Error(), "NOGROUP") {
				err = nil // the group (and the entry) are gone: nothing left to acknowledge
			}
			ic.SetVal(n)
			ic.SetErr(err)
			return err
		case "xreadgroup":
			err := next(ctx, cmd)
			if c, ok := cmd.(*redis.XStreamSliceCmd); ok {
				for _, xs := range c.Val() {
					stamp(xs.Messages)
				}
			}
			if err != nil && strings.HasPrefix(err.Error(), "NOGROUP") {
				// Redis lost the group (a restart without persistence): create it again so
				// the subscriber's next read works. watermill creates it only at Subscribe.
				h.recreateGroup(ctx, cmd.Args())
			}
			return err
		case "xclaim":
			err := next(ctx, cmd)
			if c, ok := cmd.(*redis.XMessageSliceCmd); ok {
				stamp(c.Val())
				if len(c.Val()) == 0 && h.slot != nil {
					h.slot.claiming.Store(false) // another subscriber was faster
				}
			}
			return err
		}
		return next(ctx, cmd)
	}
}

func stamp(msgs []redis.XMessage) {
	for i := range msgs {
		if msgs[i].Values == nil {
			msgs[i].Values = map[string]any{}
		}
		msgs[i].Values[xidField] = msgs[i].ID
	}
}

// recreateGroup creates the consumer group of an XREADGROUP's stream (args: xreadgroup group
// <g> <c> [count n] [block ms] streams <stream> <id>).
func (h *streamHook) recreateGroup(ctx context.Context, args []any) {
	for i, a := range args {
		if s, ok := a.(string); ok && strings.EqualFold(s, "streams") && i+1 < len(args) {
			if stream, ok := args[i+1].(string); ok {
				_ = h.rdb.XGroupCreateMkStream(ctx, stream, h.group, "0").Err()
			}
			return
		}
	}
}
