package handlers

import (
	"context"

	"github.com/redis/go-redis/v9"

	"github.com/flightdeck-ai/flightdeck/topics"
)

// stageRegistry registers a consumer's stages in the stage registry (topics.Keyspace.Stages):
// at start and on every liveness beat, so that producers can tell a stage some consumer reads
// from a mistyped one, and how long ago a consumer last read it. Entries stay after the
// consumer stops: a stage that had consumers is still a known stage, and its lastSeen shows
// how stale it is.
type stageRegistry struct {
	rdb    redis.UniversalClient
	ks     topics.Keyspace
	stages []topics.StageInfo
}

// newStageRegistry returns the registry entries of a consumer named name that consumes stages.
func newStageRegistry(rdb redis.UniversalClient, ks topics.Keyspace, name string, stages []StageConfig) *stageRegistry {
	r := &stageRegistry{rdb: rdb, ks: ks}
	for _, s := range stages {
		r.stages = append(r.stages, topics.StageInfo{Name: s.Name, Partitions: max(s.Partitions, 1),
			Mode: string(s.Mode), Model: s.Model, Consumer: name})
	}
	return r
}

// register writes the consumer's stages as seen at now (Unix ms, the Redis clock of the
// liveness beat). A nil registry registers nothing.
func (r *stageRegistry) register(ctx context.Context, now int64) error {
	if r == nil {
		return nil
	}
	return topics.RegisterStages(ctx, r.rdb, r.ks, now, r.stages)
}
