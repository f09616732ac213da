package broker

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/flightdeck-ai/flightdeck/topics"
)

// ReadEvents reads result-stream entries with XREAD and decodes them. streams maps a stream
// name to the id to read after, "0" for all or "$" for new ones. It blocks up to block. A
// negative block does not block, and zero blocks forever, as XREAD does. Entries that are
// not valid events carry Err and are counted in bad.
func ReadEvents(ctx context.Context, rdb redis.UniversalClient, streams map[string]string, count int64, block time.Duration) (events []topics.StreamEvent, bad int, err error) {
	args := make([]string, 0, 2*len(streams))
	ids := make([]string, 0, len(streams))
	for s, id := range streams {
		args = append(args, s)
		ids = append(ids, id)
	}
	args = append(args, ids...)
	res, err := XRead(ctx, rdb, &redis.XReadArgs{Streams: args, Count: count, Block: block})
	if errors.Is(err, redis.Nil) {
		return nil, 0, nil
	}
	if err != nil {
		return nil, 0, err
	}
	for _, xs := range res {
		for _, m := range xs.Messages {
			se := topics.StreamEvent{Stream: xs.Stream, ID: m.ID}
			p, _ := m.Values[topics.FieldPayload].(string)
			if se.Event, err = topics.DecodeEvent([]byte(p)); err != nil {
				bad++
				se.Err = err
			}
			events = append(events, se)
		}
	}
	return events, bad, nil
}

// XRead is XREAD that also works on Redis Cluster, where one XREAD may only name streams of
// one hash slot. On a *redis.ClusterClient with several streams it reads each stream with
// its own XREAD concurrently, each with the same BLOCK, and merges the answers. Like XREAD,
// it answers redis.Nil when no stream had entries.
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
