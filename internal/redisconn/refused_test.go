package redisconn_test

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/flightdeck-ai/flightdeck/internal/redisconn"
	"github.com/flightdeck-ai/flightdeck/internal/testkit/redistest"
)

// TestRefused: an ACL refusal of a command or a key, at top level and inside a script, is
// Refused; a dial error, a script's own error, an error that only quotes a refusal, and nil
// are not.
func TestRefused(t *testing.T) {
	s := redistest.Start(t, &redistest.Options{ACL: []string{"user app on >pw ~app:* +@all -hkeys"}})
	ctx := context.Background()
	c := redis.NewClient(&redis.Options{Addr: s.Addr(), Username: "app", Password: "pw"})
	defer c.Close()
	top := c.HKeys(ctx, "app:h").Err()
	inScript := c.Eval(ctx, "return redis.call('HKEYS', KEYS[1])", []string{"app:h"}).Err()
	keyInScript := c.Eval(ctx, "return redis.call('GET', 'other:k')", []string{"app:h"}).Err()
	key := c.Get(ctx, "other:k").Err()
	own := c.Eval(ctx, "return redis.error_reply('ERR no such thing')", nil).Err()
	down := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1", MaxRetries: -1})
	defer down.Close()
	dial := down.Ping(ctx).Err()
	for _, tc := range []struct {
		name string
		err  error
		want bool
	}{{"top level", top, true}, {"in a script", inScript, true},
		{"a key in a script", keyInScript, true}, {"a key", key, true}, {"wrapped", errors.Join(errors.New("gateway"), top), true},
		{"script error", own, false}, {"quoted", fmt.Errorf("task says %v", top), false}, {"dial", dial, false}, {"nil", nil, false}} {
		if got := redisconn.Refused(tc.err); got != tc.want {
			t.Errorf("%s: Refused(%v) = %v, want %v", tc.name, tc.err, got, tc.want)
		}
	}
}
