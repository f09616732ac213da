package main_test

// The floor with Flightdeck's scripts (impl=floor-scripts): the floor's loop (floor_bench_test.go)
// with the consumer's own flight calls in place of the floor's two scripts. Each task of a
// read batch runs on a goroutine of its own: flight.Coordinator's Acquire, the simulated model,
// and Complete, which writes the event and acknowledges the entry, both through one
// lua.Batcher as in the consumer, so that the acquires of a batch leave together and so do
// the completes. It has none of the rest of the consumer's lifecycle: no subscriber and
// handler goroutines, heartbeat, spool, joins, kept outcomes, breaker, retries, metrics or
// ledger. Beside the floor and the consumer in the same run, it splits the consumer's extra
// cost per task into what its calls cost and what the rest of its lifecycle costs.

import (
	"context"
	"errors"
	"fmt"
	"os"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/flightdeck-ai/flightdeck/flight"
	"github.com/flightdeck-ai/flightdeck/handlers"
	"github.com/flightdeck-ai/flightdeck/handlers/model"
	"github.com/flightdeck-ai/flightdeck/lua"
	"github.com/flightdeck-ai/flightdeck/topics"
)

// floorScripts is the floor-scripts child's coordinator and the stage it runs.
type floorScripts struct {
	*floorLoop
	coord *flight.Coordinator
	stage handlers.StageConfig
}

// newFloorScripts loads the flight library if it is missing and builds the coordinator on a
// batcher of f's connection, with the built-in stage named stage at its defaults.
func newFloorScripts(ctx context.Context, f *floorLoop, stage string) (*floorScripts, error) {
	if err := lua.EnsureLibrary(ctx, f.rdb); err != nil {
		return nil, fmt.Errorf("floor-scripts: %w", err)
	}
	stages, err := handlers.LoadStages("", []string{stage})
	if err != nil {
		return nil, fmt.Errorf("floor-scripts: %w", err)
	}
	coord, err := flight.NewCoordinator(flight.Config{Client: f.rdb, Calls: lua.NewBatcher(f.rdb),
		Keyspace: topics.Keyspace{Prefix: f.prefix}, Consumer: f.name})
	if err != nil {
		return nil, fmt.Errorf("floor-scripts: %w", err)
	}
	return &floorScripts{floorLoop: f, coord: coord, stage: stages[0]}, nil
}

// batch runs each task of one read batch on a goroutine of its own: acquire, model, complete.
func (s *floorScripts) batch(ctx context.Context, msgs []redis.XMessage) error {
	errs := make([]error, len(msgs))
	var wg sync.WaitGroup
	for i, m := range msgs {
		wg.Go(func() { errs[i] = s.task(ctx, m) })
	}
	wg.Wait()
	return errors.Join(errs...)
}

// task acquires the flight of one entry's task, runs the model as its owner and completes it.
func (s *floorScripts) task(ctx context.Context, m redis.XMessage) error {
	t, key, err := floorDecode(m)
	if err != nil {
		return fmt.Errorf("floor-scripts: %w", err)
	}
	queued, _ := t.EntryQueueWait(m.ID, time.Time{}, time.Now())
	actx, cancel := context.WithTimeout(ctx, s.stage.Lease)
	defer cancel()
	// As the consumer's leader of its key asks, with WantInline, for the result of a hit.
	d, err := s.coord.Acquire(actx, flight.AcquireParams{Key: key, OwnerID: s.name,
		Task:  flight.Task{ID: t.TaskID, Stream: s.stream, Entry: m.ID, Queued: queued},
		Stage: t.Stage, Tenant: t.Tenant, Policy: s.stage.Policy, Start: true, WantInline: true,
		MaxInline: s.stage.MaxInlineResult, MaxSharedInline: s.stage.MaxSharedInlineResult})
	if err != nil {
		return fmt.Errorf("floor-scripts: acquire %s: %w", t.TaskID, err)
	}
	if d.Action != flight.ActionOwner || d.Owner == nil {
		return fmt.Errorf("floor-scripts: task %s: acquire gave %s, not an owner", t.TaskID, d.Action)
	}
	start := time.Now()
	out, err := s.sim.Call(actx, model.Request{Stage: t.Stage, TaskID: t.TaskID, Tenant: t.Tenant,
		Input: t.Input, Attempt: d.Attempts, Consumer: s.name}, func() {})
	if err != nil {
		return fmt.Errorf("floor-scripts: model %s: %w", t.TaskID, err)
	}
	if _, err := s.coord.Complete(actx, *d.Owner, out, time.Since(start)); err != nil {
		return fmt.Errorf("floor-scripts: complete %s: %w", t.TaskID, err)
	}
	return nil
}

// floorBatcher is what the floor's loop runs per read batch.
type floorBatcher interface {
	batch(ctx context.Context, msgs []redis.XMessage) error
}

// floorMode returns the loop's batch handler for the child's mode: the floor's scripts, loaded
// here, or with "floor-scripts" the consumer's flight calls.
func floorMode(ctx context.Context, f *floorLoop, mode string) (floorBatcher, error) {
	if mode != "floor-scripts" {
		return f, f.loadScripts(ctx)
	}
	return newFloorScripts(ctx, f, os.Getenv(repStageEnv))
}
