package main_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/flightdeck-ai/flightdeck/client"
	"github.com/flightdeck-ai/flightdeck/topics"
)

// bigOpenAI is an OpenAI-compatible endpoint whose every answer is about size bytes long.
func bigOpenAI(t *testing.T, size int, calls *atomic.Int64) *httptest.Server {
	content := strings.Repeat("x", size)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		calls.Add(1)
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprintf(w, `{"model":"fake-1","choices":[{"message":{"role":"assistant","content":%q},"finish_reason":"stop"}]}`, content)
	}))
	t.Cleanup(srv.Close)
	return srv
}

// TestSmallDuplicatesDoNotAmplify: one task with a 40 KB result, then 5,000 small tasks of
// the same key. Each duplicate's event (a hit, or a follower of the run) carries the result
// only as resultRef, so the result stream grows by well under 20 MiB instead of a copy of the
// result per task (about 200 MB); every task still gets the whole result through the client,
// and the model runs once.
func TestSmallDuplicatesDoNotAmplify(t *testing.T) {
	e := newE2E(t)
	e.stages = "interview-evaluation"
	var calls atomic.Int64
	ai := bigOpenAI(t, 40<<10, &calls)
	cfg := e.stageConfig(`stages:
  interview-evaluation:
    model: openai
    concurrency: 8
`)
	e.startWith("c1", []string{"REDIS_URL=" + e.url, "OPENAI_BASE_URL=" + ai.URL, "OPENAI_API_KEY=sk-test",
		"OPENAI_MODEL=fake-1"}, true, "--config", cfg)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cl, err := client.New(client.Config{Client: e.rdb, Keyspace: e.ks})
	if err != nil {
		t.Fatal(err)
	}
	in := json.RawMessage(`{"question":"q","answer":"a"}`)
	first, err := cl.Enqueue(ctx, topics.Task{TaskID: "big", Stage: "interview-evaluation", Tenant: "acme", Input: in})
	if err != nil {
		t.Fatal(err)
	}
	ev, err := cl.Await(ctx, first)
	if err != nil || ev.Status != topics.StatusSucceeded || len(ev.Result) < 40<<10 {
		t.Fatalf("the first task: %v, %d result bytes, %v", ev.Status, len(ev.Result), err)
	}
	want := string(ev.Result)
	stream := e.ks.Results("interview-evaluation")
	before := e.rdb.MemoryUsage(ctx, stream, 0).Val()

	const n = 5000
	tasks := make([]topics.Task, n)
	for i := range tasks {
		tasks[i] = topics.Task{TaskID: fmt.Sprintf("dup-%d", i), Stage: "interview-evaluation", Tenant: "acme", Input: in}
	}
	receipts, err := cl.EnqueueBatch(ctx, tasks)
	if err != nil {
		t.Fatal(err)
	}
	var got, whole int
	if err := cl.Collect(ctx, receipts, func(ev topics.Event) {
		got++
		if ev.Status == topics.StatusSucceeded && string(ev.Result) == want {
			whole++
		}
	}); err != nil {
		t.Fatal(err)
	}
	after := e.rdb.MemoryUsage(ctx, stream, 0).Val()
	if got != n || whole != n {
		t.Fatalf("%d events, %d with the whole result; want %d of each", got, whole, n)
	}
	if grew := after - before; grew > 20<<20 {
		t.Fatalf("the result stream grew by %d MiB for %d small duplicates, want under 20 MiB", grew>>20, n)
	} else {
		t.Logf("the result stream grew by %.1f MiB for %d duplicates (%d bytes an event)", float64(grew)/(1<<20), n, grew/n)
	}
	if c := calls.Load(); c != 1 {
		t.Errorf("the model ran %d times, want 1", c)
	}
}
