package handlers

import (
	"context"
	"errors"
	"time"

	"github.com/flightdeck-ai/flightdeck/archive"
	"github.com/flightdeck-ai/flightdeck/flight"
)

// The durable archive, described in DESIGN.md section 9. An owner consults it before running
// the model, and records every outcome it settles.

// lookupTimeout bounds the archive lookup an owner makes before running the model. An archive
// that does not answer in time costs the model call it could have saved, never more.
func (p *processor) lookupTimeout() time.Duration { return min(p.stage.Lease/4, time.Second) }

// archiveFence is the coordinator's WriteBackFence with an archive, nil without one. It is the
// largest owner token the archive knows for the key, from the claim made by an owner that took
// the flight over and from the archived outcome, as flight.ArchiveFence reads them. A Redis
// data loss takes a flight's fence, and a failover can roll a flight back to an owner that was
// taken over. That owner would write its stale result, and the claim of the owner that took
// over refuses it.
func (c *Consumer) archiveFence() func(ctx context.Context, key string) (int64, bool) {
	if c.archive == nil {
		return nil
	}
	return flight.ArchiveFence(c.archive.Fence, func(key string, err error) {
		// While the archive is away every such write goes on unchecked. The writer logged that
		// once, and each write is a debug line.
		ev := c.log.Warn()
		if errors.Is(err, archive.ErrUnavailable) {
			ev = c.log.Debug()
		}
		ev.Err(err).Str("requestKey", key).
			Msg("archive fence unknown: an owner that may have been taken over, or whose flight Redis lost, writes unchecked")
	})
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
// flight for good there, as flight.Decision.Final reports. The token fence makes a repeated
// record a no-op.
func (t *taskRun) recordDecision(d flight.Decision) {
	p := t.p
	if p.archive == nil {
		return
	}
	if a, ok := d.Final(t.key, t.task.Stage, t.task.Tenant, p.stage.ArchiveRetention); ok {
		p.archive.Record(a)
	}
}
