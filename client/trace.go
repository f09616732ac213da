package client

import (
	"context"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/flightdeck-ai/flightdeck/internal/tracing"
)

// startSend starts the producer span of an enqueue of n tasks to stage ("" for several stages),
// when the client traces, and returns ctx with it and the function that ends it with the
// enqueue's error.
func (c *Client) startSend(ctx context.Context, stage string, n int) (context.Context, func(error)) {
	if c.tracer == nil {
		return ctx, func(error) {}
	}
	name, attrs := "send", []attribute.KeyValue{attribute.String("messaging.system", "redis"),
		attribute.String("messaging.operation.type", "send"), attribute.Int("messaging.batch.message_count", n)}
	if stage != "" {
		name += " " + stage
		attrs = append(attrs, attribute.String("messaging.destination.name", c.ks.Tasks(stage)))
	}
	ctx, sp := c.tracer.Start(ctx, name, trace.WithSpanKind(trace.SpanKindProducer), trace.WithAttributes(attrs...))
	return ctx, func(err error) {
		if err != nil {
			sp.RecordError(err)
			sp.SetStatus(codes.Error, err.Error())
		}
		sp.End()
	}
}

// traced returns t carrying the trace context of the span in ctx, unless it carries one already.
func traced(ctx context.Context, t Task) Task {
	if t.Traceparent == "" {
		t.Traceparent, t.Tracestate = tracing.Inject(ctx)
	}
	return t
}
