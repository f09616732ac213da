package topics

import (
	"context"
	"encoding/json"
	"fmt"
	"sort"
	"time"

	"github.com/redis/go-redis/v9"
)

// StageInfo is one entry of the stage registry (Keyspace.Stages): a stage that a consumer
// process consumes, or consumed, as the last consumer that registered it described it. The
// hash field is the stage name; the value is the JSON of the other fields.
type StageInfo struct {
	// Name is the stage (the hash field; not part of the stored JSON).
	Name string `json:"-"`
	// Partitions is the stage's task stream count (1: the one stream ai:tasks:<stage>).
	Partitions int `json:"partitions"`
	// Mode is the stage's coordination mode (HYBRID, DISTRIBUTED_ONLY, LOCAL_ONLY, BYPASS).
	Mode string `json:"mode"`
	// Model is the stage's model adapter.
	Model string `json:"model"`
	// Consumer is the process name of the consumer that registered the stage last.
	Consumer string `json:"consumer"`
	// LastSeen is when that consumer last registered it: Unix milliseconds of the Redis clock.
	LastSeen int64 `json:"lastSeen"`
}

// LastSeenTime is LastSeen as a time (the zero time when it is unset).
func (s StageInfo) LastSeenTime() time.Time {
	if s.LastSeen <= 0 {
		return time.Time{}
	}
	return time.UnixMilli(s.LastSeen)
}

// RegisterStages writes stages into the stage registry of ks, in one round trip, and returns
// the entries they replaced (one per stage that had one). Each stage's LastSeen is set to now
// (Unix ms; pass the Redis clock).
func RegisterStages(ctx context.Context, rdb redis.Cmdable, ks Keyspace, now int64, stages []StageInfo) ([]StageInfo, error) {
	if len(stages) == 0 {
		return nil, nil
	}
	names := make([]string, 0, len(stages))
	args := make([]any, 0, 2*len(stages))
	for _, s := range stages {
		s.LastSeen = now
		b, err := json.Marshal(s)
		if err != nil {
			return nil, fmt.Errorf("topics: stage %s: %w", s.Name, err)
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
		return nil, fmt.Errorf("topics: register stages: %w", err)
	}
	var prev []StageInfo
	for i, v := range old.Val() {
		if js, ok := v.(string); ok {
			var s StageInfo
			_ = json.Unmarshal([]byte(js), &s)
			s.Name = names[i]
			prev = append(prev, s)
		}
	}
	return prev, nil
}

// ReadStages returns the stage registry of ks sorted by name, and the Redis clock
// (Unix ms) when it was read. A value that is not a StageInfo JSON still names a known
// stage: it is returned with its name only.
func ReadStages(ctx context.Context, rdb redis.Cmdable, ks Keyspace) ([]StageInfo, int64, error) {
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
		return nil, 0, fmt.Errorf("topics: read the stage registry %s: %w", ks.Stages(), err)
	}
	out := make([]StageInfo, 0, len(all.Val()))
	for name, v := range all.Val() {
		var s StageInfo
		_ = json.Unmarshal([]byte(v), &s)
		s.Name = name
		out = append(out, s)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out, tm.Val().UnixMilli(), nil
}
