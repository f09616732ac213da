package broker

import (
	"context"
	"encoding/json"
	"fmt"
	"sort"

	"github.com/redis/go-redis/v9"

	"github.com/flightdeck-ai/flightdeck/topics"
)

// RegisterStages writes stages into the stage registry of ks in one round trip. It returns
// the entries they replaced, one per stage that had one. Each stage's LastSeen is set to
// now, in Unix ms. Pass the Redis clock.
func RegisterStages(ctx context.Context, rdb redis.Cmdable, ks topics.Keyspace, now int64, stages []topics.StageInfo) ([]topics.StageInfo, error) {
	if len(stages) == 0 {
		return nil, nil
	}
	names := make([]string, 0, len(stages))
	args := make([]any, 0, 2*len(stages))
	for _, s := range stages {
		s.LastSeen = now
		b, err := json.Marshal(s)
		if err != nil {
			return nil, fmt.Errorf("broker: stage %s: %w", s.Name, err)
		}
		names = append(names, s.Name)
		args = append(args, s.Name, b)
	}
	var old *redis.SliceCmd
	_, err := rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		old = p.HMGet(ctx, ks.Stages(), names...)
		p.HSet(ctx, ks.Stages(), args...)
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("broker: register stages: %w", err)
	}
	var prev []topics.StageInfo
	for i, v := range old.Val() {
		if js, ok := v.(string); ok {
			var s topics.StageInfo
			_ = json.Unmarshal([]byte(js), &s)
			s.Name = names[i]
			prev = append(prev, s)
		}
	}
	return prev, nil
}

// ReadStages returns the stage registry of ks sorted by name, and the Redis clock in Unix
// ms when it was read. A value that is not a StageInfo JSON still names a known stage, and
// it is returned with its name only.
func ReadStages(ctx context.Context, rdb redis.Cmdable, ks topics.Keyspace) ([]topics.StageInfo, int64, error) {
	var (
		all *redis.MapStringStringCmd
		tm  *redis.TimeCmd
	)
	_, err := rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		all = p.HGetAll(ctx, ks.Stages())
		tm = p.Time(ctx)
		return nil
	})
	if err != nil {
		return nil, 0, fmt.Errorf("broker: read the stage registry %s: %w", ks.Stages(), err)
	}
	out := make([]topics.StageInfo, 0, len(all.Val()))
	for name, v := range all.Val() {
		var s topics.StageInfo
		_ = json.Unmarshal([]byte(v), &s)
		s.Name = name
		out = append(out, s)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out, tm.Val().UnixMilli(), nil
}
