package handlers

import (
	"context"
	"strconv"
	"sync"
	"time"

	"github.com/flightdeck-ai/flightdeck/flight"
	"github.com/flightdeck-ai/flightdeck/stream"
	"github.com/flightdeck-ai/flightdeck/topics"
)

// claimCheck is the claim rule for the stream subscriber, described in DESIGN.md section 5.
// It judges another consumer's idle entry by the flight of its task.
//
//   - An entry of a live holder is never idle for a lease, because the holder touches every
//     entry it holds. An idle entry is claimed, unless it is the entry of a flight's owner
//     whose pinned lease has not lapsed. Then the owner still runs it. That happens when the
//     owner is paused for less than its lease, or its touches fail while its heartbeats
//     succeed.
//   - A parked entry is claimed when its flight ended, to answer it. It is also claimed when
//     the flight has had no owner heartbeat for two leases, since its owner's entry is gone
//     too. Otherwise it is kept parked until the next check.
//   - A parked entry whose flight vanished is claimed, to run it, only once this consumer has
//     found the flight gone for longer than the stage's lease: a live owner writes its flight
//     back at its next heartbeat (see goneFlights). Until then it is skipped, not kept, so it
//     stays idle, the claim loops list it again, and the first whose count is due claims it.
//   - Entries whose task cannot be read are claimed, and the handler dead-letters them.
func (p *processor) claimCheck(ctx context.Context, cands []stream.Candidate) []stream.Verdict {
	out := make([]stream.Verdict, len(cands))
	keys := make([]string, len(cands))
	for i, c := range cands {
		out[i] = stream.Claim
		if c.Values == nil {
			continue
		}
		msg, err := unmarshaller{}.Unmarshal(c.Values)
		if err != nil || msg.Metadata.Get(metaBadEntry) != "" {
			continue
		}
		task, err := topics.DecodeTask(msg.Payload, p.limits)
		if err != nil {
			continue
		}
		if keys[i], err = TaskKey(task); err != nil {
			keys[i] = ""
		}
	}
	var records []string
	var at []int
	for i, k := range keys {
		if k != "" {
			records = append(records, p.ks.Flight(k))
			at = append(at, i)
		}
	}
	now, err := p.rdb.Time(ctx).Result()
	localNow := time.Now() // now, by this process's clock
	var metas []map[string]string
	if err == nil {
		metas, err = flight.RecordHeaders(ctx, p.rdb, records)
	}
	if err != nil {
		// Not claiming is always safe. The next pass looks again.
		for i := range out {
			out[i] = stream.Skip
		}
		return out
	}
	nowMs := now.UnixMilli()
	lease := p.stage.Lease.Milliseconds()
	p.gone.prune(nowMs - goneForget.Milliseconds())
	for j, i := range at {
		m := metas[j]
		if m == nil {
			m = map[string]string{} // gone, or unreadable: its acquire decides
		}
		var goneFor int64
		if c := cands[i]; c.Parked {
			// When the entry was last touched: Redis's time at the listing, less its idle time.
			listedAt := nowMs
			if !c.Listed.IsZero() {
				listedAt -= localNow.Sub(c.Listed).Milliseconds()
			}
			goneFor = p.gone.seen(c.Stream+" "+c.ID, m["status"] == "", listedAt-c.Idle.Milliseconds(), nowMs)
		}
		out[i] = verdict(cands[i], m, nowMs, goneFor, lease)
	}
	return out
}

// verdict applies the claim rule to one candidate whose flight meta is m, empty when gone.
// goneFor is how long this consumer has found a parked candidate's flight gone, and
// stageLease the stage's lease, both in ms.
func verdict(c stream.Candidate, m map[string]string, now, goneFor, stageLease int64) stream.Verdict {
	status := m["status"]
	if status == "" {
		if c.Parked && goneFor <= stageLease {
			// Its owner, if alive, writes the flight back meanwhile. Untouched, the entry is
			// looked at again at every consumer's next pass.
			return stream.Skip
		}
		return stream.Claim // the flight vanished: whoever gets the task acquires anew
	}
	n := func(k string) int64 { v, _ := strconv.ParseInt(m[k], 10, 64); return v }
	pol := flight.PinnedPolicy(m["policy"])
	lease := pol.Lease.Milliseconds()
	if lease <= 0 {
		lease = 5000
	}
	active := status == "PENDING" || status == "RUNNING"
	lapsed := m["handover"] == "1" || now-n("heartbeatAt") > lease
	if !c.Parked {
		if active && m["entry"] == c.ID+" "+c.Stream && !lapsed {
			return stream.Skip // the live owner's own entry
		}
		return stream.Claim
	}
	switch {
	case active:
		if m["handover"] == "1" || now-n("heartbeatAt") > 2*lease {
			return stream.Claim
		}
		return stream.Keep
	case status == "FAILED" && flight.StillRetries(m):
		// A retry is due, and its owner's entry brings it. Check only when that stalls.
		if now-n("updatedAt") > 2*lease {
			return stream.Claim
		}
		return stream.Keep
	}
	return stream.Claim // ended: the acquire answers it
}

// goneFlights remembers, per parked entry, when this consumer's claim check first and last
// found the entry's flight gone. A flight's record can vanish while its owner runs (lost
// writes, an eviction); the owner writes it back at its next heartbeat, and a parked task
// claimed before then would become a second owner. So a parked entry of a vanished flight is
// claimed only once the flight has been gone, by this consumer's checks, for longer than a
// lease. A check that keeps the entry touches it, so an entry touched since this consumer's
// last check was found alive meanwhile by another consumer, and its count starts over. Safe
// for concurrent use.
type goneFlights struct {
	mu sync.Mutex
	at map[string]goneSpan // entry ref -> the checks that found its flight gone
}

// goneForget is how long an entry's count is kept after the last check that found its flight
// gone. Checks of an entry that waits come at every pass of the claim loops, unless tens of
// thousands wait at once and the loops' cursors take that long to come back to it.
const goneForget = time.Hour

// goneSpan is the Redis time in ms of the first and the last check that found a flight gone,
// and when the entry was last touched as the check that started the count saw it.
type goneSpan struct{ first, last, touched int64 }

// seen records the check at now of ref's flight, gone or not, and returns how long (ms) the
// flight has been found gone: 0 when it is not gone or was found gone first now. touched is
// when the entry was last touched, as its listing's idle time says (off by the clocks' and the
// round trips' error). A touch after the last check's listing moves it on by more than the
// entry's idle time at that check, while those errors move it by little; so a move by more
// than half the time since the touch the count started from starts the count over. An entry
// left untouched grows idle with every check, so the bar rises.
func (g *goneFlights) seen(ref string, gone bool, touched, now int64) int64 {
	g.mu.Lock()
	defer g.mu.Unlock()
	if !gone {
		delete(g.at, ref)
		return 0
	}
	sp, ok := g.at[ref]
	if !ok || touched-sp.touched > (sp.last-sp.touched)/2 {
		if g.at == nil {
			g.at = map[string]goneSpan{}
		}
		g.at[ref] = goneSpan{first: now, last: now, touched: touched}
		return 0
	}
	sp.last = now
	g.at[ref] = sp
	return now - sp.first
}

// prune forgets the entries last found gone before before: they were claimed or acknowledged
// meanwhile.
func (g *goneFlights) prune(before int64) {
	g.mu.Lock()
	defer g.mu.Unlock()
	for ref, sp := range g.at {
		if sp.last < before {
			delete(g.at, ref)
		}
	}
}
