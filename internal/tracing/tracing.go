// Package tracing holds what Flightdeck's packages share for OpenTelemetry traces: a task's W3C
// trace context, and span ids chosen before their span starts. It uses the OpenTelemetry API
// only; internal/otelsetup builds the SDK.
package tracing

import (
	"context"
	"encoding/binary"
	"math/rand/v2"
	"sync/atomic"

	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
)

// Inject returns the W3C traceparent and tracestate of the span in ctx, or "" when ctx carries
// no valid span context.
func Inject(ctx context.Context) (traceparent, tracestate string) {
	if !trace.SpanContextFromContext(ctx).IsValid() {
		return "", ""
	}
	c := propagation.MapCarrier{}
	propagation.TraceContext{}.Inject(ctx, c)
	return c["traceparent"], c["tracestate"]
}

// Extract returns ctx carrying the remote span context traceparent and tracestate describe,
// or ctx as it is when traceparent is not a valid one.
func Extract(ctx context.Context, traceparent, tracestate string) context.Context {
	if traceparent == "" {
		return ctx
	}
	return propagation.TraceContext{}.Extract(ctx, propagation.MapCarrier{"traceparent": traceparent, "tracestate": tracestate})
}

// Parse returns the span context a traceparent describes; ok is false when it is not valid.
func Parse(traceparent string) (sc trace.SpanContext, ok bool) {
	sc = trace.SpanContextFromContext(Extract(context.Background(), traceparent, ""))
	return sc, sc.IsValid()
}

// Traceparent formats sc as a W3C traceparent, or returns "" when sc is not valid.
func Traceparent(sc trace.SpanContext) string {
	if !sc.IsValid() {
		return ""
	}
	tp, _ := Inject(trace.ContextWithSpanContext(context.Background(), sc))
	return tp
}

// NewSpanID returns a random span id, never the invalid zero one.
func NewSpanID() trace.SpanID {
	var id trace.SpanID
	for !id.IsValid() {
		binary.BigEndian.PutUint64(id[:], rand.Uint64())
	}
	return id
}

// presetKey is the context key of a span id chosen ahead.
type presetKey struct{}

// preset is a span id chosen ahead, for the first span that asks.
type preset struct {
	id   trace.SpanID
	used atomic.Bool
}

// WithSpanID returns ctx under which the next span started, with a TracerProvider whose id
// generator is IDGenerator, gets span id id. Later spans under ctx get ids of their own.
func WithSpanID(ctx context.Context, id trace.SpanID) context.Context {
	return context.WithValue(ctx, presetKey{}, &preset{id: id})
}

// IDGenerator makes random trace and span ids, as the SDK's default does, except that it gives
// a span started under WithSpanID the id chosen there. It implements the SDK's IDGenerator.
type IDGenerator struct{}

// NewIDs returns a new trace id and span id.
func (IDGenerator) NewIDs(ctx context.Context) (trace.TraceID, trace.SpanID) {
	var tid trace.TraceID
	for !tid.IsValid() {
		binary.BigEndian.PutUint64(tid[:8], rand.Uint64())
		binary.BigEndian.PutUint64(tid[8:], rand.Uint64())
	}
	return tid, spanID(ctx)
}

// NewSpanID returns a new span id of a span in trace tid.
func (IDGenerator) NewSpanID(ctx context.Context, _ trace.TraceID) trace.SpanID { return spanID(ctx) }

// spanID is the id chosen ahead under ctx, once, else a random one.
func spanID(ctx context.Context) trace.SpanID {
	if p, ok := ctx.Value(presetKey{}).(*preset); ok && p.used.CompareAndSwap(false, true) {
		return p.id
	}
	return NewSpanID()
}
