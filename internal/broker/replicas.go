package broker

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync"

	"github.com/redis/go-redis/v9"
)

// Replicas returns how many replicas the master serves (INFO replication's connected_slaves);
// on a cluster, the fewest any master serves. It fails when the credential may not run WAIT.
func Replicas(ctx context.Context, rdb redis.UniversalClient) (int, error) {
	cc, ok := rdb.(*redis.ClusterClient)
	if !ok {
		return nodeReplicas(ctx, rdb)
	}
	var (
		mu    sync.Mutex
		least = -1
	)
	err := cc.ForEachMaster(ctx, func(ctx context.Context, n *redis.Client) error {
		r, err := nodeReplicas(ctx, n)
		if err != nil {
			return err
		}
		mu.Lock()
		defer mu.Unlock()
		if least < 0 || r < least {
			least = r
		}
		return nil
	})
	if err != nil {
		return 0, err
	}
	return max(least, 0), nil
}

func nodeReplicas(ctx context.Context, rdb redis.UniversalClient) (int, error) {
	// WAIT 0 answers at once: this only asks whether the credential may run it.
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
