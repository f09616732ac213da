package broker

import (
	"context"
	"fmt"
	"strconv"
	"strings"

	"github.com/redis/go-redis/v9"
)

// Replicas returns how many replicas the master serves, from INFO replication's
// connected_slaves. On a cluster it returns the fewest any master serves. It fails when
// the credential may not run WAIT.
func Replicas(ctx context.Context, rdb redis.UniversalClient) (int, error) {
	n, err := onNodes(ctx, rdb, nodeReplicas, func(least, r int) int {
		if least < 0 || r < least {
			return r
		}
		return least
	}, -1)
	return max(n, 0), err
}

func nodeReplicas(ctx context.Context, rdb redis.UniversalClient) (int, error) {
	// WAIT 0 answers at once. This only asks whether the credential may run it.
	if err := rdb.Do(ctx, "WAIT", 0, 1).Err(); err != nil {
		return 0, fmt.Errorf("broker: WAIT: %w", err)
	}
	info, err := rdb.Info(ctx, "replication").Result()
	if err != nil {
		return 0, fmt.Errorf("broker: INFO replication: %w", err)
	}
	for _, line := range strings.Split(info, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), "connected_slaves:"); ok {
			return strconv.Atoi(v)
		}
	}
	return 0, fmt.Errorf("broker: INFO replication has no connected_slaves")
}
