package chaos

import (
	"bytes"
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/flightdeck-ai/flightdeck/internal/faults"
	"github.com/flightdeck-ai/flightdeck/topics"
)

// The rules Check verifies.
const (
	// RuleEvent: every task the producer surely enqueued got a terminal event, under its key.
	// The event is CANCELLED only when its key was cancelled. A task without an event is
	// excused when Redis lost its data in a redis-data-loss fault: its stream entry went with Redis.
	RuleEvent = 1
	// RuleOneResult: all SUCCEEDED events of one key within the result TTL and between two
	// Redis data losses carry the same result and token. Rule 7 holds archived results
	// across a loss.
	RuleOneResult = 2
	// RuleNoStale: no result from a stale token was accepted. A key's accepted result carries
	// the greatest token that ran in its flight, and the last one answered since the last
	// Redis data loss is the stored flight's token. An archive answer's token runs nothing.
	RuleNoStale = 3
	// RuleRuns: model runs per key <= 1 + takeovers of a lapsed lease, that is runs with
	// reason takeover or expired. Retry and result_lost runs are allowed extra runs. So are
	// handover runs after the previous owner handed the flight over, since they spend no
	// attempt. A fresh flight, reason new, is allowed only after the previous one ended
	// without a result or its result TTL passed, or after its records vanished. Records
	// vanish when deleted, when they expire runningTTL + failureTTL after the last
	// acquisition, or when lost with Redis's data. No run may start while a paused owner's
	// lease is still live. Pause-under-lease faults test this.
	RuleRuns = 4
	// RulePending: nothing stays pending at the end: no pending or undelivered stream entry,
	// no running flight, no parked task. Entries of parked followers count as pending.
	RulePending = 5
	// RuleAnsweredRun: no model run for a task that is already answered. A run of task T may
	// not start more than answeredSlack after T's first terminal event, unless T was enqueued
	// more than once or unsurely. T means that task id, not another task of its key.
	RuleAnsweredRun = 6
	// RuleArchive: a key whose SUCCEEDED outcome the archive held when Redis lost its data
	// never runs the model after the loss, and every task of it answered after the loss gets
	// that outcome's result. A run whose owner's archive lookup failed is the designed
	// fallback: it is counted apart, not as a breach.
	RuleArchive = 7
)

// RuleNames names the rules in reports.
var RuleNames = map[int]string{
	RuleEvent:       "every task got a terminal event (CANCELLED only if cancelled)",
	RuleOneResult:   "one result and token per key",
	RuleNoStale:     "no stale-token result accepted",
	RuleRuns:        "model runs <= 1 + takeovers of a lapsed lease",
	RulePending:     "nothing pending at the end",
	RuleAnsweredRun: "no model run for an answered task",
	RuleArchive:     "no model run after a Redis data loss for an archived result",
}

// Violation is one breach of a rule.
type Violation struct {
	Rule   int    `json:"rule"`
	Key    string `json:"key,omitempty"`
	TaskID string `json:"taskId,omitempty"`
	Detail string `json:"detail"`
}

// String is the violation as one report line.
func (v Violation) String() string {
	s := fmt.Sprintf("rule %d (%s)", v.Rule, RuleNames[v.Rule])
	if v.Key != "" {
		s += " key " + v.Key
	}
	if v.TaskID != "" {
		s += " task " + v.TaskID
	}
	return s + ": " + v.Detail
}

// Report is the outcome of Check.
type Report struct {
	Figures    Figures     `json:"figures"`
	Violations []Violation `json:"violations"`
}

// Check verifies the rules RuleEvent to RuleArchive over h. It is a pure function of h.
func Check(h History) Report {
	var r Report
	f := &r.Figures
	add := func(v Violation) { r.Violations = append(r.Violations, v) }
	lv := newLossView(h)

	// Tasks, keys, events.
	sure := map[string]Enqueue{}
	unsure := map[string]bool{}
	keys := map[string]bool{}
	var order []string
	for _, e := range h.Enqueues {
		keys[e.Key] = true
		if e.Unsure {
			f.UnsureEnqueues++
			unsure[e.TaskID] = true
			continue
		}
		if _, ok := sure[e.TaskID]; !ok {
			order = append(order, e.TaskID)
		}
		sure[e.TaskID] = e
	}
	f.Tasks, f.DistinctKeys, f.Events = len(sure), len(keys), len(h.Events)
	byTask := map[string][]topics.Event{}
	for _, ev := range h.Events {
		byTask[ev.TaskID] = append(byTask[ev.TaskID], ev)
	}
	for id, evs := range byTask {
		f.DuplicateEvts += len(evs) - 1
		if _, ok := sure[id]; !ok && !unsure[id] {
			f.StrayEvents += len(evs)
		}
	}

	// Rule 1: every task got a terminal event under its own key.
	dead := map[string][]DeadLetter{}
	for _, d := range h.DeadLetters {
		dead[d.TaskID] = append(dead[d.TaskID], d)
	}
	f.DeadLetters = len(h.DeadLetters)
	cancelled := map[string]bool{}
	for _, c := range h.Cancels {
		if c.ScriptRan() {
			cancelled[c.Key] = true
		}
		if c.Crash && c.Exit == faults.CrashExitCode {
			f.CancellerCrashes++
		}
	}
	f.CancelledKeys = len(cancelled)
	for _, id := range order {
		enq := sure[id]
		evs := byTask[id]
		if len(evs) == 0 && lv.excused[id] {
			continue // its entry went with Redis's data. LostWithRedis counts it.
		}
		if len(evs) == 0 {
			f.LostTasks++
			detail := fmt.Sprintf("no terminal event (enqueued %s on %s)", enq.At.Format(time.TimeOnly), enq.Stage)
			for _, d := range dead[id] {
				detail += fmt.Sprintf("; dead-lettered by %s at %s: %s: %s", d.Consumer, d.At, d.Reason, d.Detail)
			}
			add(Violation{Rule: RuleEvent, Key: enq.Key, TaskID: id, Detail: detail})
			continue
		}
		switch evs[0].Status {
		case topics.StatusSucceeded:
			f.Succeeded++
		case topics.StatusFailed:
			f.Failed++
		case topics.StatusExpired:
			f.Expired++
		case topics.StatusCancelled:
			f.Cancelled++
		}
		for _, ev := range evs[1:] {
			if ev.Status != evs[0].Status || ev.OwnerToken != evs[0].OwnerToken {
				f.ConflictingTasks++
				break
			}
		}
		for _, ev := range evs {
			if ev.RequestKey != enq.Key {
				add(Violation{Rule: RuleEvent, Key: enq.Key, TaskID: id,
					Detail: fmt.Sprintf("event under another key %s", ev.RequestKey)})
			}
			if ev.Status == topics.StatusCancelled && !cancelled[enq.Key] {
				add(Violation{Rule: RuleEvent, Key: enq.Key, TaskID: id, Detail: fmt.Sprintf(
					"CANCELLED event (token %d, by %s: %s), but nobody cancelled the key", ev.OwnerToken, ev.Consumer, ev.Error)})
			}
		}
	}

	// Events per key. succSeg splits a key's SUCCEEDED events by the data losses before them.
	succ := map[string][]topics.Event{}
	succSeg := map[string]map[int][]topics.Event{}
	other := map[string][]topics.Event{}
	for i, ev := range h.Events {
		if ev.Status == topics.StatusSucceeded {
			succ[ev.RequestKey] = append(succ[ev.RequestKey], ev)
			if succSeg[ev.RequestKey] == nil {
				succSeg[ev.RequestKey] = map[int][]topics.Event{}
			}
			seg := lv.segment(i)
			succSeg[ev.RequestKey][seg] = append(succSeg[ev.RequestKey][seg], ev)
		} else {
			other[ev.RequestKey] = append(other[ev.RequestKey], ev)
		}
	}
	byFinish := func(evs []topics.Event) {
		sort.SliceStable(evs, func(i, j int) bool { return evs[i].FinishedAt.Before(evs[j].FinishedAt) })
	}
	for k, evs := range succ {
		byFinish(evs)
		for _, seg := range succSeg[k] {
			byFinish(seg)
		}
	}

	// Rule 2: one result and one token per key within the result TTL, between two losses.
	for _, k := range sortedKeys(succ) {
		for seg := 0; seg <= len(lv.losses); seg++ {
			checkOneResult(k, succSeg[k][seg], h.ResultTTL, add)
		}
	}

	// Runs per key, in token order, split into flight generations.
	runsByKey := map[string][]ModelRun{}
	for _, run := range h.Runs {
		runsByKey[run.Key] = append(runsByKey[run.Key], run)
		f.ModelRuns++
		switch run.Reason {
		case "takeover":
			f.Takeovers++
		case "expired":
			f.ExpiredRuns++
		case "retry":
			f.RetryRuns++
		case "result_lost":
			f.ResultLostRuns++
		case "handover":
			f.HandoverRuns++
		}
	}
	epochs := map[string][]epoch{}
	for k, runs := range runsByKey {
		sort.SliceStable(runs, func(i, j int) bool { return runs[i].Token < runs[j].Token })
		epochs[k] = epochsOf(runs)
		f.Flights += len(epochs[k])
		f.DuplicateRuns += len(runs) - len(epochs[k])
	}

	// An owner that completed with an outcome its process held ran nothing. Its token stands
	// for the run of the token it held, and rule 3 checks that one.
	f.Held = len(h.HeldAnswers)
	heldBy := map[string]map[int64]int64{}
	for _, a := range h.HeldAnswers {
		if heldBy[a.Key] == nil {
			heldBy[a.Key] = map[int64]int64{}
		}
		heldBy[a.Key][a.Token] = a.HeldToken
	}
	accepted := func(k string, token int64, what string) {
		ran := token
		for n := 0; n < 8; n++ { // a held outcome may be held again by a later owner
			held, ok := heldBy[k][ran]
			if !ok || held == ran {
				break
			}
			ran = held
		}
		if ran == token {
			checkAccepted(k, token, what, epochs[k], add)
			return
		}
		what = fmt.Sprintf("%s (token %d completed with the outcome of token %d its process held)", what, token, ran)
		checkRan(k, ran, what, epochs[k], add)
		// The held answer's own token owned its flight like a run's: no larger token may have
		// taken that flight over before its result was accepted.
		if i := epochIndex(epochs[k], token); i >= 0 {
			if last := epochs[k][i].last(); last.Token > token {
				add(Violation{Rule: RuleNoStale, Key: k, Detail: fmt.Sprintf(
					"%s carries token %d, but token %d (reason %s, %s, task %s) had taken the flight over: the stale owner's result was accepted",
					what, token, last.Token, last.Reason, last.Consumer, last.TaskID)})
			}
		}
	}

	// Rule 3: no stale-token result accepted.
	// 3a. Every token of a SUCCEEDED event ran, and is the greatest token of its flight
	// generation. A larger token in the same generation means another owner had taken the
	// flight over before this result was accepted. After a success only result_lost or a
	// fresh flight issue tokens, and they start a new generation.
	for _, k := range sortedKeys(succ) {
		seen := map[int64]bool{}
		for _, ev := range succ[k] {
			if seen[ev.OwnerToken] || lv.archTok[k][ev.OwnerToken] {
				continue // an archive answer's token runs nothing. Rule 7 checks its result.
			}
			seen[ev.OwnerToken] = true
			accepted(k, ev.OwnerToken, fmt.Sprintf("SUCCEEDED event of task %s (%s, by %s)", ev.TaskID, ev.Shared, ev.Consumer))
		}
	}
	// 3b. The same for every result Redis accepted, as the consumers' logs show, and one
	// accepted result per flight generation.
	compByKey := map[string][]Completion{}
	for _, c := range h.Completions {
		compByKey[c.Key] = append(compByKey[c.Key], c)
		f.Completions++
		if c.Restored {
			f.Restored++
		}
	}
	for _, k := range sortedKeys(compByKey) {
		eps := epochs[k]
		perEpoch := map[int]Completion{}
		for _, c := range compByKey[k] {
			what := fmt.Sprintf("result of task %s accepted from %s", c.TaskID, c.Consumer)
			if c.Restored {
				what += " (restored)"
			}
			accepted(k, c.Token, what)
			i := epochIndex(eps, c.Token)
			if i < 0 {
				continue
			}
			if prev, ok := perEpoch[i]; ok && prev.Token != c.Token {
				add(Violation{Rule: RuleNoStale, Key: k, TaskID: c.TaskID, Detail: fmt.Sprintf(
					"two results accepted in one flight: token %d from %s and token %d from %s",
					prev.Token, prev.Consumer, c.Token, c.Consumer)})
			}
			perEpoch[i] = c
		}
	}
	// 3c. The stored flight holds the last SUCCEEDED token while the result TTL lasts. Only
	// what was answered since the last data loss can be stored.
	for _, k := range sortedKeys(succ) {
		evs := succSeg[k][len(lv.losses)]
		if len(evs) == 0 {
			continue // every result of the key went with Redis's data
		}
		last := evs[len(evs)-1]
		fl, ok := h.Flights[k]
		if !ok {
			continue // not read. The runner reads every enqueued key.
		}
		switch {
		case !fl.Found:
			if h.ResultTTL == 0 || h.SnapshotAt.Sub(last.FinishedAt) < h.ResultTTL {
				add(Violation{Rule: RuleNoStale, Key: k, Detail: fmt.Sprintf(
					"no stored flight at the end, within the result TTL of token %d's result", last.OwnerToken)})
			}
		case fl.Status != "SUCCEEDED":
			add(Violation{Rule: RuleNoStale, Key: k, Detail: fmt.Sprintf(
				"stored flight is %s with token %d; the last SUCCEEDED event carries token %d", fl.Status, fl.OwnerToken, last.OwnerToken)})
		case fl.OwnerToken != last.OwnerToken:
			add(Violation{Rule: RuleNoStale, Key: k, Detail: fmt.Sprintf(
				"stored flight has token %d; the last SUCCEEDED event (task %s) carries token %d", fl.OwnerToken, last.TaskID, last.OwnerToken)})
		case !fl.ResultStored:
			add(Violation{Rule: RuleNoStale, Key: k, Detail: fmt.Sprintf(
				"stored flight SUCCEEDED with token %d but its result key is gone", fl.OwnerToken)})
		}
	}

	// Rule 4: runs per key <= 1 + takeovers of a lapsed lease, plus allowed extra runs.
	ix := newRunIndex(h)
	ix.losses = lv
	for _, k := range sortedKeys(runsByKey) {
		fresh := checkRuns(k, runsByKey[k], epochs[k], succ[k], other[k], h, ix, add)
		f.FreshAfterEnd += fresh.afterEnd
		f.FreshVanished += fresh.vanished
		f.FreshAfterLoss += fresh.lost
	}

	// Rule 5: nothing pending at the end.
	for _, b := range h.Backlog {
		if b.Pending > 0 {
			f.Pending += b.Pending
			f.Parked += b.Parked
			add(Violation{Rule: RulePending, Detail: fmt.Sprintf("stage %s: %d entries pending in the group (%d parked under %s; by holder: %s)",
				b.Stage, b.Pending, b.Parked, topics.ParkingConsumer, describeHolders(b.Holders))})
		}
		if b.Lag > 0 {
			f.Pending += b.Lag
			add(Violation{Rule: RulePending, Detail: fmt.Sprintf("stage %s: %d entries never delivered", b.Stage, b.Lag)})
		}
	}
	for _, k := range sortedKeys(h.Flights) {
		fl := h.Flights[k]
		if !fl.Found {
			continue
		}
		if fl.Status == "PENDING" || fl.Status == "RUNNING" {
			add(Violation{Rule: RulePending, Key: k, Detail: fmt.Sprintf("flight still %s (token %d)", fl.Status, fl.OwnerToken)})
		}
		if fl.Parked > 0 {
			add(Violation{Rule: RulePending, Key: k, Detail: fmt.Sprintf("%d tasks still parked on the %s flight", fl.Parked, fl.Status)})
		}
	}

	// Rule 6: no model run for an answered task.
	ans := checkAnswered(h, add)
	f.RunsAfterAnswer, f.ReRunsMultiEnqueued, f.LateRunLogs = ans.violations, ans.multi, ans.lateLog

	// Rule 7: no model run after a Redis data loss for an archived result.
	lc := checkArchive(h, lv, runsByKey, add)
	f.DataLosses, f.UnansweredAtLoss, f.LostWithRedis, f.Resent = len(lv.losses), lc.unanswered, lc.lost, lc.resent
	f.ArchivedAtLoss, f.AskedAfterLoss = lc.archivedAtLoss, lc.askedAfter
	f.ArchiveAnswers, f.ArchiveKeys, f.ArchiveTasks = lc.answers, lc.answerKeys, lc.answerTasks
	f.ArchivedRunsBefore, f.ArchivedRunsAfter, f.KeysRanAgain, f.LookupFailedRuns = lc.runsBefore, lc.runsAfter,
		lc.keysRanAgain, lc.lookupFailed

	// Faults, logs, exits.
	f.Faults = map[string]int{}
	for _, ft := range h.Faults {
		f.Faults[ft.Kind]++
		f.FaultsTotal++
	}
	f.Refused, f.Aborted, f.Spooled, f.SpoolBack = h.Logs.Refused, h.Logs.Aborted, h.Logs.Spooled, h.Logs.SpoolWritten
	f.MetaBack, f.PickedUp = h.Logs.MetaBack, h.Logs.PickedUp
	f.Crashes, f.InjectedCrashes = len(h.Exits), len(h.InjectedCrashes)
	f.Violations = len(r.Violations)
	f.ViolationsByRule = map[string]int{}
	for _, v := range r.Violations {
		f.ViolationsByRule[fmt.Sprint(v.Rule)]++
	}
	sort.SliceStable(r.Violations, func(i, j int) bool { return r.Violations[i].Rule < r.Violations[j].Rule })
	return r
}

// checkOneResult applies rule 2 to evs, the SUCCEEDED events of key k sorted by finish time.
// It adds one violation per result TTL window with more than one token and result pair,
// naming every variant with its first event.
func checkOneResult(k string, evs []topics.Event, ttl time.Duration, add func(Violation)) {
	type variant struct {
		first topics.Event
		n     int
	}
	for start := 0; start < len(evs); {
		ref := evs[start]
		end := start + 1
		for end < len(evs) && (ttl == 0 || evs[end].FinishedAt.Sub(ref.FinishedAt) <= ttl) {
			end++
		}
		var vs []*variant
		for _, ev := range evs[start:end] {
			var found *variant
			for _, v := range vs {
				if v.first.OwnerToken == ev.OwnerToken && sameResult(v.first, ev) {
					found = v
				}
			}
			if found == nil {
				found = &variant{first: ev}
				vs = append(vs, found)
			}
			found.n++
		}
		if len(vs) > 1 {
			parts := make([]string, len(vs))
			for i, v := range vs {
				parts[i] = fmt.Sprintf("token %d result %s in %d events (first: task %s, %s, by %s at %s)",
					v.first.OwnerToken, clip(v.first.Result), v.n, v.first.TaskID, v.first.Shared, v.first.Consumer,
					v.first.FinishedAt.Format(time.StampMilli))
			}
			add(Violation{Rule: RuleOneResult, Key: k, TaskID: vs[1].first.TaskID, Detail: fmt.Sprintf(
				"%d SUCCEEDED events within the result TTL carry %d different results: %s",
				end-start, len(vs), strings.Join(parts, "; "))})
		}
		start = end
	}
}

// checkAccepted reports an accepted token that never ran, or that a larger token of the
// same flight generation had run before it. In that case the result came from a stale owner.
func checkAccepted(key string, token int64, what string, eps []epoch, add func(Violation)) {
	i := epochIndex(eps, token)
	if i < 0 {
		add(Violation{Rule: RuleNoStale, Key: key, Detail: fmt.Sprintf("%s: token %d never ran the model", what, token)})
		return
	}
	ran := false
	for _, r := range eps[i].runs {
		if r.Token == token {
			ran = true
		}
	}
	if !ran {
		add(Violation{Rule: RuleNoStale, Key: key, Detail: fmt.Sprintf("%s: token %d never ran the model", what, token)})
		return
	}
	if last := eps[i].last(); last.Token > token {
		add(Violation{Rule: RuleNoStale, Key: key, Detail: fmt.Sprintf(
			"%s carries token %d, but token %d (reason %s, %s, task %s) had taken the flight over: the stale owner's result was accepted",
			what, token, last.Token, last.Reason, last.Consumer, last.TaskID)})
	}
}

// checkRan reports a token that never ran the model.
func checkRan(key string, token int64, what string, eps []epoch, add func(Violation)) {
	for _, e := range eps {
		for _, r := range e.runs {
			if r.Token == token {
				return
			}
		}
	}
	add(Violation{Rule: RuleNoStale, Key: key, Detail: fmt.Sprintf("%s: token %d never ran the model", what, token)})
}

// describeHolders lists pending counts by holder, sorted by name.
func describeHolders(m map[string]int64) string {
	if len(m) == 0 {
		return "unknown"
	}
	parts := make([]string, 0, len(m))
	for _, k := range sortedKeys(m) {
		parts = append(parts, fmt.Sprintf("%s %d", k, m[k]))
	}
	return strings.Join(parts, ", ")
}

func sameResult(a, b topics.Event) bool {
	if len(a.Result) == 0 || len(b.Result) == 0 {
		return a.ResultRef == b.ResultRef
	}
	return bytes.Equal(a.Result, b.Result)
}

func clip(b []byte) string {
	if len(b) > 160 {
		return string(b[:160]) + "..."
	}
	return string(b)
}

func sortedKeys[V any](m map[string]V) []string {
	ks := make([]string, 0, len(m))
	for k := range m {
		ks = append(ks, k)
	}
	sort.Strings(ks)
	return ks
}
