package handlers

import (
	"context"
	"errors"
	"time"

	"github.com/flightdeck-ai/flightdeck/archive"
	"github.com/flightdeck-ai/flightdeck/flight"
	"github.com/flightdeck-ai/flightdeck/stream"
	"github.com/flightdeck-ai/flightdeck/topics"
)

// The durable archive (DESIGN.md section 9): an owner consults it before running the model,
// and records every outcome it settles.

// lookupTimeout bounds the archive lookup an owner makes before running the model: an
// archive that does not answer in time costs the model call it could have saved, never
// more.
func (p *processor) lookupTimeout() time.Duration { return min(p.stage.Lease/4, time.Second) }

// archiveFence is the coordinator's WriteBackFence with an archive (nil without one): the
// largest owner token the archive knows for the key, of its claim (made by an owner that took
// the flight over) and of its archived outcome (flight.ArchiveFence). A Redis data loss takes
// a flight's fence, and a failover can roll a flight back to an owner that was taken over;
// that owner would write its stale result; the claim of the owner that took over refuses it.
func (c *Consumer) archiveFence() func(ctx context.Context, key string) (int64, bool) {
	if c.archive == nil {
		return nil
	}
	return flight.ArchiveFence(c.archive.Fence, func(key string, err error) {
		// While the archive is away every such write goes on unchecked: the writer logged
		// that once; each one is a debug line.
		ev := c.log.Warn()
		if errors.Is(err, archive.ErrUnavailable) {
			ev = c.log.Debug()
		}
		ev.Err(err).Str("requestKey", key).
			Msg("archive fence unknown: an owner that may have been taken over, or whose flight Redis lost, writes unchecked")
	})
}

// claim records in the archive that the task took its flight over from an owner that may
// still be running (flight.NeedsClaim), before the model call, bounded like the lookup. A
// claim that fails is logged and the run goes on.
func (t *taskRun) claim(ctx context.Context, d flight.Decision) {
	if err := flight.ClaimTakeover(ctx, t.p.archive, d, t.p.lookupTimeout()); err != nil {
		t.warn().Err(err).Str("reason", string(d.Reason)).
			Msg("archive claim failed: after a Redis data loss the previous owner could write its result back")
	}
}

// rehydrate answers the flight t owns from the archive when the archive holds the key's
// final outcome (a result within the stage's archiveRetention; a failure or cancellation
// within its failureTTL, as Redis would have kept it): no model call. done reports that it
// did and the task is settled; again and err are then own's results.
func (t *taskRun) rehydrate(ctx context.Context, o flight.Ownership) (done, again bool, err error) {
	p := t.p
	lctx, cancel := context.WithTimeout(ctx, p.lookupTimeout())
	a, ok, lerr := p.archive.Lookup(lctx, t.key)
	cancel()
	if lerr != nil {
		if debugOn(p.log) {
			l := t.logger()
			l.Debug().Err(lerr).Msg("archive lookup failed; running the model")
		}
		return false, false, nil
	}
	if !ok || !a.Answers(p.stage.FailureTTL) {
		return false, false, nil
	}
	// An outcome archived before Redis judged it (a spooled result) may be of a run that was
	// closed meanwhile: it may never be stored.
	if a.Status != flight.StatusCancelled && t.runClosed(ctx, a.Token, "archived outcome") {
		return false, false, nil
	}
	st, err := retryCoordination(ctx, p.stage.Lease, func(ctx context.Context) (flight.Settlement, error) {
		return p.coord.Rehydrate(ctx, o, a)
	})
	switch flight.Judge(err) {
	case flight.VerdictTaken, flight.VerdictCancelled:
		// Done: the task and the parked ones are answered (an archived cancellation, or a
		// cancel meanwhile, answers the owner's own complete with ErrCancelled).
		status := a.Status
		if err != nil {
			status = flight.StatusCancelled
		}
		l := t.logger()
		l.Info().Str("status", string(status)).Int64("archivedToken", a.Token).Msg("answered from the archive; no model call")
		p.archive.Metrics().Rehydrated(t.task.Stage, string(status))
		t.observeSettled(topics.SharedArchive, topics.Status(status), st)
		stream.Acked(t.msg)
		return true, false, nil
	case flight.VerdictExpired:
		stream.Acked(t.msg)
		return true, false, nil
	case flight.VerdictStale, flight.VerdictConflict:
		return true, t.settled(st), nil
	default:
		return true, false, err
	}
}

// record archives an outcome of the flight o owned. f is the failure of a FAILED one.
func (t *taskRun) record(status flight.Status, o flight.Ownership, result []byte, f *flight.Failure) {
	p := t.p
	if p.archive == nil {
		return
	}
	o.Key, o.Stage, o.Tenant = t.key, t.task.Stage, t.task.Tenant
	var fail flight.Failure
	if f != nil {
		fail = *f
	}
	p.archive.Record(o.Archived(status, result, fail, p.stage.ArchiveRetention))
}

// recordDecision archives the outcome an acquire answered the task with when it ended the
// flight for good there (flight.Decision.Final): the token fence makes a repeated record a
// no-op.
func (t *taskRun) recordDecision(d flight.Decision) {
	p := t.p
	if p.archive == nil {
		return
	}
	if a, ok := d.Final(t.key, t.task.Stage, t.task.Tenant, p.stage.ArchiveRetention); ok {
		p.archive.Record(a)
	}
}
