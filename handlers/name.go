package handlers

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"
)

// ErrNameInUse is matched by the error Consumer.Run returns when the process starts under the
// name of a live one. Two processes under one name would share one pending list, each taking
// the other's entries for its own, so the second is refused. A process that died without
// stopping, by SIGKILL, a crash or a lost host, does not hold its name. A restart under it
// waits at most the liveness timeout, then picks up its own pending entries.
var ErrNameInUse = errors.New("handlers: consumer name in use")

// CheckName makes sure that no live process holds the name before this one starts under it. A
// name with no liveness entry, or with a beat older than the liveness timeout, is free at once.
// A graceful stop removes the entry. A name with a recent beat is watched until the timeout has
// passed since that beat. If the beat advances meanwhile, another process is alive under the
// name and CheckName returns an error matching ErrNameInUse. If it does not, the process behind
// it is dead and the name is free.
func (l *liveness) CheckName(ctx context.Context) error {
	first, now, ok, err := l.lastBeat(ctx)
	if err != nil || !ok || now-first > l.timeout.Milliseconds() {
		return err
	}
	until := first + l.timeout.Milliseconds()
	l.log.Info().Int64("beatAgoMs", now-first).Dur("upTo", time.Duration(until-now)*time.Millisecond).
		Msg("a process under this name beat recently; waiting to tell whether it is alive")
	poll := min(max(l.interval/4, 10*time.Millisecond), 250*time.Millisecond)
	t := time.NewTicker(poll)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-t.C:
		}
		beat, now, ok, err := l.lastBeat(ctx)
		switch {
		case err != nil:
			return err
		case !ok:
			return nil // it stopped gracefully meanwhile
		case beat != first:
			return fmt.Errorf("%w: a live process named %q beat %d ms ago; start this one under another name",
				ErrNameInUse, l.name, now-beat)
		case now > until:
			return nil
		}
	}
}

// lastBeat reads the name's last beat and the Redis clock, in Unix ms. ok is false when the
// name has no liveness entry.
func (l *liveness) lastBeat(ctx context.Context) (beat, now int64, ok bool, err error) {
	var (
		got *redis.SliceCmd
		tm  *redis.TimeCmd
	)
	_, err = l.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		got = p.HMGet(ctx, l.key, l.name)
		tm = p.Time(ctx)
		return nil
	})
	if err != nil {
		return 0, 0, false, fmt.Errorf("handlers: read the liveness of %q: %w", l.name, err)
	}
	now = tm.Val().UnixMilli()
	s, _ := got.Val()[0].(string)
	if s == "" {
		return 0, now, false, nil
	}
	beat, err = strconv.ParseInt(s, 10, 64)
	if err != nil {
		return 0, now, false, nil
	}
	return beat, now, true, nil
}
