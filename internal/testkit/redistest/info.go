package redistest

import (
	"context"
	"fmt"
	"strconv"
	"strings"

	"github.com/redis/go-redis/v9"
)

// InfoNumber reads one number of an INFO section of rdb's server: the value of the line named
// line, or, when field is set, that field of a "k=v,k=v" value, such as field "usec" of line
// "cmdstat_fcall" in INFO commandstats. A line or field that is not there reads as 0.
func InfoNumber(ctx context.Context, rdb redis.UniversalClient, section, line, field string) (float64, error) {
	info, err := rdb.Info(ctx, section).Result()
	if err != nil {
		return 0, fmt.Errorf("redistest: INFO %s: %w", section, err)
	}
	for _, l := range strings.Split(info, "\n") {
		k, v, ok := strings.Cut(strings.TrimSpace(l), ":")
		if !ok || k != line {
			continue
		}
		if field == "" {
			return strconv.ParseFloat(v, 64)
		}
		for _, kv := range strings.Split(v, ",") {
			if name, val, ok := strings.Cut(kv, "="); ok && name == field {
				return strconv.ParseFloat(val, 64)
			}
		}
	}
	return 0, nil
}
