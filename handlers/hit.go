package handlers

import (
	"context"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"

	"github.com/flightdeck-ai/flightdeck/executor"
	"github.com/flightdeck-ai/flightdeck/flight"
	"github.com/flightdeck-ai/flightdeck/stream"
)

// Late duplicates, described in DESIGN.md section 5: a task whose key's flight a leader of
// this processor completed a moment ago is answered from that outcome by flight's Hit, one
// short call that checks the record first, instead of a full acquire.

// keepFinished keeps the outcome the task's run completed (e.Value, what it stored, and
// e.Usage), when the task leads its key, to answer the key's late duplicates.
func (t *taskRun) keepFinished(e flight.End) {
	if t.lead == nil || t.owned.Owner == nil {
		return
	}
	o := *t.owned.Owner
	o.Usage = e.Usage
	if fin := t.p.coord.Finished(o, e.Value); fin != nil {
		t.p.joins.finish(t.key, t.lead, fin)
	}
}

// hit answers the task from fin (flight.Coordinator.Hit). settled reports that it did. rode
// reports that the call failed and may have answered it anyway, so that the task checks its
// entry before it acquires. When the flight no longer holds fin's outcome, fin is dropped and
// the task acquires as usual.
func (t *taskRun) hit(ctx context.Context, fin *flight.Finished) (settled, rode bool) {
	p := t.p
	hctx, sp := t.startHit(ctx)
	d, err := executor.Guard(p.breaker, func() (flight.Decision, error) {
		d, ok, err := p.coord.Hit(hctx, fin, t.flightTask(), t.runTime)
		if !ok {
			return flight.Decision{}, err
		}
		return d, err
	})
	endHit(sp, d, err)
	if err != nil {
		if debugOn(p.log) {
			l := t.logger()
			l.Debug().Err(err).Msg("answering a late duplicate failed; acquiring")
		}
		return false, true
	}
	if d.Action == "" {
		p.joins.forget(t.key, fin)
		return false, false
	}
	if d.Shared == "" {
		l := t.logger()
		l.Warn().Msg("the task's entry was answered while this consumer held it; not answering it again")
		stream.Acked(t.msg)
		return true, false
	}
	t.linkOwner(d.OwnerTrace, linkAnsweredBy)
	t.token.Store(d.Token)
	t.observe(d)
	t.recordDecision(d)
	if debugOn(p.log) {
		l := t.logger()
		l.Debug().Msg("answered from the outcome this consumer completed")
	}
	stream.Acked(t.msg)
	return true, false
}

// startHit starts the span of a hit call, as startAcquire does the acquire's; nil when the
// task's span does not record.
func (t *taskRun) startHit(ctx context.Context) (context.Context, trace.Span) {
	if !t.recording() {
		return ctx, nil
	}
	return t.p.tracer.Start(ctx, "flight hit", trace.WithSpanKind(trace.SpanKindClient),
		trace.WithAttributes(attribute.String("db.system.name", "redis"), attribute.String("db.operation.name", "FCALL hit")))
}

// endHit ends a hit call's span with what it did: a hit, or a miss (no action).
func endHit(sp trace.Span, d flight.Decision, err error) {
	if sp == nil {
		return
	}
	if !spanFailed(sp, err) {
		sp.SetAttributes(attribute.Bool("flightdeck.hit", d.Action != ""), attribute.Int64("flightdeck.token", d.Token))
	}
	sp.End()
}
