package redistest

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"testing"

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

// ACLDenials returns the entries of admin's ACL LOG for user, as "<reason> <context> <object>
// (x<count>)": what Redis refused that user.
func ACLDenials(tb testing.TB, admin redis.UniversalClient, user string) []string {
	tb.Helper()
	res, err := admin.Do(context.Background(), "ACL", "LOG", "128").Slice()
	if err != nil {
		tb.Fatal(err)
	}
	var out []string
	for _, e := range res {
		m, ok := e.(map[any]any)
		if !ok {
			tb.Fatalf("ACL LOG entry %T", e)
		}
		if m["username"] == user {
			out = append(out, fmt.Sprintf("%v %v %v (x%v)", m["reason"], m["context"], m["object"], m["count"]))
		}
	}
	return out
}
