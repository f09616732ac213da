package handlers_test

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.opentelemetry.io/otel/codes"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/flightdeck-ai/flightdeck/flight"
	"github.com/flightdeck-ai/flightdeck/handlers"
	"github.com/flightdeck-ai/flightdeck/handlers/model"
	"github.com/flightdeck-ai/flightdeck/topics"
)

const traceStage = "interview-evaluation"

// recorded returns a tracer provider that records every span, with the consumer's id generator.
func recorded() (*sdktrace.TracerProvider, *tracetest.SpanRecorder) {
	rec := tracetest.NewSpanRecorder()
	return sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec), sdktrace.WithIDGenerator(handlers.TraceIDGenerator())), rec
}

// taskLinks returns the links of the ended process spans of task id, as "<kind> <span id>".
func taskLinks(rec *tracetest.SpanRecorder, id string) []string {
	var out []string
	for _, s := range rec.Ended() {
		if !strings.HasPrefix(s.Name(), "process ") {
			continue
		}
		for _, a := range s.Attributes() {
			if a.Key != "flightdeck.task.id" || a.Value.AsString() != id {
				continue
			}
			for _, l := range s.Links() {
				kind := ""
				for _, la := range l.Attributes {
					if la.Key == "flightdeck.link" {
						kind = la.Value.AsString()
					}
				}
				out = append(out, kind+" "+l.SpanContext.SpanID().String())
			}
		}
	}
	return out
}

type panicModel struct{}

func (panicModel) Name() string { return "boom" }
func (panicModel) Call(context.Context, model.Request, model.ProgressFunc) (json.RawMessage, error) {
	panic("model exploded")
}

// TestTracingPanickingModel: a model call that panics ends its span, with an error, and is
// counted in the ledger as the model-call metric counts it.
func TestTracingPanickingModel(t *testing.T) {
	b := setup(t)
	tp, rec := recorded()
	reg := prometheus.NewRegistry()
	stop := b.consumer("c0", func(c *handlers.Config) {
		c.Models = map[string]model.Model{"sim": panicModel{}}
		c.TracerProvider = tp
		c.Registry = reg
	})
	b.enqueue(topics.Task{TaskID: "p1", Stage: traceStage, Input: json.RawMessage(`{"k":1}`)})
	if got := b.eventsFor([]string{traceStage}, []string{"p1"}, 20*time.Second); len(got["p1"]) == 0 {
		t.Fatal("no event")
	}
	stop()
	started, ended, failed := 0, 0, 0
	for _, s := range rec.Started() {
		if strings.HasPrefix(s.Name(), "chat ") {
			started++
		}
	}
	for _, s := range rec.Ended() {
		if strings.HasPrefix(s.Name(), "chat ") {
			ended++
			if s.Status().Code == codes.Error {
				failed++
			}
		}
	}
	if started != 1 || ended != 1 || failed != 1 {
		t.Errorf("chat spans: %d started, %d ended, %d with an error; want 1 each", started, ended, failed)
	}
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var calls, ledger float64
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			switch mf.GetName() {
			case "flightdeck_model_calls_total":
				calls += m.GetCounter().GetValue()
			case "flightdeck_ledger_model_calls_total":
				ledger += m.GetCounter().GetValue()
			}
		}
	}
	if calls != 1 || ledger != 1 {
		t.Errorf("flightdeck_model_calls_total %v, flightdeck_ledger_model_calls_total %v; want 1 and 1", calls, ledger)
	}
}

// failOnceModel: the first call waits for release and fails with a retryable 429; later calls
// succeed.
type failOnceModel struct {
	n       atomic.Int64
	keys    chan string
	release chan struct{}
}

func (m *failOnceModel) Name() string { return "failonce" }
func (m *failOnceModel) Call(_ context.Context, req model.Request, _ model.ProgressFunc) (json.RawMessage, error) {
	if m.n.Add(1) == 1 {
		m.keys <- req.RequestKey
		<-m.release
		return nil, &model.Error{Retryable: true, Type: model.TypeRateLimited, RetryAfter: 200 * time.Millisecond, Err: errors.New("429")}
	}
	return json.RawMessage(`{"ok":true}`), nil
}

// TestTracingParkedAndHitLinks: B parks on A's running call and links to it as parked_on; that
// call fails, and the retry's call answers both. C, a hit on the stored result, links to the
// retry's call as answered_by.
func TestTracingParkedAndHitLinks(t *testing.T) {
	b := setup(t)
	tp, rec := recorded()
	m := &failOnceModel{keys: make(chan string, 1), release: make(chan struct{})}
	stop := b.consumer("c0", func(c *handlers.Config) {
		c.Models = map[string]model.Model{"sim": m}
		c.TracerProvider = tp
	})
	in := json.RawMessage(`{"k":7}`)
	b.enqueue(topics.Task{TaskID: "A", Stage: traceStage, Input: in})
	key := <-m.keys
	// A deadline keeps B from joining A in process: it parks on the flight.
	b.enqueue(topics.Task{TaskID: "B", Stage: traceStage, Input: in, Deadline: time.Now().Add(time.Hour).UTC().Format(time.RFC3339)})
	for deadline := time.Now().Add(10 * time.Second); b.r.Client.HLen(b.ctx, b.ks.Waiters(key)).Val() == 0; time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("B never parked")
		}
	}
	close(m.release)
	got := b.eventsFor([]string{traceStage}, []string{"A", "B"}, 30*time.Second)
	if len(got["A"]) == 0 || len(got["B"]) == 0 || got["B"][0].Status != topics.StatusSucceeded {
		t.Fatalf("events: %v", got)
	}
	b.enqueue(topics.Task{TaskID: "C", Stage: traceStage, Input: in})
	if got := b.eventsFor([]string{traceStage}, []string{"C"}, 30*time.Second); len(got["C"]) == 0 || got["C"][0].Shared != topics.SharedHit {
		t.Fatalf("C: %v", got["C"])
	}
	stop()
	var okCall, failedCall string
	for _, s := range rec.Ended() {
		if strings.HasPrefix(s.Name(), "chat ") {
			if s.Status().Code == codes.Error {
				failedCall = s.SpanContext().SpanID().String()
			} else {
				okCall = s.SpanContext().SpanID().String()
			}
		}
	}
	if okCall == "" || failedCall == "" {
		t.Fatalf("chat spans: failed %q, succeeded %q", failedCall, okCall)
	}
	if l := taskLinks(rec, "B"); len(l) != 1 || l[0] != "parked_on "+failedCall {
		t.Errorf("B's links %v, want parked_on the call running when it parked (%s)", l, failedCall)
	}
	if l := taskLinks(rec, "C"); len(l) != 1 || l[0] != "answered_by "+okCall {
		t.Errorf("C's links %v, want answered_by the call that stored the result (%s)", l, okCall)
	}
}

// blockFirstKeyModel blocks the calls of input {"k":0} until release; others answer at once.
type blockFirstKeyModel struct {
	started chan struct{}
	release chan struct{}
}

func (m *blockFirstKeyModel) Name() string { return "blockfirst" }
func (m *blockFirstKeyModel) Call(_ context.Context, req model.Request, _ model.ProgressFunc) (json.RawMessage, error) {
	if string(req.Input) == `{"k":0}` {
		m.started <- struct{}{}
		<-m.release
	}
	return json.RawMessage(`{"ok":true}`), nil
}

// TestTracingLinksNameStartedSpans: X owns a key but its limiter (one call at once, held by
// Z's call) makes it wait without a call, and B parks on X's flight meanwhile: no task links
// to a span that was never started.
func TestTracingLinksNameStartedSpans(t *testing.T) {
	b := setup(t)
	tp, rec := recorded()
	m := &blockFirstKeyModel{started: make(chan struct{}, 1), release: make(chan struct{})}
	stop := b.consumer("c0", func(c *handlers.Config) {
		c.Models = map[string]model.Model{"sim": m}
		c.TracerProvider = tp
		for j := range c.Stages {
			c.Stages[j].Limiter = "main"
			c.Stages[j].Limit = &flight.Limit{Concurrency: 1}
		}
	})
	b.enqueue(topics.Task{TaskID: "Z", Stage: traceStage, Input: json.RawMessage(`{"k":0}`)})
	<-m.started
	b.enqueue(topics.Task{TaskID: "X", Stage: traceStage, Input: json.RawMessage(`{"k":1}`)})
	key, err := handlers.TaskKey(topics.Task{Stage: traceStage, Tenant: "acme", Input: json.RawMessage(`{"k":1}`)})
	if err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		if fields, _, err := flight.ParseRecord(b.r.Client.Get(b.ctx, b.ks.Flight(key)).Val()); err == nil && fields["free"] == "1" {
			break // X's run waited for the limiter: a free failure
		}
		if time.Now().After(deadline) {
			t.Fatal("X never waited for the limiter")
		}
	}
	b.enqueue(topics.Task{TaskID: "B", Stage: traceStage, Input: json.RawMessage(`{"k":1}`),
		Deadline: time.Now().Add(time.Hour).UTC().Format(time.RFC3339)})
	time.Sleep(300 * time.Millisecond)
	close(m.release)
	got := b.eventsFor([]string{traceStage}, []string{"Z", "X", "B"}, 30*time.Second)
	for _, id := range []string{"Z", "X", "B"} {
		if len(got[id]) == 0 {
			t.Fatalf("no event for %s", id)
		}
	}
	stop()
	ids := map[string]bool{}
	for _, s := range rec.Started() {
		ids[s.SpanContext().SpanID().String()] = true
	}
	for _, id := range []string{"Z", "X", "B"} {
		for _, l := range taskLinks(rec, id) {
			if _, span, _ := strings.Cut(l, " "); !ids[span] {
				t.Errorf("task %s links to span %s (%s), which was never started", id, span, l)
			}
		}
	}
}

// TestTracingUnsampledTaskAnnouncesNothing: a task whose producer's trace is not sampled makes
// no span, and its owner run names no model call to the flight, so that a sampled duplicate
// answered by its result links to no span that was never exported.
func TestTracingUnsampledTaskAnnouncesNothing(t *testing.T) {
	b := setup(t)
	tp, rec := recorded() // the default sampler: parent-based, always on for roots
	m := &traceSeenModel{}
	stop := b.consumer("c0", func(c *handlers.Config) {
		c.TracerProvider = tp
		c.Models = map[string]model.Model{"sim": m}
	})
	defer stop()
	in := json.RawMessage(`{"k":"unsampled"}`)
	b.enqueue(topics.Task{TaskID: "U", Stage: traceStage, Input: in,
		Traceparent: "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-00"})
	if got := b.eventsFor([]string{traceStage}, []string{"U"}, 20*time.Second); len(got["U"]) == 0 || got["U"][0].Status != topics.StatusSucceeded {
		t.Fatalf("U: %v", got["U"])
	}
	key, err := handlers.TaskKey(topics.Task{Stage: traceStage, Tenant: "acme", Input: in})
	if err != nil {
		t.Fatal(err)
	}
	fields, _, err := flight.ParseRecord(b.r.Client.Get(b.ctx, b.ks.Flight(key)).Val())
	if err != nil {
		t.Fatal(err)
	}
	if fields["trace"] != "" {
		t.Errorf("the unsampled owner announced model call %q to its flight", fields["trace"])
	}
	// The model's own instrumentation continues the task's trace, unsampled.
	if sc, _ := m.seen.Load().(trace.SpanContext); sc.TraceID().String() != "0af7651916cd43dd8448eb211c80319c" || sc.IsSampled() {
		t.Errorf("the model call ran under trace %s (sampled %v), want the task's unsampled trace", sc.TraceID(), sc.IsSampled())
	}
	b.enqueue(topics.Task{TaskID: "S", Stage: traceStage, Input: in})
	if got := b.eventsFor([]string{traceStage}, []string{"S"}, 20*time.Second); len(got["S"]) == 0 || got["S"][0].Shared != topics.SharedHit {
		t.Fatalf("S: %v", got["S"])
	}
	stop()
	if l := taskLinks(rec, "S"); len(l) != 0 {
		t.Errorf("S links %v to the unsampled owner's call", l)
	}
	process := 0
	for _, s := range rec.Started() {
		if s.SpanContext().TraceID().String() == "0af7651916cd43dd8448eb211c80319c" {
			t.Errorf("span %q recorded in the unsampled trace", s.Name())
		}
		if strings.HasPrefix(s.Name(), "process ") {
			process++
		}
	}
	if process != 1 {
		t.Errorf("%d process spans recorded, want S's alone", process)
	}
}

// traceSeenModel answers every call and keeps the span context of the last one.
type traceSeenModel struct{ seen atomic.Value }

func (m *traceSeenModel) Name() string { return "traceseen" }
func (m *traceSeenModel) Call(ctx context.Context, _ model.Request, _ model.ProgressFunc) (json.RawMessage, error) {
	m.seen.Store(trace.SpanContextFromContext(ctx))
	return json.RawMessage(`{"ok":true}`), nil
}
