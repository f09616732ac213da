// Package redisconn turns Flightdeck's Redis settings into go-redis clients: the URL from a
// flag, REDIS_URL or REDIS_URL_FILE, and one fresh *redis.Options per client.
package redisconn

import (
	"fmt"
	"os"
	"strings"

	"github.com/redis/go-redis/v9"
	"github.com/redis/go-redis/v9/maintnotifications"
)

// DefaultURL is used when no URL is given anywhere.
const DefaultURL = "redis://127.0.0.1:6379/0"

// URL returns the Redis URL: flagURL when set, else $REDIS_URL, else the contents of the file
// named by $REDIS_URL_FILE (so a password need not appear in a process listing), else
// DefaultURL. getenv is os.Getenv in production.
func URL(flagURL string, getenv func(string) string) (string, error) {
	if flagURL != "" {
		return flagURL, nil
	}
	if u := getenv("REDIS_URL"); u != "" {
		return u, nil
	}
	if f := getenv("REDIS_URL_FILE"); f != "" {
		b, err := os.ReadFile(f)
		if err != nil {
			return "", fmt.Errorf("redisconn: REDIS_URL_FILE: %w", err)
		}
		return strings.TrimSpace(string(b)), nil
	}
	return DefaultURL, nil
}

// Options parses a redis:// or rediss:// URL. The error never repeats the URL, which may hold
// a password.
func Options(url string) (*redis.Options, error) {
	opt, err := redis.ParseURL(url)
	if err != nil {
		return nil, fmt.Errorf("redisconn: invalid Redis URL: %w", err)
	}
	return opt, nil
}

// NewClient returns a client on a copy of opt: go-redis keeps per-client state in Options, so
// clients must not share one. Context deadlines bound every command (ContextTimeoutEnabled),
// so a coordination budget holds even against a Redis that stopped answering. Maintenance
// notifications (a Redis Enterprise feature) are off.
func NewClient(opt *redis.Options) *redis.Client {
	o := *opt
	o.ContextTimeoutEnabled = true
	o.MaintNotificationsConfig = &maintnotifications.Config{Mode: maintnotifications.ModeDisabled}
	return redis.NewClient(&o)
}

// Factory returns a function that makes a new client on opt at every call.
func Factory(opt *redis.Options) func() redis.UniversalClient {
	return func() redis.UniversalClient { return NewClient(opt) }
}
