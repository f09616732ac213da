package tracing_test

import (
	"context"
	"testing"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/flightdeck-ai/flightdeck/internal/tracing"
)

// TestPresetSpanID: the first span started under WithSpanID gets the chosen id, later spans
// under the same context and spans elsewhere get random ones, in the caller's trace.
func TestPresetSpanID(t *testing.T) {
	exp := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp), sdktrace.WithIDGenerator(tracing.IDGenerator{}))
	tr := tp.Tracer("test")
	ctx, root := tr.Start(context.Background(), "root")
	id := tracing.NewSpanID()
	pre := tracing.WithSpanID(ctx, id)
	_, first := tr.Start(pre, "first")
	_, second := tr.Start(pre, "second")
	_, other := tr.Start(ctx, "other")
	first.End()
	second.End()
	other.End()
	root.End()
	if got := first.SpanContext().SpanID(); got != id {
		t.Errorf("first span id %s, want the preset %s", got, id)
	}
	if second.SpanContext().SpanID() == id || other.SpanContext().SpanID() == id || !second.SpanContext().SpanID().IsValid() {
		t.Errorf("the preset id was used twice or lost: %s %s", second.SpanContext().SpanID(), other.SpanContext().SpanID())
	}
	if first.SpanContext().TraceID() != root.SpanContext().TraceID() {
		t.Errorf("preset span left its trace")
	}
}

// TestTraceparentRoundTrip: Traceparent, Parse, Inject and Extract agree, and a malformed
// traceparent is no context at all.
func TestTraceparentRoundTrip(t *testing.T) {
	const tp = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
	sc, ok := tracing.Parse(tp)
	if !ok || tracing.Traceparent(sc) != tp {
		t.Fatalf("Parse/Traceparent: %v %q", ok, tracing.Traceparent(sc))
	}
	got, state := tracing.Inject(tracing.Extract(context.Background(), tp, "a=1,b=2"))
	if got != tp || state != "a=1,b=2" {
		t.Errorf("Extract/Inject: %q %q", got, state)
	}
	for _, bad := range []string{"", "00-0af7651916cd43dd8448eb211c80319c-0000000000000000-01", "zz", "00-xyz"} {
		if _, ok := tracing.Parse(bad); ok {
			t.Errorf("Parse(%q) is a context", bad)
		}
		if p, _ := tracing.Inject(tracing.Extract(context.Background(), bad, "")); p != "" {
			t.Errorf("Extract(%q) carried %q", bad, p)
		}
	}
}
