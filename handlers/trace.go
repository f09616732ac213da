package handlers

import (
	"context"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/flightdeck-ai/flightdeck/flight"
	"github.com/flightdeck-ai/flightdeck/internal/tracing"
)

// Tracing, described in DESIGN.md section 11. With Config.TracerProvider set, every handler
// run of a task is a span in the trace its producer started, with the state machine's calls
// and the model call below it. An owner's acquire names the span id its model call will have,
// and the flight keeps it, so that the spans of its followers and hits, in any process, link
// to the call that answered them.

// instrumentation is the name the consumer's tracer goes by.
const instrumentation = "github.com/flightdeck-ai/flightdeck/handlers"

// TraceIDGenerator returns the span id generator a TracerProvider given as
// Config.TracerProvider needs (sdktrace.WithIDGenerator), so that a model call's span gets the
// id its flight announced to the spans that link to it.
func TraceIDGenerator() tracing.IDGenerator { return tracing.IDGenerator{} }

// startTask starts the span of the task's handler run, in the trace of its producer when the
// task carries one. It returns ctx with the span, or ctx as it is when the stage does not trace.
func (t *taskRun) startTask(ctx context.Context) context.Context {
	tr := t.p.tracer
	if tr == nil {
		return ctx
	}
	ctx = tracing.Extract(ctx, t.task.Traceparent, t.task.Tracestate)
	ctx, t.span = tr.Start(ctx, "process "+t.task.Stage, trace.WithSpanKind(trace.SpanKindConsumer),
		trace.WithAttributes(attribute.String("messaging.system", "redis"),
			attribute.String("messaging.operation.type", "process"),
			attribute.String("messaging.destination.name", t.ent.stream),
			attribute.String("messaging.message.id", t.ent.id),
			attribute.String("flightdeck.task.id", t.task.TaskID),
			attribute.String("flightdeck.stage", t.task.Stage),
			attribute.String("flightdeck.tenant", t.task.Tenant),
			attribute.String("flightdeck.request_key", t.key)))
	return ctx
}

// endTask ends the task's span, if any.
func (t *taskRun) endTask(err error) {
	if t.span == nil {
		return
	}
	if err != nil {
		t.span.RecordError(err)
		t.span.SetStatus(codes.Error, err.Error())
	}
	t.span.End()
}

// traceOutcome records how the task was settled on its span: "<shared>_<status>" or parked.
func (t *taskRun) traceOutcome(outcome string) {
	if t.span != nil {
		t.span.SetAttributes(attribute.String("flightdeck.outcome", outcome))
	}
}

// recording reports whether the task's span records: the stage traces and the sampler kept
// the task's trace. A task whose trace is not sampled makes no further span, names no model
// call to its flight and links to none, so that sampling also saves the work around spans.
func (t *taskRun) recording() bool { return t.span != nil && t.span.IsRecording() }

// startAcquire names the span id the task's model call will have should the acquire make it
// the owner, as the traceparent the acquire sends (AcquireParams.Trace), and starts the
// acquire's span. When the task's span does not record it returns ctx, nil and "".
func (t *taskRun) startAcquire(ctx context.Context) (context.Context, trace.Span, string) {
	if !t.recording() {
		return ctx, nil, ""
	}
	sc := t.span.SpanContext()
	call := ""
	if sc.IsSampled() { // a span recorded but not sampled is never exported: announce no link target
		t.callSpan = tracing.NewSpanID()
		call = tracing.Traceparent(trace.NewSpanContext(trace.SpanContextConfig{TraceID: sc.TraceID(), SpanID: t.callSpan,
			TraceFlags: sc.TraceFlags(), TraceState: sc.TraceState()}))
	}
	ctx, sp := t.p.tracer.Start(ctx, "flight acquire", trace.WithSpanKind(trace.SpanKindClient),
		trace.WithAttributes(attribute.String("db.system.name", "redis"), attribute.String("db.operation.name", "FCALL acquire")))
	return ctx, sp, call
}

// spanFailed records err on the span of a Redis call, when there is one, and reports whether
// there was.
func spanFailed(sp trace.Span, err error) bool {
	if err == nil {
		return false
	}
	sp.RecordError(err)
	sp.SetStatus(codes.Error, err.Error())
	return true
}

// endAcquire ends the acquire's span with its decision. A task that follows or was answered
// links to the model call of the flight's owner.
func (t *taskRun) endAcquire(sp trace.Span, d flight.Decision, err error) {
	if sp == nil {
		return
	}
	if !spanFailed(sp, err) {
		sp.SetAttributes(attribute.String("flightdeck.action", string(d.Action)), attribute.String("flightdeck.reason", string(d.Reason)),
			attribute.Int64("flightdeck.token", d.Token), attribute.Int("flightdeck.attempt", d.Attempts))
		switch d.Action {
		case flight.ActionOwner:
			t.ownTrace = d.Owner.Trace
		case flight.ActionFollowerWait:
			t.linkOwner(d.OwnerTrace, linkParkedOn)
		default:
			t.linkOwner(d.OwnerTrace, linkAnsweredBy)
		}
	}
	sp.End()
}

// The kinds of a task's link to an owner's model call (attribute flightdeck.link).
const (
	// linkAnsweredBy: the call whose outcome answered the task (a hit, a joined task, a final
	// outcome read by the acquire).
	linkAnsweredBy = "answered_by"
	// linkParkedOn: the call running when the task parked on its flight. It answers the task
	// unless it fails and a later attempt's call does.
	linkParkedOn = "parked_on"
)

// linkOwner links the task's span to the model-call span a traceparent names, as kind.
func (t *taskRun) linkOwner(traceparent, kind string) {
	if !t.recording() || traceparent == "" {
		return
	}
	if sc, ok := tracing.Parse(traceparent); ok {
		t.span.AddLink(trace.Link{SpanContext: sc, Attributes: []attribute.KeyValue{attribute.String("flightdeck.link", kind)}})
	}
}

// startCall starts the span of the owner's model call with the id its acquire announced, as a
// child of the task's span, with the OpenTelemetry GenAI attributes. When the task's span does
// not record, it returns ctx carrying that span's context, so that the model's own
// instrumentation continues the task's unsampled trace rather than starting one, and nil.
func (t *taskRun) startCall(ctx context.Context, d flight.Decision) (context.Context, trace.Span) {
	if t.span == nil {
		return ctx, nil
	}
	ctx = trace.ContextWithSpan(ctx, t.span)
	if !t.span.IsRecording() {
		return ctx, nil
	}
	if t.callSpan.IsValid() {
		ctx = tracing.WithSpanID(ctx, t.callSpan)
	}
	p := t.p
	return p.tracer.Start(ctx, "chat "+p.modelName, trace.WithSpanKind(trace.SpanKindClient),
		trace.WithAttributes(attribute.String("gen_ai.operation.name", "chat"), attribute.String("gen_ai.system", p.model.Name()),
			attribute.String("gen_ai.request.model", p.modelName), attribute.Int("flightdeck.attempt", d.Attempts),
			attribute.Int64("flightdeck.token", d.Token), attribute.String("flightdeck.reason", string(d.Reason))))
}

// endCall ends the model call's span with the usage the call reported and its error.
func endCall(ctx context.Context, sp trace.Span, err error) {
	if sp == nil {
		return
	}
	if u := flight.ReportedUsage(ctx); u != nil {
		sp.SetAttributes(attribute.Int("gen_ai.usage.input_tokens", u.PromptTokens),
			attribute.Int("gen_ai.usage.output_tokens", u.CompletionTokens))
		if u.Model != "" {
			sp.SetAttributes(attribute.String("gen_ai.response.model", u.Model))
		}
	}
	if err != nil {
		sp.RecordError(err)
		sp.SetStatus(codes.Error, err.Error())
		if rateLimited(err) {
			sp.SetAttributes(attribute.String("error.type", "rate_limited"))
		}
	}
	sp.End()
}

// traceID is the task's trace id for its log lines, or "" without tracing.
func (t *taskRun) traceID() string {
	if t.span == nil {
		return ""
	}
	return t.span.SpanContext().TraceID().String()
}
