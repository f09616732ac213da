package main

import (
	"context"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/rs/zerolog"

	"github.com/flightdeck-ai/flightdeck/internal/redisconn"
	"github.com/flightdeck-ai/flightdeck/lua"
)

// loadFunctions is `consumer --load-functions`: the operator loads the flight function library
// with FUNCTION LOAD REPLACE on every master of a cluster. It needs a credential that may load
// functions, which the consumers' own credentials on a shared Redis may not, see
// docs/SECURITY.md. It waits for Redis as a consumer does, loads, and returns.
func loadFunctions(ctx context.Context, log *zerolog.Logger, newClient func() redis.UniversalClient, url string,
	wait time.Duration) error {
	if err := waitForRedis(ctx, log, newClient, url, wait); err != nil {
		return err
	}
	rdb := newClient()
	defer rdb.Close()
	lctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if err := lua.LoadLibrary(lctx, rdb, true); err != nil {
		return fmt.Errorf("load functions: %w", err)
	}
	name, _ := lua.Library()
	log.Info().Str("library", name).Str("redis", redisconn.RedactURL(url)).Msg("flight function library loaded")
	return nil
}
