package chaos

import (
	"bytes"
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/flightdeck-ai/flightdeck/topics"
)

// Rule 4: how often a key's model may run.

// ownerReasons reports whether r is a known run reason, one of an owner's flight.Reason values.
func ownerReasons(r string) bool {
	switch r {
	case "new", "retry", "takeover", "handover", "expired", "result_lost":
		return true
	}
	return false
}

// vanishSlack is how much earlier than its TTL allows a flight's records may seem to have
// vanished. Log times trail the scripts they report on by a little.
const vanishSlack = 500 * time.Millisecond

// epoch is one flight generation of a key: the runs from a "new" or "result_lost" run up
// to the next one, in token order.
type epoch struct {
	runs []ModelRun // sorted by token. runs[0] starts the epoch.
}

func (e epoch) first() int64   { return e.runs[0].Token }
func (e epoch) last() ModelRun { return e.runs[len(e.runs)-1] }

// lastAt is the latest log time of the epoch's runs.
func (e epoch) lastAt() time.Time {
	var t time.Time
	for _, r := range e.runs {
		if r.At.After(t) {
			t = r.At
		}
	}
	return t
}

// epochsOf splits a key's runs, sorted by token, into flight generations.
func epochsOf(runs []ModelRun) []epoch {
	var eps []epoch
	for i, r := range runs {
		if i == 0 || r.Reason == "new" || r.Reason == "result_lost" {
			eps = append(eps, epoch{})
		}
		eps[len(eps)-1].runs = append(eps[len(eps)-1].runs, r)
	}
	return eps
}

// epochIndex returns the index of the epoch holding token, or -1 when the token is below
// every run.
func epochIndex(eps []epoch, token int64) int {
	i := sort.Search(len(eps), func(i int) bool { return eps[i].first() > token })
	return i - 1
}

// runIndex holds, per key, what rule 4 needs beside the runs and events.
type runIndex struct {
	handedOver map[string]map[int64]bool      // key -> tokens whose owner handed the flight over
	deletes    map[string][]Fault             // key -> delete-flight-keys faults
	pauses     map[string][]Fault             // key -> pause-under-lease faults
	lastFail   map[string]map[int64]time.Time // key -> token -> its latest retryable failure
	free       map[string][]RunFailure        // key -> free failures (limiter waits)
	losses     *lossView                      // Redis data losses, nil for none
}

func newRunIndex(h History) *runIndex {
	ix := &runIndex{handedOver: map[string]map[int64]bool{},
		deletes: map[string][]Fault{}, pauses: map[string][]Fault{},
		lastFail: map[string]map[int64]time.Time{}, free: map[string][]RunFailure{}}
	for _, ho := range h.Handovers {
		if ix.handedOver[ho.Key] == nil {
			ix.handedOver[ho.Key] = map[int64]bool{}
		}
		ix.handedOver[ho.Key][ho.Token] = true
	}
	for _, fl := range h.Failures {
		if fl.Wait > 0 {
			ix.free[fl.Key] = append(ix.free[fl.Key], fl)
			continue
		}
		if ix.lastFail[fl.Key] == nil {
			ix.lastFail[fl.Key] = map[int64]time.Time{}
		}
		if fl.At.After(ix.lastFail[fl.Key][fl.Token]) {
			ix.lastFail[fl.Key][fl.Token] = fl.At
		}
	}
	for _, ft := range h.Faults {
		switch ft.Kind {
		case FaultDeleteKeys:
			ix.deletes[ft.Key] = append(ix.deletes[ft.Key], ft)
		case FaultPauseLease:
			ix.pauses[ft.Key] = append(ix.pauses[ft.Key], ft)
		}
	}
	return ix
}

// handedOverSince reports whether an owner of key k that never ran the model handed the
// flight over before runs[i] and after runs[i-1]. For i == 0 any earlier token counts.
func (ix *runIndex) handedOverSince(k string, runs []ModelRun, i int) bool {
	for tok := range ix.handedOver[k] {
		if tok < runs[i].Token && (i == 0 || tok > runs[i-1].Token) {
			return true
		}
	}
	return false
}

// freshCount counts a key's fresh flights by why they were allowed.
type freshCount struct {
	afterEnd int // the previous generation ended without a result, or its result expired
	vanished int // the previous generation's records were deleted or expired by TTL
	lost     int // the earlier generations' records went with Redis's data
}

// checkRuns applies rule 4 to key k's runs, sorted by token and split into eps. succ and
// other are the key's SUCCEEDED and other events.
func checkRuns(k string, runs []ModelRun, eps []epoch, succ, other []topics.Event, h History, ix *runIndex, add func(Violation)) freshCount {
	var takeovers, extra, handovers int
	for i, run := range runs {
		if !ownerReasons(run.Reason) {
			add(Violation{Rule: RuleRuns, Key: k, TaskID: run.TaskID, Detail: fmt.Sprintf(
				"run with token %d has unknown reason %q", run.Token, run.Reason)})
		}
		if i > 0 && runs[i-1].Token == run.Token {
			add(Violation{Rule: RuleRuns, Key: k, TaskID: run.TaskID, Detail: fmt.Sprintf(
				"token %d ran the model twice (%s task %s, %s task %s)", run.Token,
				runs[i-1].Consumer, runs[i-1].TaskID, run.Consumer, run.TaskID)})
		}
		switch run.Reason {
		case "takeover", "expired":
			takeovers++
		case "retry", "result_lost":
			extra++
		case "handover":
			// Allowed, without spending an attempt, when the previous owner gave the flight
			// up. Its run stopped, or it never ran: a claim no replica acknowledged is handed
			// over before its call. So the handed-over token may be newer than the last run.
			if i > 0 && ix.handedOver[k][runs[i-1].Token] {
				handovers++
				break
			}
			if ix.handedOverSince(k, runs, i) {
				// The owner that gave up never ran. This run stands for its acquisition. It
				// is the first run of the key, or one its reason allowed after runs[i-1].
				if i > 0 {
					handovers++
				}
				break
			}
			prev := "no earlier run"
			if i > 0 {
				prev = fmt.Sprintf("token %d, %s", runs[i-1].Token, runs[i-1].Consumer)
			}
			add(Violation{Rule: RuleRuns, Key: k, TaskID: run.TaskID, Detail: fmt.Sprintf(
				"run with token %d (%s) has reason handover, but the previous owner (%s) never handed the flight over",
				run.Token, run.Consumer, prev)})
		}
	}
	checkPauses(k, runs, ix.pauses[k], add)

	// A fresh flight with reason new after the first is allowed when one of these holds:
	//   - Every earlier generation ended without a result or its result's TTL had passed.
	//     A generation ended without a result when a FAILED, EXPIRED or CANCELLED event
	//     carries one of its tokens.
	//   - The previous generation's records vanished before it started.
	//   - Redis lost its data after every earlier generation had last acted. Whether the
	//     archive then answered is rule 7's business.
	var fresh freshCount
	var why []string
	closed := make([]bool, len(eps)) // generations whose records vanished
	for i := 1; i < len(eps); i++ {
		start := eps[i].runs[0]
		if start.Reason != "new" {
			continue
		}
		ok, byVanish, byLoss := true, false, false
		for j := 0; j < i; j++ {
			w := generationOpen(eps, j, succ, other, start, h.ResultTTL)
			switch {
			case w == "" || (closed[j] && !strings.HasPrefix(w, "succeeded")):
				continue
			case ix.losses != nil && ix.losses.lostBefore(k, eps, j, start) != "":
				byLoss = true
				continue
			case j == i-1 && !strings.HasPrefix(w, "succeeded"):
				if v := ix.vanished(k, eps[j], start, h); v != "" {
					closed[j], byVanish = true, true
					continue
				}
			}
			ok = false
			why = append(why, fmt.Sprintf("fresh flight (token %d, task %s, %s) ran the model again: generation %d %s",
				start.Token, start.TaskID, start.Consumer, j+1, w))
			break
		}
		switch {
		case !ok:
		case byLoss:
			fresh.lost++
		case byVanish:
			fresh.vanished++
		default:
			fresh.afterEnd++
		}
	}
	if allowed := 1 + fresh.afterEnd + fresh.vanished + fresh.lost + takeovers + extra + handovers; len(runs) > allowed || len(why) > 0 {
		add(Violation{Rule: RuleRuns, Key: k, Detail: fmt.Sprintf(
			"%d model runs, allowed 1 + %d takeovers + %d fresh flights after a failure + %d after vanished records + %d after a Redis data loss + %d retry/result_lost runs + %d handover runs (%s)%s",
			len(runs), takeovers, fresh.afterEnd, fresh.vanished, fresh.lost, extra, handovers, describeRuns(runs), prefixJoin("; ", why))})
	}
	return fresh
}

// checkPauses reports every run of the key that started while a paused owner's lease was
// still live. A pause-under-lease fault stopped the owner of token p.Token for less than
// its lease, so up to p.LeaseUntil nobody may run the flight again. Runs with reason
// expired, runningTTL spent, or retry, the owner having failed just before, are not held
// against it.
func checkPauses(k string, runs []ModelRun, pauses []Fault, add func(Violation)) {
	for _, p := range pauses {
		for _, r := range runs {
			if r.Token <= p.Token || r.At.Before(p.At) || !r.At.Before(p.LeaseUntil) || r.Reason == "expired" || r.Reason == "retry" {
				continue
			}
			add(Violation{Rule: RuleRuns, Key: k, TaskID: r.TaskID, Detail: fmt.Sprintf(
				"run with token %d (reason %s, %s) started at %s while the paused owner's lease was live: %s held token %d, paused at %s for %s, its lease lapsing at %s at the earliest",
				r.Token, r.Reason, r.Consumer, r.At.Format(time.StampMilli), p.Target, p.Token,
				p.At.Format(time.StampMilli), p.For, p.LeaseUntil.Format(time.StampMilli))})
		}
	}
}

// vanished explains why generation prev of key k could have lost its record and waiters
// records before start ran, or returns "". Either a delete-flight-keys fault removed them,
// or they expired. They expire runningTTL + failureTTL after the generation's last
// acquisition, failureTTL after a retryable failure of its last token, or failureTTL plus
// the wait after a free failure of a later token that never ran.
func (ix *runIndex) vanished(k string, prev epoch, start ModelRun, h History) string {
	for _, d := range ix.deletes[k] {
		// The deleted flight is this generation and the deletion came first. So one
		// deletion allows one fresh flight.
		if d.Token < prev.first() || d.Token >= start.Token || start.At.Before(d.At) {
			continue
		}
		return fmt.Sprintf("records deleted at %s (token %d)", d.At.Format(time.StampMilli), d.Token)
	}
	if h.RunningTTL <= 0 || h.FailureTTL <= 0 {
		return ""
	}
	last := prev.lastAt()
	gone := last.Add(h.RunningTTL + h.FailureTTL)
	if f, ok := ix.lastFail[k][prev.last().Token]; ok && !f.Before(last) {
		gone = f.Add(h.FailureTTL) // a retryable FAILED lives failureTTL. No retry acquired it.
	}
	// An owner that acquired after the last run and that a limiter made wait recorded a free
	// failure instead of running: its record lived failureTTL plus the wait from then.
	if f, ok := ix.lastFree(k, prev.last().Token, start.Token); ok && f.At.After(last) {
		gone = f.At.Add(h.FailureTTL + f.Wait)
	}
	if start.At.Before(gone.Add(-vanishSlack)) {
		return ""
	}
	return fmt.Sprintf("records expired by %s", gone.Format(time.StampMilli))
}

// lastFree returns the latest free failure of key k by a token after the run token after and
// before the token before.
func (ix *runIndex) lastFree(k string, after, before int64) (RunFailure, bool) {
	var last RunFailure
	found := false
	for _, f := range ix.free[k] {
		if f.Token > after && f.Token < before && (!found || f.At.After(last.At)) {
			last, found = f, true
		}
	}
	return last, found
}

// generationOpen explains why flight generation j of a key had not ended when start ran,
// or returns "". start is a fresh flight of a later generation. An explanation that starts
// with "succeeded" means the generation's result was still live.
func generationOpen(eps []epoch, j int, succ, other []topics.Event, start ModelRun, ttl time.Duration) string {
	lo := eps[j].first()
	hi := int64(1<<63 - 1)
	if j+1 < len(eps) {
		hi = eps[j+1].first()
	}
	in := func(t int64) bool { return t >= lo && t < hi }
	for _, ev := range succ {
		if in(ev.OwnerToken) {
			// Log times have second precision: allow one second.
			if ttl == 0 || start.At.Add(time.Second).Sub(ev.FinishedAt) < ttl {
				return fmt.Sprintf("succeeded with token %d at %s, within the result TTL (tokens from %d)",
					ev.OwnerToken, ev.FinishedAt.Format(time.StampMilli), lo)
			}
			return ""
		}
	}
	for _, ev := range other {
		if in(ev.OwnerToken) {
			return ""
		}
	}
	return fmt.Sprintf("(tokens %d..%d, last run by %s at %s) never ended with an event, and its records had not vanished",
		lo, eps[j].last().Token, eps[j].last().Consumer, eps[j].lastAt().Format(time.StampMilli))
}

func describeRuns(runs []ModelRun) string {
	var b bytes.Buffer
	for i, r := range runs {
		if i > 0 {
			b.WriteString(", ")
		}
		if i == 8 {
			fmt.Fprintf(&b, "... (%d more)", len(runs)-i)
			break
		}
		fmt.Fprintf(&b, "%d/%s/%s", r.Token, r.Reason, r.Consumer)
	}
	return b.String()
}

func prefixJoin(sep string, parts []string) string {
	out := ""
	for _, p := range parts {
		out += sep + p
	}
	return out
}
