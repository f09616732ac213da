package topics

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"sync"

	"github.com/redis/go-redis/v9"
)

// XRead is XREAD that also works on Redis Cluster: one XREAD may only name streams of one
// hash slot, so on a *redis.ClusterClient with several streams it reads each stream with its
// own XREAD, concurrently (each with the same BLOCK), and merges the answers. It answers
// redis.Nil when no stream had entries, like XREAD.
func XRead(ctx context.Context, rdb redis.UniversalClient, a *redis.XReadArgs) ([]redis.XStream, error) {
	n := len(a.Streams) / 2
	if _, cluster := rdb.(*redis.ClusterClient); !cluster || n <= 1 {
		return rdb.XRead(ctx, a).Result()
	}
	var (
		mu   sync.Mutex
		out  []redis.XStream
		errs []error
		wg   sync.WaitGroup
	)
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			res, err := rdb.XRead(ctx, &redis.XReadArgs{Streams: []string{a.Streams[i], a.Streams[n+i]},
				Count: a.Count, Block: a.Block}).Result()
			mu.Lock()
			defer mu.Unlock()
			if err != nil && !errors.Is(err, redis.Nil) {
				errs = append(errs, err)
				return
			}
			out = append(out, res...)
		}()
	}
	wg.Wait()
	if len(out) > 0 {
		return out, nil
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	return nil, redis.Nil
}

// IDLess orders stream entry ids "<ms>-<seq>" numerically.
func IDLess(a, b string) bool {
	am, as, _ := strings.Cut(a, "-")
	bm, bs, _ := strings.Cut(b, "-")
	ai, _ := strconv.ParseUint(am, 10, 64)
	bi, _ := strconv.ParseUint(bm, 10, 64)
	if ai != bi {
		return ai < bi
	}
	x, _ := strconv.ParseUint(as, 10, 64)
	y, _ := strconv.ParseUint(bs, 10, 64)
	return x < y
}
