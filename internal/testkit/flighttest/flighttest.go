// Package flighttest edits flight records in Redis for tests: it reads and writes the fields
// of a flight's record by the names flight.ParseRecord gives them, so that a test can set a
// flight up in a state the scripts would have left it in.
package flighttest

import (
	"context"
	"errors"
	"fmt"
	"strconv"

	"github.com/redis/go-redis/v9"

	"github.com/flightdeck-ai/flightdeck/flight"
)

// Fields reads the fields of the record at key, a flight's record key, and its result. It
// returns nil fields when there is no record.
func Fields(ctx context.Context, rdb redis.Cmdable, key string) (map[string]string, []byte, error) {
	raw, err := rdb.Get(ctx, key).Result()
	if errors.Is(err, redis.Nil) {
		return nil, nil, nil
	}
	if err != nil {
		return nil, nil, err
	}
	return flight.ParseRecord(raw)
}

// Set sets fields of the record at key, pairs of name and value, keeping its TTL and result. A
// record that does not exist is made, without a TTL. Setting expireAt moves startedAt so
// that the attempt ends then, by the record's pinned runningTTL, and setting "result" sets
// the result bytes.
func Set(ctx context.Context, rdb redis.Cmdable, key string, kv ...string) error {
	if len(kv)%2 != 0 {
		return fmt.Errorf("flighttest: odd number of arguments: %q", kv)
	}
	f, result, err := Fields(ctx, rdb, key)
	if err != nil {
		return err
	}
	if f == nil {
		f = map[string]string{}
	}
	for i := 0; i < len(kv); i += 2 {
		name, v := kv[i], kv[i+1]
		if name == "result" {
			result = []byte(v)
			continue
		}
		if name == "expireAt" {
			at, err := strconv.ParseInt(v, 10, 64)
			if err != nil {
				return fmt.Errorf("flighttest: expireAt %q: %w", v, err)
			}
			run := flight.PinnedPolicy(f["policy"]).RunningTTL.Milliseconds()
			if run <= 0 {
				run = (flight.Policy{}).WithDefaults().RunningTTL.Milliseconds()
			}
			name, v = "startedAt", strconv.FormatInt(max(at-run, 0), 10)
		}
		f[name] = v
	}
	return rdb.Set(ctx, key, flight.EncodeRecord(f, result), redis.KeepTTL).Err()
}
