package handlers

import (
	"context"

	"github.com/flightdeck-ai/flightdeck/executor"
	"github.com/flightdeck-ai/flightdeck/flight"
	"github.com/flightdeck-ai/flightdeck/stream"
)

// Late duplicates, described in DESIGN.md section 5: a task whose key's flight a leader of
// this processor completed a moment ago is answered from that outcome by flight's Hit, one
// short call that checks the record first, instead of a full acquire.

// keepFinished keeps the outcome the task's run completed, when the task leads its key, to
// answer the key's late duplicates. result is what the run stored.
func (t *taskRun) keepFinished(e flight.End) {
	if t.lead == nil || t.owned.Owner == nil {
		return
	}
	o := *t.owned.Owner
	o.Usage = e.Usage
	t.p.joins.finish(t.key, t.lead, t.p.coord.Finished(o, e.Value))
}

// hit answers the task from fin (flight.Coordinator.Hit). settled reports that it did. rode
// reports that the call failed and may have answered it anyway, so that the task checks its
// entry before it acquires. When the flight no longer holds fin's outcome, fin is dropped and
// the task acquires as usual.
func (t *taskRun) hit(ctx context.Context, fin *flight.Finished) (settled, rode bool) {
	p := t.p
	d, err := executor.Guard(p.breaker, func() (flight.Decision, error) {
		d, ok, err := p.coord.Hit(ctx, fin, t.flightTask(), t.runTime)
		if !ok {
			return flight.Decision{}, err
		}
		return d, err
	})
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
