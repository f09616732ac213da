package main

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/flightdeck-ai/flightdeck/client"
	"github.com/flightdeck-ai/flightdeck/handlers"
	"github.com/flightdeck-ai/flightdeck/internal/testkit/redistest"
	"github.com/flightdeck-ai/flightdeck/topics"
)

// TestCustomConsumer runs the example end to end: its consumer on a private Redis, tasks
// enqueued through the client (two with the same input), their events awaited.
func TestCustomConsumer(t *testing.T) {
	r := redistest.New(t)
	ks := topics.Keyspace{Prefix: r.Prefix}
	log := zerolog.New(zerolog.NewTestWriter(t)).Level(zerolog.WarnLevel)
	ctx, stop := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- run(ctx, handlers.Config{RedisURL: r.URL, Keyspace: ks, Logger: &log, SpoolDir: t.TempDir()})
	}()
	defer func() {
		stop()
		if err := <-done; err != nil {
			t.Errorf("run: %v", err)
		}
	}()

	cl, err := client.New(client.Config{Client: r.Client, Keyspace: ks})
	if err != nil {
		t.Fatal(err)
	}
	in := json.RawMessage(`{"question":"A migration?","answer":"I led the migration and tested it."}`)
	tasks := []topics.Task{
		{Stage: Stage, Tenant: "acme", Input: in},
		{Stage: Stage, Tenant: "acme", Input: in},
		{Stage: Stage, Tenant: "acme", Input: json.RawMessage(`{"question":"?","answer":"  "}`)},
	}
	actx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	rs, err := cl.EnqueueBatch(actx, tasks)
	if err != nil {
		t.Fatal(err)
	}
	evs := map[string]topics.Event{}
	if err := cl.Collect(actx, rs, func(ev topics.Event) { evs[ev.TaskID] = ev }); err != nil {
		t.Fatal(err)
	}
	a, b, bad := evs[rs[0].TaskID], evs[rs[1].TaskID], evs[rs[2].TaskID]
	var s score
	if err := json.Unmarshal(a.Result, &s); err != nil || a.Status != topics.StatusSucceeded {
		t.Fatalf("first task: %s %s %s", a.Status, a.Result, a.Error)
	}
	if s.Words != 7 || len(s.Keywords) != 3 || s.Attempt != 1 {
		t.Errorf("score %+v: want 7 words, keywords led, migration, tested", s)
	}
	if string(b.Result) != string(a.Result) || a.RequestKey != b.RequestKey || a.RequestKey != rs[0].RequestKey {
		t.Errorf("duplicate: %s under %s, want %s under %s", b.Result, b.RequestKey, a.Result, a.RequestKey)
	}
	if b.Shared == a.Shared {
		t.Errorf("both duplicates shared %q: one must own, the other follow or hit", a.Shared)
	}
	if bad.Status != topics.StatusFailed || bad.ErrorCode != "bad_input" {
		t.Errorf("empty answer: %s %s/%s, want FAILED bad_input", bad.Status, bad.ErrorType, bad.ErrorCode)
	}
}
