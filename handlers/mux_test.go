package handlers_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/flightdeck-ai/flightdeck/client"
	"github.com/flightdeck-ai/flightdeck/executor"
	"github.com/flightdeck-ai/flightdeck/handlers"
	"github.com/flightdeck-ai/flightdeck/handlers/model"
	"github.com/flightdeck-ai/flightdeck/internal/testkit/redistest"
	"github.com/flightdeck-ai/flightdeck/topics"
)

// runMux runs a consumer configured only with a Redis URL and a Mux, as a user's own
// consumer would be, until the test ends.
func runMux(t *testing.T, r *redistest.Target, mux *handlers.Mux, logs *safeLog, stages ...handlers.StageConfig) {
	t.Helper()
	log := zerolog.New(logs).Level(zerolog.WarnLevel)
	c, err := handlers.NewConsumer(handlers.Config{RedisURL: r.URL, Keyspace: topics.Keyspace{Prefix: r.Prefix},
		Stages: stages, Handlers: mux, Logger: &log, SpoolDir: t.TempDir(), Grace: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	ctx, stop := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- c.Run(ctx) }()
	t.Cleanup(func() {
		stop()
		if err := <-done; err != nil {
			t.Errorf("consumer: %v", err)
		}
	})
	select {
	case <-c.Started():
	case err := <-done:
		t.Fatalf("consumer: %v", err)
	case <-time.After(10 * time.Second):
		t.Fatal("consumer did not start")
	}
}

// await enqueues tasks and returns their events by task id.
func await(t *testing.T, cl *client.Client, tasks ...topics.Task) map[string]topics.Event {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	rs, err := cl.EnqueueBatch(ctx, tasks)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]topics.Event{}
	if err := cl.Collect(ctx, rs, func(ev topics.Event) { out[ev.TaskID] = ev }); err != nil {
		t.Fatalf("collect: %v (got %d of %d)", err, len(out), len(rs))
	}
	return out
}

// TestMuxRunsHandlerFuncs: a consumer made of a Mux alone consumes the stages registered in it
// (a custom stage and a built-in one), runs each key once with the function's result shared by
// its duplicates, and answers a Permanent error with a final FAILED event after one call.
func TestMuxRunsHandlerFuncs(t *testing.T) {
	r := redistest.New(t)
	var scoreCalls, failCalls atomic.Int64
	mux := handlers.NewMux()
	mux.HandleFunc("resume-score", func(ctx context.Context, task model.Request, progress model.ProgressFunc) (json.RawMessage, error) {
		scoreCalls.Add(1)
		progress()
		var in struct {
			Text string `json:"text"`
		}
		if err := json.Unmarshal(task.Input, &in); err != nil {
			return nil, model.Permanent("bad_input", err)
		}
		return json.Marshal(map[string]any{"words": len(strings.Fields(in.Text)), "tenant": task.Tenant})
	})
	mux.HandleFunc("interview-followup", func(ctx context.Context, task model.Request, _ model.ProgressFunc) (json.RawMessage, error) {
		failCalls.Add(1)
		return nil, model.Permanent("", errors.New("never works"))
	})
	logs := testLog(t)
	runMux(t, r, mux, logs)
	cl, err := client.New(client.Config{Client: r.Client, Keyspace: topics.Keyspace{Prefix: r.Prefix}})
	if err != nil {
		t.Fatal(err)
	}

	task := func(id, stage, input string) topics.Task {
		return topics.Task{TaskID: id, Stage: stage, Tenant: "acme", Input: json.RawMessage(input)}
	}
	evs := await(t, cl,
		task("a1", "resume-score", `{"text":"one two three"}`),
		task("a2", "resume-score", `{"text":"one two three"}`),
		task("a3", "resume-score", `{"text":"one two three"}`),
		task("b1", "resume-score", `{"text":"four"}`),
		task("c1", "resume-score", `"not an object"`),
		task("f1", "interview-followup", `{"q":1}`))
	for _, id := range []string{"a1", "a2", "a3"} {
		if ev := evs[id]; ev.Status != topics.StatusSucceeded || string(ev.Result) != `{"tenant":"acme","words":3}` {
			t.Errorf("%s: %s %s %s, want SUCCEEDED with the handler's result", id, ev.Status, ev.Result, ev.Error)
		}
	}
	if ev := evs["b1"]; string(ev.Result) != `{"tenant":"acme","words":1}` {
		t.Errorf("b1: result %s", ev.Result)
	}
	if ev := evs["c1"]; ev.Status != topics.StatusFailed || ev.ErrorCode != "bad_input" {
		t.Errorf("c1: %s %s/%s, want FAILED bad_input", ev.Status, ev.ErrorType, ev.ErrorCode)
	}
	if ev := evs["f1"]; ev.Status != topics.StatusFailed || ev.ErrorCode != "permanent" || ev.Attempts != 1 {
		t.Errorf("f1: %s %s attempts %d, want FAILED permanent after 1 attempt", ev.Status, ev.ErrorCode, ev.Attempts)
	}
	if n := scoreCalls.Load(); n != 3 {
		t.Errorf("resume-score handler ran %d times, want 3 (one per key)", n)
	}
	if n := failCalls.Load(); n != 1 {
		t.Errorf("follow-up handler ran %d times, want 1 (a permanent failure is not retried)", n)
	}
	if strings.Contains(logs.String(), "simulated model") {
		t.Errorf("a consumer with handlers for every stage warned about the simulated model:\n%s", logs.String())
	}
}

// TestMuxRetryLater: a handler's RetryLater error is retried by the next attempt no sooner
// than its delay, and the second attempt's result answers the task.
func TestMuxRetryLater(t *testing.T) {
	r := redistest.New(t)
	var calls atomic.Int64
	var first atomic.Int64
	mux := handlers.NewMux()
	mux.HandleFunc("flaky", func(ctx context.Context, task model.Request, _ model.ProgressFunc) (json.RawMessage, error) {
		if calls.Add(1) == 1 {
			first.Store(time.Now().UnixNano())
			return nil, model.RetryLater(1500*time.Millisecond, errors.New("provider busy"))
		}
		return json.RawMessage(fmt.Sprintf(`{"attempt":%d,"waitedMs":%d}`, task.Attempt,
			time.Since(time.Unix(0, first.Load())).Milliseconds())), nil
	})
	runMux(t, r, mux, testLog(t))
	cl, err := client.New(client.Config{Client: r.Client, Keyspace: topics.Keyspace{Prefix: r.Prefix}})
	if err != nil {
		t.Fatal(err)
	}
	ev := await(t, cl, topics.Task{TaskID: "x", Stage: "flaky", Tenant: "acme", Input: json.RawMessage(`1`)})["x"]
	var out struct{ Attempt, WaitedMs int }
	if err := json.Unmarshal(ev.Result, &out); ev.Status != topics.StatusSucceeded || err != nil {
		t.Fatalf("event %s %s %s", ev.Status, ev.Result, ev.Error)
	}
	if out.Attempt != 2 || out.WaitedMs < 1500 {
		t.Errorf("result %+v: want attempt 2 after at least 1500 ms", out)
	}
}

// TestMuxRefusesMistakes: registering a stage twice, a bad stage name or a nil function
// panics at registration; a consumer with neither stages nor handlers is refused.
func TestMuxRefusesMistakes(t *testing.T) {
	fn := func(context.Context, model.Request, model.ProgressFunc) (json.RawMessage, error) { return nil, nil }
	for name, reg := range map[string]func(*handlers.Mux){
		"twice":    func(m *handlers.Mux) { m.HandleFunc("a", fn); m.HandleFunc("a", fn) },
		"bad name": func(m *handlers.Mux) { m.HandleFunc("Bad:Name", fn) },
		"nil func": func(m *handlers.Mux) { m.HandleFunc("a", nil) },
		"nil model": func(m *handlers.Mux) {
			m.Handle("a", nil)
		},
	} {
		func() {
			defer func() {
				if recover() == nil {
					t.Errorf("%s: no panic", name)
				}
			}()
			reg(handlers.NewMux())
		}()
	}
	_, err := handlers.NewConsumer(handlers.Config{RedisURL: "redis://127.0.0.1:1/0", Handlers: handlers.NewMux(),
		SpoolDir: t.TempDir()})
	if err == nil || !strings.Contains(err.Error(), "no stages") {
		t.Errorf("NewConsumer without stages: %v, want an error naming no stages", err)
	}
	_, err = handlers.NewConsumer(handlers.Config{RedisURL: "http://x", SpoolDir: t.TempDir()})
	if err == nil || !strings.Contains(err.Error(), "RedisURL") {
		t.Errorf("NewConsumer with a bad RedisURL: %v", err)
	}
}

// TestSimWarning: a stage left on the simulated model is named in a warning at start.
func TestSimWarning(t *testing.T) {
	r := redistest.New(t)
	logs := testLog(t)
	log := zerolog.New(logs).Level(zerolog.WarnLevel)
	mux := handlers.NewMux()
	mux.HandleFunc("real", func(context.Context, model.Request, model.ProgressFunc) (json.RawMessage, error) {
		return json.RawMessage(`1`), nil
	})
	stages, err := handlers.LoadStages("", []string{"interview-evaluation"})
	if err != nil {
		t.Fatal(err)
	}
	c, err := handlers.NewConsumer(handlers.Config{RedisURL: r.URL, Keyspace: topics.Keyspace{Prefix: r.Prefix},
		Stages: stages, Handlers: mux, Logger: &log, SpoolDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_ = c.Run(ctx) // releases the clients and the spool
	out := logs.String()
	if !strings.Contains(out, `"stage":"interview-evaluation"`) || !strings.Contains(out, "simulated model") {
		t.Errorf("no simulated-model warning for interview-evaluation:\n%s", out)
	}
	if strings.Contains(out, `"stage":"real"`) {
		t.Errorf("a warning names the handler stage:\n%s", out)
	}
}

// TestMuxHandlerPanics: a handler that panics fails its task at once, final, with the panic
// in the event, in every mode; it is not called again and the consumer keeps running.
func TestMuxHandlerPanics(t *testing.T) {
	for _, mode := range []executor.Mode{executor.ModeHybrid, executor.ModeBypass, executor.ModeLocalOnly} {
		t.Run(string(mode), func(t *testing.T) { testMuxHandlerPanics(t, mode) })
	}
}

func testMuxHandlerPanics(t *testing.T, mode executor.Mode) {
	r := redistest.New(t)
	var calls atomic.Int64
	mux := handlers.NewMux()
	mux.HandleFunc("boom", func(ctx context.Context, task model.Request, _ model.ProgressFunc) (json.RawMessage, error) {
		calls.Add(1)
		var in string
		_ = json.Unmarshal(task.Input, &in)
		if in == "panic" {
			panic("boom in handler")
		}
		return json.RawMessage(`"fine"`), nil
	})
	runMux(t, r, mux, testLog(t), handlers.StageConfig{Name: "boom", Mode: mode}.WithDefaults())
	cl, err := client.New(client.Config{Client: r.Client, Keyspace: topics.Keyspace{Prefix: r.Prefix}})
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	evs := await(t, cl, topics.Task{TaskID: "p", Stage: "boom", Tenant: "acme", Input: json.RawMessage(`"panic"`)},
		topics.Task{TaskID: "ok", Stage: "boom", Tenant: "acme", Input: json.RawMessage(`"calm"`)})
	if ev := evs["p"]; ev.Status != topics.StatusFailed || ev.ErrorType != model.TypePanic || !strings.Contains(ev.Error, "boom in handler") ||
		ev.Attempts != map[executor.Mode]int{executor.ModeHybrid: 1}[mode] {
		t.Errorf("panicking task: %s %s/%s %q attempts %d", ev.Status, ev.ErrorType, ev.ErrorCode, ev.Error, ev.Attempts)
	}
	if ev := evs["ok"]; ev.Status != topics.StatusSucceeded {
		t.Errorf("the next task: %+v", ev)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("answered after %v: the panic cost a lease", d)
	}
	if n := calls.Load(); n != 2 {
		t.Errorf("%d calls, want 2 (the panicking one is not retried)", n)
	}
}
