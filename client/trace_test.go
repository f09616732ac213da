package client_test

import (
	"context"
	"strings"
	"testing"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/flightdeck-ai/flightdeck/client"
	"github.com/flightdeck-ai/flightdeck/internal/tracing"
	"github.com/flightdeck-ai/flightdeck/topics"
)

// storedTasks decodes the tasks on stage's stream, in order.
func storedTasks(t *testing.T, b *testBundle, stage string) []topics.Task {
	t.Helper()
	var out []topics.Task
	for _, m := range b.r.Client.XRange(context.Background(), b.ks.Tasks(stage), "-", "+").Val() {
		task, err := topics.DecodeTask([]byte(m.Values[topics.FieldPayload].(string)), topics.Limits{})
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, task)
	}
	return out
}

// TestEnqueueCarriesTraceContext: a tracing client records a producer span per enqueue, a
// child of the caller's span, and the task carries that span's context; a client that does not
// trace passes the caller's own context on; a task that names its context keeps it; a caller
// without a span enqueues a task without one.
func TestEnqueueCarriesTraceContext(t *testing.T) {
	exp := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp))
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	b := setup(t, client.Config{TracerProvider: tp})
	caller, parent := tp.Tracer("test").Start(context.Background(), "request")
	defer parent.End()

	if _, err := b.c.Enqueue(caller, newTask(stageA, `{"q":1}`)); err != nil {
		t.Fatal(err)
	}
	spans := exp.GetSpans()
	if len(spans) != 1 || spans[0].Name != "send "+stageA || spans[0].SpanKind != trace.SpanKindProducer ||
		spans[0].Parent.SpanID() != parent.SpanContext().SpanID() {
		t.Fatalf("spans %+v: want one producer span under the caller's", spans)
	}
	got := storedTasks(t, b, stageA)
	sc, ok := tracing.Parse(got[0].Traceparent)
	if !ok || sc.SpanID() != spans[0].SpanContext.SpanID() || sc.TraceID() != parent.SpanContext().TraceID() || !sc.IsSampled() {
		t.Errorf("task traceparent %q: want the producer span %s", got[0].Traceparent, spans[0].SpanContext.SpanID())
	}

	// Without a tracer the caller's span context goes on the task as it is.
	plain, err := client.New(client.Config{Client: b.r.Client, Keyspace: b.ks})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := plain.Enqueue(caller, newTask(stageB, `{"q":2}`)); err != nil {
		t.Fatal(err)
	}
	own := "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
	named := newTask(stageB, `{"q":3}`)
	named.Traceparent, named.Tracestate = own, "vendor=1"
	if _, err := plain.Enqueue(caller, named); err != nil {
		t.Fatal(err)
	}
	if _, err := plain.Enqueue(context.Background(), newTask(stageB, `{"q":4}`)); err != nil {
		t.Fatal(err)
	}
	got = storedTasks(t, b, stageB)
	if want, _ := tracing.Inject(caller); got[0].Traceparent != want {
		t.Errorf("untraced client: task traceparent %q, want the caller's %q", got[0].Traceparent, want)
	}
	if got[1].Traceparent != own || got[1].Tracestate != "vendor=1" {
		t.Errorf("a task's own context was replaced: %q %q", got[1].Traceparent, got[1].Tracestate)
	}
	if got[2].Traceparent != "" || got[2].Tracestate != "" {
		t.Errorf("a caller without a span enqueued context %q %q", got[2].Traceparent, got[2].Tracestate)
	}
}

// TestEnqueueBatchSpan: a batch to one stage is one producer span named after it; a batch to
// several stages is one span "send" without a destination. Every task carries the span's
// context.
func TestEnqueueBatchSpan(t *testing.T) {
	exp := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp))
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	b := setup(t, client.Config{TracerProvider: tp})
	ctx := context.Background()
	if _, err := b.c.EnqueueBatch(ctx, []topics.Task{newTask(stageA, `{"q":1}`), newTask(stageA, `{"q":2}`)}); err != nil {
		t.Fatal(err)
	}
	if _, err := b.c.EnqueueBatch(ctx, []topics.Task{newTask(stageA, `{"q":3}`), newTask(stageB, `{"q":4}`)}); err != nil {
		t.Fatal(err)
	}
	spans := exp.GetSpans()
	if len(spans) != 2 || spans[0].Name != "send "+stageA || spans[1].Name != "send" {
		t.Fatalf("spans %v", spans)
	}
	for _, a := range spans[1].Attributes {
		if a.Key == "messaging.destination.name" {
			t.Errorf("a batch to two stages names the destination %s", a.Value.AsString())
		}
	}
	for _, task := range append(storedTasks(t, b, stageA), storedTasks(t, b, stageB)...) {
		sc, ok := tracing.Parse(task.Traceparent)
		want := spans[0].SpanContext.SpanID()
		if strings.Contains(string(task.Input), `"q":3`) || strings.Contains(string(task.Input), `"q":4`) {
			want = spans[1].SpanContext.SpanID()
		}
		if !ok || sc.SpanID() != want {
			t.Errorf("task %s: traceparent %q, want span %s", task.Input, task.Traceparent, want)
		}
	}
}
