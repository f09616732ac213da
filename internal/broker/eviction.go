package broker

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"

	"github.com/redis/go-redis/v9"

	"github.com/flightdeck-ai/flightdeck/internal/redisconn"
)

// NoEviction is the one maxmemory-policy under which Redis never drops a key.
const NoEviction = "noeviction"

// ErrPolicyRefused means the credential may run neither INFO nor CONFIG GET, so the policy
// cannot be read. Asking again only fills Redis's ACL log.
var ErrPolicyRefused = errors.New("broker: the credential may run neither INFO nor CONFIG GET")

// EvictionPolicy returns Redis's maxmemory-policy. It reads INFO memory's maxmemory_policy,
// or CONFIG GET where INFO is refused. INFO comes first because the consumer's documented
// ACL grants it, CONFIG GET would also read secrets, and managed Redis services often
// refuse CONFIG. On a cluster it asks every master and returns the first policy other than
// noeviction.
func EvictionPolicy(ctx context.Context, rdb redis.UniversalClient) (string, error) {
	return onNodes(ctx, rdb, nodePolicy, func(acc, p string) string {
		if p != NoEviction {
			return p
		}
		return acc
	}, NoEviction)
}

// nodePolicy reads one node's policy.
func nodePolicy(ctx context.Context, rdb redis.UniversalClient) (string, error) {
	info, ierr := rdb.Info(ctx, "memory").Result()
	if ierr == nil {
		for _, line := range strings.Split(info, "\n") {
			if v, ok := strings.CutPrefix(strings.TrimSpace(line), "maxmemory_policy:"); ok {
				return v, nil
			}
		}
		ierr = errors.New("INFO memory has no maxmemory_policy")
	}
	cfg, err := rdb.ConfigGet(ctx, "maxmemory-policy").Result()
	if p := cfg["maxmemory-policy"]; err == nil && p != "" {
		return p, nil
	}
	if noPerm(ierr) && noPerm(err) {
		return "", fmt.Errorf("%w: %w", ErrPolicyRefused, errors.Join(ierr, err))
	}
	return "", fmt.Errorf("broker: read maxmemory-policy: %w", errors.Join(ierr, err))
}

// noPerm reports whether err is an ACL refusal.
func noPerm(err error) bool { return redisconn.Refused(err) }

// onNodes reads one value with read from rdb, or on a cluster from every master, folded into
// init with fold. The masters are asked at once and answer in any order.
func onNodes[T any](ctx context.Context, rdb redis.UniversalClient, read func(context.Context, redis.UniversalClient) (T, error),
	fold func(acc, v T) T, init T) (T, error) {
	cc, ok := rdb.(*redis.ClusterClient)
	if !ok {
		return read(ctx, rdb)
	}
	var mu sync.Mutex
	acc := init
	err := cc.ForEachMaster(ctx, func(ctx context.Context, n *redis.Client) error {
		v, err := read(ctx, n)
		if err != nil {
			return err
		}
		mu.Lock()
		defer mu.Unlock()
		acc = fold(acc, v)
		return nil
	})
	if err != nil {
		var zero T
		return zero, err
	}
	return acc, nil
}
