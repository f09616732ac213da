package handlers

import (
	"context"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/rs/zerolog"

	"github.com/flightdeck-ai/flightdeck/lua"
)

// liveness keeps a consumer process's heartbeat in ai:consumers:<group> and reports whether the
// process behind a consumer name is alive. The dashboard and inspect read it. A starting
// process reads it in CheckName to refuse a name a live process holds. Claiming does not read
// it: an entry's own idle time and its flight's lease decide that. Methods are safe for
// concurrent use.
type liveness struct {
	rdb      redis.UniversalClient
	key      string
	name     string
	interval time.Duration
	timeout  time.Duration
	log      zerolog.Logger
	// stages, when set, are registered in the stage registry with every beat.
	stages *stageRegistry
	// eviction, when set, reads Redis's eviction policy after every beat.
	eviction *evictionWatch

	mu     sync.Mutex
	beats  map[string]int64 // process name -> last beat, in Redis ms
	now    int64            // Redis ms when beats was read
	readAt time.Time        // local time when beats was read
}

// processOf returns the process name of a stream consumer name "<process>/<n>".
func processOf(consumer string) string {
	if i := strings.LastIndexByte(consumer, '/'); i >= 0 {
		return consumer[:i]
	}
	return consumer
}

// Beat records one heartbeat now. It registers the process's stages, if it has any, with the
// beat's Redis time.
func (l *liveness) Beat(ctx context.Context) error {
	forget := (24 * time.Hour).Milliseconds()
	now, err := lua.Liveness.Run(ctx, l.rdb, []string{l.key}, l.name, forget).Int64()
	if err != nil {
		return err
	}
	return l.stages.register(ctx, now)
}

// Run beats every interval until ctx ends, then removes the process's entry so that its
// pending stream entries can be claimed at once.
func (l *liveness) Run(ctx context.Context) {
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
			} else if l.eviction != nil {
				_, _ = l.eviction.check(bctx) // check logs what it found
			}
			cancel()
		}
	}
}

// Forget removes the process's liveness entry on shutdown.
func (l *liveness) Forget(ctx context.Context) error {
	return l.rdb.HDel(ctx, l.key, l.name).Err()
}

// Alive reports whether the process behind the stream consumer name has beaten within the
// timeout. It reads the liveness hash at most every 500 ms. On a Redis error it returns true:
// not claiming is always safe, claiming a live consumer's entry is not.
func (l *liveness) Alive(ctx context.Context, consumer string) bool {
	proc := processOf(consumer)
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
