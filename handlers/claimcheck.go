package handlers

import (
	"context"
	"strconv"

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
//   - A parked entry is claimed when its flight ended, to answer it, or vanished, to run it.
//     It is also claimed when the flight has had no owner heartbeat for two leases, since
//     its owner's entry is gone too. Otherwise it is kept parked until the next check.
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
	for j, i := range at {
		m := metas[j]
		if m == nil {
			m = map[string]string{} // gone, or unreadable: its acquire decides
		}
		out[i] = verdict(cands[i], m, nowMs)
	}
	return out
}

// verdict applies the claim rule to one candidate whose flight meta is m, empty when gone.
func verdict(c stream.Candidate, m map[string]string, now int64) stream.Verdict {
	status := m["status"]
	if status == "" {
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
