package chaos

import (
	"context"
	"errors"
	"fmt"
	"syscall"
	"time"

	"github.com/flightdeck-ai/flightdeck/flight"
	"github.com/flightdeck-ai/flightdeck/internal/faults"
)

// Faults that act on consumer processes.

// kill SIGKILLs a random consumer and starts a new incarnation with a new name 0.3-3 s later.
func (in *injector) kill() bool {
	i := in.rng.IntN(len(in.sup.slots))
	name, ok := in.sup.reserve(i)
	if !ok {
		return false
	}
	down := in.between(300*time.Millisecond, 3*time.Second)
	at := time.Now()
	in.sup.kill(i)
	in.record(Fault{Kind: FaultKill, Target: name, At: at, For: down.Round(time.Millisecond).String()})
	in.wg.Add(1)
	go func() {
		defer in.wg.Done()
		defer in.sup.release(i)
		time.Sleep(down)
		if err := in.sup.restart(i); err != nil {
			in.logf("restart consumer slot %d: %v", i+1, err)
		}
	}()
	return true
}

// stop SIGSTOPs a consumer that owns a running flight for the lease plus 0.3-3 s, then
// SIGCONTs it. It wakes up as a zombie whose flights were taken over. When no consumer owns
// a running flight, it stops a random one.
func (in *injector) stop(ctx context.Context) bool {
	i, note := -1, "no running flight found: a random consumer"
	if r, ok := in.findFlight(ctx, 3*time.Second, false, ownedBySlot); ok {
		i, note = r.slot, fmt.Sprintf("owner of %s token %d", shortKey(r.key), r.meta.OwnerToken)
	}
	if i < 0 {
		i = in.rng.IntN(len(in.sup.slots))
	}
	name, ok := in.sup.reserve(i)
	if !ok {
		return false
	}
	d := in.lease + in.between(300*time.Millisecond, 3*time.Second)
	at := time.Now()
	in.sup.stop(i)
	in.record(Fault{Kind: FaultStop, Target: name, At: at, For: d.Round(time.Millisecond).String(), Note: note})
	in.wg.Add(1)
	go func() {
		defer in.wg.Done()
		defer in.sup.release(i)
		time.Sleep(d)
		in.sup.cont(i)
	}()
	return true
}

// pauseUnderLease SIGSTOPs the owner of a running flight whose heartbeat is fresh for 30-60%
// of its lease, then SIGCONTs it. The lease stays live the whole time, so no other run of the
// flight may start. The checker's rule 4 holds any run of the key started before LeaseUntil
// against it.
func (in *injector) pauseUnderLease(ctx context.Context) bool {
	fresh := 2 * in.heartbeat
	r, ok := in.findFlight(ctx, 3*time.Second, true, func(r running) bool {
		return r.slot >= 0 && time.Since(r.meta.HeartbeatAt) < fresh
	})
	if !ok {
		return false
	}
	name, ok := in.sup.reserve(r.slot)
	if !ok {
		return false
	}
	defer in.sup.release(r.slot)
	if name != r.meta.OwnerID {
		return false // replaced meanwhile
	}
	lease := r.meta.Policy.Lease // the owner's pinned lease
	if lease <= 0 {
		lease = in.lease
	}
	leaseUntil := r.meta.HeartbeatAt.Add(lease)
	d := in.between(lease*3/10, lease*6/10)
	at := time.Now()
	if at.Add(d).After(leaseUntil) {
		return false // the heartbeat read is too old by now. Pick again later.
	}
	in.sup.stop(r.slot)
	time.Sleep(d)
	in.sup.cont(r.slot)
	in.record(Fault{Kind: FaultPauseLease, Target: name, At: at, For: d.Round(time.Millisecond).String(),
		Key: r.key, Token: r.meta.OwnerToken, LeaseUntil: leaseUntil,
		Note: fmt.Sprintf("owner of %s token %d (lease %v, live until +%v)", shortKey(r.key), r.meta.OwnerToken,
			lease, leaseUntil.Sub(at).Round(time.Millisecond))})
	return true
}

// restartSameName SIGKILLs a consumer and restarts it at once under the same name. It picks
// an owner when one is found. The restarted process picks its own pending entries up again
// at start.
func (in *injector) restartSameName(ctx context.Context) bool {
	i, note := in.rng.IntN(len(in.sup.slots)), ""
	if r, ok := in.findFlight(ctx, time.Second, false, ownedBySlot); ok {
		i, note = r.slot, fmt.Sprintf("owner of %s token %d", shortKey(r.key), r.meta.OwnerToken)
	}
	name, ok := in.sup.reserve(i)
	if !ok {
		return false
	}
	defer in.sup.release(i)
	at := time.Now()
	in.sup.kill(i)
	if err := in.sup.restartSame(i, nil); err != nil {
		note += " restart: " + err.Error()
	}
	in.record(Fault{Kind: FaultRestartSame, Target: name, At: at, For: time.Since(at).Round(time.Millisecond).String(), Note: note})
	return true
}

// crashAfterComplete restarts a consumer under its name, for a window of 4-8 s, with knobs
// that make it write answers after the scripts and exit with status 86 after a complete
// script with probability 0.5. The supervisor restarts it without the knobs after the crash.
// When no crash came in the window, it is ended with SIGTERM, which hands running flights
// over, and restarted without them.
func (in *injector) crashAfterComplete() bool {
	i := in.rng.IntN(len(in.sup.slots))
	name, ok := in.sup.reserve(i)
	if !ok {
		return false
	}
	const p = 0.5
	env := []string{"FLIGHTDECK_FAULT_ANSWER_AFTER_SCRIPT=1", fmt.Sprintf("FLIGHTDECK_FAULT_CRASH_AFTER=complete:%g", p)}
	window := in.between(4*time.Second, 8*time.Second)
	at := time.Now()
	in.sup.kill(i)
	if err := in.sup.restartSame(i, env); err != nil {
		in.sup.release(i)
		in.logf("fault %s: restart %s with the crash knobs: %v", FaultCrashComplete, name, err)
		return false
	}
	crashCmd := in.sup.running(i)
	in.wg.Add(1)
	go func() {
		defer in.wg.Done()
		defer in.sup.release(i)
		deadline := at.Add(window)
		crashed := false
		for !crashed && time.Now().Before(deadline) {
			time.Sleep(50 * time.Millisecond)
			crashed = in.sup.running(i) != crashCmd
		}
		note := fmt.Sprintf("knobs answer-after-script, crash after complete p=%g", p)
		if crashed {
			note += fmt.Sprintf("; exited %d after %v, restarted under its name", faults.CrashExitCode,
				time.Since(at).Round(time.Millisecond))
		} else {
			in.sup.end(i, syscall.SIGTERM)
			if err := in.sup.restartSame(i, nil); err != nil {
				note += "; restart: " + err.Error()
			}
			note += "; no crash in the window: SIGTERM, restarted without knobs"
		}
		in.record(Fault{Kind: FaultCrashComplete, Target: name, At: at, For: time.Since(at).Round(time.Millisecond).String(), Note: note})
	}()
	return true
}

// allDown SIGKILLs every consumer for the flights' runningTTL + failureTTL plus 1-2 s, then
// restarts them all under their names. Meanwhile the records and waiters of the flights running
// at the kill expire while their tasks are parked or pending. It first waits up to 10 s for
// the other consumer faults to end.
func (in *injector) allDown(ctx context.Context, end time.Time) bool {
	if in.flightTTL <= 0 {
		return false
	}
	down := in.flightTTL + in.between(time.Second, 2*time.Second)
	if time.Now().Add(down).After(end.Add(5 * time.Second)) {
		return false // it would outlast the run by far
	}
	if !in.sup.reserveAll(10 * time.Second) {
		return false
	}
	defer in.sup.releaseAll()
	before := in.runningFlights(ctx)
	parked := 0
	for _, m := range before {
		parked += len(m.Parked)
	}
	at := time.Now()
	names := in.sup.killAll()
	select {
	case <-ctx.Done():
	case <-time.After(down):
	}
	var kept []string
	for k := range before {
		if _, err := in.coord.Get(ctx, k); !errors.Is(err, flight.ErrNotFound) {
			kept = append(kept, shortKey(k))
		}
	}
	note := fmt.Sprintf("%d consumers down; %d flights running at the kill (%d parked tasks), %d of them with records left at the restart %v",
		len(names), len(before), parked, len(kept), kept)
	if err := in.sup.restartAllSame(); err != nil {
		note += "; restart: " + err.Error()
	}
	in.record(Fault{Kind: FaultAllDown, Target: "all", At: at, For: time.Since(at).Round(time.Millisecond).String(), Note: note})
	return true
}

// runningFlights returns the RUNNING flights among the recent keys.
func (in *injector) runningFlights(ctx context.Context) map[string]flight.Meta {
	cctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	out := map[string]flight.Meta{}
	for _, k := range in.prod.recentKeys(3 * in.prod.keys) {
		if m, err := in.coord.Get(cctx, k); err == nil && m.Status == flight.StatusRunning {
			out[k] = m
		}
	}
	return out
}
