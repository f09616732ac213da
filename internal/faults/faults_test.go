package faults_test

import (
	"context"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/flightdeck-ai/flightdeck/flight"
	"github.com/flightdeck-ai/flightdeck/internal/faults"
	"github.com/flightdeck-ai/flightdeck/internal/testkit/redistest"
	"github.com/flightdeck-ai/flightdeck/lua"
	"github.com/flightdeck-ai/flightdeck/topics"
)

// TestAfterScriptsSeesEachAnsweringScript: the hook names acquire, complete and cancel once
// each, after Redis answered them, on a direct client and through a pipeline (the consumer's
// Batcher), and nothing else.
func TestAfterScriptsSeesEachAnsweringScript(t *testing.T) {
	srv := redistest.Start(t, nil)
	for _, batched := range []bool{false, true} {
		rdb := redis.NewClient(&redis.Options{Addr: srv.Addr()})
		defer rdb.Close()
		var ops []string
		rdb.AddHook(faults.AfterScripts(func(op string) { ops = append(ops, op) }))
		cfg := flight.Config{Client: rdb, Keyspace: topics.Keyspace{Prefix: "t"}}
		if batched {
			b := lua.NewBatcher(rdb)
			defer b.Close()
			cfg.Calls = b
		}
		coord, err := flight.NewCoordinator(cfg)
		if err != nil {
			t.Fatal(err)
		}
		ctx := context.Background()
		key := "ai:s:v1:acme:rk:k1"
		if batched {
			key = "ai:s:v1:acme:rk:k2"
		}
		d, err := coord.Acquire(ctx, flight.AcquireParams{Key: key, OwnerID: "o", Stage: "s", Tenant: "acme", Start: true})
		if err != nil || d.Action != flight.ActionOwner {
			t.Fatalf("acquire: %+v, %v", d, err)
		}
		if _, err := coord.Complete(ctx, *d.Owner, []byte(`1`), time.Millisecond); err != nil {
			t.Fatal(err)
		}
		if err := rdb.Set(ctx, "t:other", "x", 0).Err(); err != nil {
			t.Fatal(err)
		}
		if _, err := coord.Cancel(ctx, key, "why", flight.CancelParams{Stage: "s"}); err == nil {
			t.Errorf("cancel of a finished flight succeeded")
		}
		want := []string{"acquire", "complete", "cancel"}
		if len(ops) != len(want) || ops[0] != want[0] || ops[1] != want[1] || ops[2] != want[2] {
			t.Errorf("batched=%v: hook saw %v, want %v", batched, ops, want)
		}
	}
}
