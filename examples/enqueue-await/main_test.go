package main

import (
	"bytes"
	"context"
	"errors"
	"regexp"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/flightdeck-ai/flightdeck/client"
	"github.com/flightdeck-ai/flightdeck/handlers"
	"github.com/flightdeck-ai/flightdeck/handlers/model"
	"github.com/flightdeck-ai/flightdeck/internal/testkit/redistest"
	"github.com/flightdeck-ai/flightdeck/topics"
)

// TestEnqueueAwait runs the example against a consumer of the built-in stage (the sim
// model) on a private Redis: every task is answered, the three identical answers share one
// key and one result, and the model ran once per distinct answer.
func TestEnqueueAwait(t *testing.T) {
	r := redistest.New(t)
	ks := topics.Keyspace{Prefix: r.Prefix}
	// Before any consumer registered the stage: refused at once, naming it.
	var none bytes.Buffer
	if err := run(context.Background(), r.Client, ks, &none); !errors.Is(err, client.ErrUnknownStage) ||
		!strings.Contains(err.Error(), "interview-evaluation") {
		t.Errorf("with no consumer: %v, want an unknown-stage error", err)
	}
	var runs atomic.Int64
	stages, err := handlers.LoadStages("", []string{"interview-evaluation"})
	if err != nil {
		t.Fatal(err)
	}
	log := zerolog.New(zerolog.NewTestWriter(t)).Level(zerolog.ErrorLevel)
	c, err := handlers.NewConsumer(handlers.Config{RedisURL: r.URL, Keyspace: ks, Stages: stages, Logger: &log,
		Models: map[string]model.Model{"sim": &model.Sim{OnRun: func(model.Request) { runs.Add(1) }}}, SpoolDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	ctx, stop := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- c.Run(ctx) }()
	defer func() { stop(); <-done }()
	<-c.Started() // the stage is registered

	var out bytes.Buffer
	rctx, cancel := context.WithTimeout(context.Background(), 40*time.Second)
	defer cancel()
	if err := run(rctx, r.Client, ks, &out); err != nil {
		t.Fatalf("run: %v\n%s", err, out.String())
	}
	text := out.String()
	t.Log(text)
	keys := regexp.MustCompile(`(?m)^enqueued \S+ key (\S+)$`).FindAllStringSubmatch(text, -1)
	if len(keys) != 5 || keys[0][1] != keys[2][1] || keys[0][1] != keys[4][1] || keys[0][1] == keys[1][1] {
		t.Errorf("request keys %v: want 5, the 1st, 3rd and 5th equal", keys)
	}
	results := regexp.MustCompile(`(?m)^\S+ SUCCEEDED shared=(\w+) result=(.*)$`).FindAllStringSubmatch(text, -1)
	if len(results) != 5 {
		t.Fatalf("%d SUCCEEDED lines, want 5", len(results))
	}
	distinct := map[string]bool{}
	for _, m := range results {
		distinct[m[2]] = true
	}
	if len(distinct) != 3 || runs.Load() != 3 {
		t.Errorf("%d distinct results and %d model runs, want 3 and 3", len(distinct), runs.Load())
	}
	if !strings.Contains(text, "first: SUCCEEDED") {
		t.Errorf("no Await line")
	}
}
