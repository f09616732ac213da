package handlers

import (
	"context"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/rs/zerolog"

	"github.com/flightdeck-ai/flightdeck/internal/broker"
	"github.com/flightdeck-ai/flightdeck/topics"
)

// stageRegistry registers a consumer's stages in the stage registry, topics.Keyspace.Stages, at
// start and on every liveness beat. Producers use it to tell a stage some consumer reads from a
// mistyped one, and how long ago a consumer last read it. Entries stay after the consumer
// stops: a stage that had consumers is still a known stage, and its lastSeen shows how stale it
// is.
type stageRegistry struct {
	rdb    redis.UniversalClient
	ks     topics.Keyspace
	stages []topics.StageInfo
	log    zerolog.Logger

	mu     sync.Mutex
	warned map[string]bool // "<stage> <consumer> <model>" of the other consumers warned about
}

// otherModelFor is how recent another consumer's entry of a stage must be to count as a live
// consumer of the stage.
const otherModelFor = 10 * time.Second

// maxWarned bounds the other consumers a registry remembers warning about.
const maxWarned = 1024

// newStageRegistry returns the registry entries of a consumer named name that consumes stages.
func newStageRegistry(rdb redis.UniversalClient, ks topics.Keyspace, name string, stages []StageConfig, log zerolog.Logger) *stageRegistry {
	r := &stageRegistry{rdb: rdb, ks: ks, log: log, warned: map[string]bool{}}
	for _, s := range stages {
		r.stages = append(r.stages, topics.StageInfo{Name: s.Name, Partitions: max(s.Partitions, 1),
			Mode: string(s.Mode), Model: s.Model, Consumer: name})
	}
	return r
}

// register writes the consumer's stages as seen at now, in Unix ms by the Redis clock of the
// liveness beat. A nil registry registers nothing. When another consumer registered one of the
// stages lately with another model, it warns once per consumer and model. The stage's tasks are
// then split between them, and some get the other model's results.
func (r *stageRegistry) register(ctx context.Context, now int64) error {
	if r == nil {
		return nil
	}
	prev, err := broker.RegisterStages(ctx, r.rdb, r.ks, now, r.stages)
	for _, p := range prev {
		for _, s := range r.stages {
			if p.Name != s.Name || p.Consumer == s.Consumer || p.Model == s.Model || now-p.LastSeen > otherModelFor.Milliseconds() {
				continue
			}
			r.mu.Lock()
			k := p.Name + " " + p.Consumer + " " + p.Model
			first := !r.warned[k]
			if len(r.warned) >= maxWarned {
				clear(r.warned) // a long-lived process sees restarts under new names: bounded
			}
			r.warned[k] = true
			r.mu.Unlock()
			if first {
				r.log.Warn().Str("stage", s.Name).Str("model", s.Model).Str("otherConsumer", p.Consumer).
					Str("otherModel", p.Model).Msg("another consumer serves this stage with another model: " +
					"the stage's tasks are split between them, and each key gets the result of whichever model runs it")
			}
		}
	}
	return err
}
