package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/rs/zerolog"

	"github.com/flightdeck-ai/flightdeck/internal/redisconn"
)

// Backoff of the start-up wait for Redis: the first retry after waitFirst, doubling up to
// waitMax between tries.
const (
	waitFirst = 250 * time.Millisecond
	waitMax   = 5 * time.Second
)

// waitForRedis pings Redis until it answers, so that a consumer started before its Redis, as
// in a compose file or after a node reboot, comes up by itself. Every failed try is one
// warning line with the redacted address and the reason. After limit it gives up with an
// error, and limit 0 means one try. It returns ctx's error when ctx ends first.
func waitForRedis(ctx context.Context, log *zerolog.Logger, newClient func() redis.UniversalClient, url string,
	limit time.Duration) error {
	rdb := newClient()
	defer rdb.Close()
	dials := &dialErrors{}
	if cc, ok := rdb.(*redis.ClusterClient); ok {
		// A cluster client dials through one client per node.
		cc.OnNewNode(func(n *redis.Client) { n.AddHook(dials) })
	} else {
		rdb.AddHook(dials)
	}
	start := time.Now()
	back := waitFirst
	for try := 1; ; try++ {
		pctx, cancel := context.WithTimeout(ctx, time.Second)
		err := rdb.Ping(pctx).Err()
		cancel()
		if err == nil {
			if try > 1 {
				log.Info().Str("redis", redisconn.RedactURL(url)).Str("waited", time.Since(start).Round(time.Millisecond).String()).Msg("Redis answers")
			}
			return nil
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if d := dials.take(); d != nil && errors.Is(err, context.DeadlineExceeded) {
			// The client retried the dial until the ping's deadline. Say why it failed, such as
			// connection refused or no such host, rather than only that time ran out.
			err = fmt.Errorf("%w (%v)", err, d)
		}
		err = redisconn.RedactError(err, url)
		if refused(err) {
			// Waiting does not fix credentials or rights.
			return fmt.Errorf("redis %s refused the consumer: %w", redisconn.RedactURL(url), err)
		}
		left := limit - time.Since(start)
		if left <= 0 {
			return fmt.Errorf("redis %s did not answer within %v (--redis-wait): %w", redisconn.RedactURL(url), limit, err)
		}
		back = min(back, left)
		log.Warn().Str("redis", redisconn.RedactURL(url)).Str("error", err.Error()).Int("try", try).
			Str("retryIn", back.Round(time.Millisecond).String()).Str("giveUpIn", left.Round(100*time.Millisecond).String()).Msg("waiting for Redis")
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(back):
		}
		back = min(2*back, waitMax)
	}
}

// refused reports an error that retrying cannot cure: wrong credentials or missing rights.
func refused(err error) bool {
	msg := err.Error()
	return strings.Contains(msg, "WRONGPASS") || strings.Contains(msg, "NOAUTH") || strings.Contains(msg, "NOPERM")
}

// dialErrors is a go-redis hook that keeps the last failed dial's error.
type dialErrors struct {
	mu   sync.Mutex
	last error
}

// take returns the last dial error since the previous take, if any.
func (d *dialErrors) take() error {
	d.mu.Lock()
	defer d.mu.Unlock()
	err := d.last
	d.last = nil
	return err
}

// DialHook records the errors of dials.
func (d *dialErrors) DialHook(next redis.DialHook) redis.DialHook {
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		c, err := next(ctx, network, addr)
		if err != nil {
			d.mu.Lock()
			d.last = err
			d.mu.Unlock()
		}
		return c, err
	}
}

// ProcessHook passes commands through.
func (d *dialErrors) ProcessHook(next redis.ProcessHook) redis.ProcessHook { return next }

// ProcessPipelineHook passes pipelines through.
func (d *dialErrors) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}
