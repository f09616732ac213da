package stream

import (
	"context"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/rs/zerolog"

	"github.com/flightdeck-ai/flightdeck/lua"
)

// touchLoop keeps custody of every entry the topic holds until Close hands them over. Each
// TouchInterval it resets the idle time of those still pending under this consumer, so
// that no other consumer claims them while this process lives. Entries found taken over
// or acknowledged elsewhere are dropped unless a handler has them. drop describes the
// entries gone from the stream.
func (l *topicLoop) touchLoop() {
	t := time.NewTicker(l.s.cfg.TouchInterval)
	defer t.Stop()
	for {
		select {
		case <-l.ctx.Done():
			return
		case <-t.C:
		}
		l.touchHeld()
	}
}

// touchHeld touches the entries the topic holds, once. It holds touchMu from its list of ids
// to Redis's answer, so that no hand-over runs in between.
func (l *topicLoop) touchHeld() {
	l.touchMu.Lock()
	defer l.touchMu.Unlock()
	if l.handedOver {
		return
	}
	ids := l.heldIDs()
	if len(ids) == 0 {
		return
	}
	ctx, cancel := context.WithTimeout(l.ctx, l.s.cfg.TouchInterval)
	defer cancel()
	lost, gone := l.touch(ctx, ids, 0)
	for _, id := range lost {
		l.s.stat.lost.Add(1)
		l.drop(id, false)
	}
	for _, id := range gone {
		if l.drop(id, true) {
			l.s.stat.lost.Add(1)
		}
	}
	l.s.stat.touches.Add(1)
}

func (l *topicLoop) heldIDs() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	ids := make([]string, 0, len(l.held))
	for id := range l.held {
		ids = append(ids, id)
	}
	return ids
}

// touch sets the idle time of the entries this consumer still holds. An idle of 0 touches
// them and a large one hands them over. It returns the ids it no longer holds. Lost ids are
// still in the stream, acknowledged or claimed. Gone ids are not, because they were lost
// with Redis's data or trimmed once acknowledged.
func (l *topicLoop) touch(ctx context.Context, ids []string, idle time.Duration) (lost, gone []string) {
	for start := 0; start < len(ids); start += 500 {
		chunk := ids[start:min(start+500, len(ids))]
		argv := make([]any, 0, 3+len(chunk))
		argv = append(argv, l.s.cfg.Group, l.s.cfg.Consumer, idle.Milliseconds())
		for _, id := range chunk {
			argv = append(argv, id)
		}
		res, err := lua.StreamTouch.Run(ctx, l.s.cfg.Client, []string{l.topic}, argv...).Slice()
		if err != nil {
			if ctx.Err() == nil {
				l.s.log.Warn().Err(err).Str("stream", l.topic).Msg("touching held entries failed")
			}
			return lost, gone
		}
		if len(res) > 0 {
			if n, _ := res[0].(int64); n < 0 {
				l.recreateGroup(errNoGroup)
				return lost, gone
			}
		}
		if len(res) < 2 {
			return lost, gone
		}
		nLost, _ := res[1].(int64)
		for i, v := range res[2:] {
			if id, ok := v.(string); ok {
				if int64(i) < nLost {
					lost = append(lost, id)
				} else {
					gone = append(gone, id)
				}
			}
		}
	}
	return lost, gone
}

type noGroupError struct{}

func (noGroupError) Error() string { return "NOGROUP the consumer group is gone" }

var errNoGroup error = noGroupError{}

// releaseAll hands every entry the topic still holds over to the other consumers. The
// touch loop touches none of them afterwards.
func (l *topicLoop) releaseAll(ctx context.Context) {
	l.touchMu.Lock()
	defer l.touchMu.Unlock()
	l.handedOver = true
	ids := l.heldIDs()
	if len(ids) == 0 {
		return
	}
	l.touch(ctx, ids, l.s.cfg.ReleaseIdle)
	l.s.stat.released.Add(int64(len(ids)))
	l.s.log.Info().Str("stream", l.topic).Int("entries", len(ids)).Msg("held entries handed over to the other consumers")
}

// acker acknowledges settled entries in batches. Whatever accumulated while the previous
// XACK was on the wire goes in the next one, in one pipeline for all streams.
type acker struct {
	rdb   redis.UniversalClient
	group string
	log   zerolog.Logger
	stat  *counters

	mu      sync.Mutex
	pending map[string][]string
	kick    chan struct{}
}

func newAcker(rdb redis.UniversalClient, group string, log zerolog.Logger, stat *counters) *acker {
	return &acker{rdb: rdb, group: group, log: log, stat: stat, pending: map[string][]string{},
		kick: make(chan struct{}, 1)}
}

func (a *acker) add(stream, id string) {
	a.mu.Lock()
	a.pending[stream] = append(a.pending[stream], id)
	a.mu.Unlock()
	select {
	case a.kick <- struct{}{}:
	default:
	}
}

func (a *acker) run(done <-chan struct{}) {
	for {
		select {
		case <-done:
			a.flush()
			return
		case <-a.kick:
			if !a.flush() {
				// Redis is away. The entries stay pending under this consumer meanwhile.
				// Try again shortly.
				select {
				case <-done:
				case <-time.After(200 * time.Millisecond):
				}
				select {
				case a.kick <- struct{}{}:
				default:
				}
			}
		}
	}
}

// flush sends what is pending. It reports false when the XACKs failed, and keeps them.
func (a *acker) flush() bool {
	a.mu.Lock()
	batch := a.pending
	if len(batch) == 0 {
		a.mu.Unlock()
		return true
	}
	a.pending = map[string][]string{}
	a.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	n := 0
	_, err := a.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		for stream, ids := range batch {
			for start := 0; start < len(ids); start += 1000 {
				p.XAck(ctx, stream, a.group, ids[start:min(start+1000, len(ids))]...)
			}
			n += len(ids)
		}
		return nil
	})
	if err != nil && strings.Contains(err.Error(), "NOGROUP") {
		return true // Redis lost the group, so nothing is left to acknowledge
	}
	if err != nil {
		a.log.Warn().Err(err).Int("entries", n).Msg("acknowledging entries failed; retrying")
		a.mu.Lock()
		for stream, ids := range batch {
			a.pending[stream] = append(a.pending[stream], ids...)
		}
		a.mu.Unlock()
		return false
	}
	a.stat.acked.Add(int64(n))
	return true
}
