package chaos

import (
	"fmt"
	"sort"
	"time"

	"github.com/flightdeck-ai/flightdeck/topics"
)

// Redis data losses and rule 7. The redis-data-loss fault runs with the archive on.
//
// The rules allow a loss to take three things:
//   - The tasks that had no event when Redis's data went. Their stream entries were only
//     there, and rule 1 excuses them.
//   - Every flight's records. Rule 4 allows a fresh flight of a key whose generation lived
//     only before the loss. Rule 3 asks the stored flight to hold only what was answered
//     after the last loss.
//   - A key's result when the archive did not hold it yet. Rule 2 compares a key's results
//     between two losses only.
//
// Rule 7 forbids a loss to take an outcome the archive held.

// lossView is what the rules know of a history's data losses.
type lossView struct {
	losses []DataLoss
	// excused holds the tasks unanswered at a loss.
	excused map[string]bool
	// evToks holds, per key, the token of each event and its segment: the number of losses
	// before it was written.
	evToks map[string][]tokSeg
	// archTok holds, per key, the tokens of archive answers. An archive answer is an owner
	// that ended its flight with the archived outcome. By design it never ran the model.
	archTok map[string]map[int64]bool
	// lookupFailed holds, per key, the tokens whose owner's archive lookup failed.
	lookupFailed map[string]map[int64]bool
}

type tokSeg struct {
	token int64
	seg   int
}

func newLossView(h History) *lossView {
	v := &lossView{losses: append([]DataLoss(nil), h.DataLosses...), excused: map[string]bool{},
		evToks: map[string][]tokSeg{}, archTok: map[string]map[int64]bool{}, lookupFailed: map[string]map[int64]bool{}}
	sort.SliceStable(v.losses, func(i, j int) bool { return v.losses[i].Events < v.losses[j].Events })
	for _, l := range v.losses {
		for _, id := range l.Unanswered {
			v.excused[id] = true
		}
	}
	mark := func(m map[string]map[int64]bool, k string, tok int64) {
		if m[k] == nil {
			m[k] = map[int64]bool{}
		}
		m[k][tok] = true
	}
	for i, ev := range h.Events {
		v.evToks[ev.RequestKey] = append(v.evToks[ev.RequestKey], tokSeg{ev.OwnerToken, v.segment(i)})
		if ev.Shared == topics.SharedArchive {
			mark(v.archTok, ev.RequestKey, ev.OwnerToken)
		}
	}
	for _, a := range h.ArchiveAnswers {
		mark(v.archTok, a.Key, a.Token)
	}
	for _, f := range h.LookupFailures {
		mark(v.lookupFailed, f.Key, f.Token)
	}
	return v
}

// segment returns how many losses came before event i of History.Events was written.
func (v *lossView) segment(i int) int {
	n := 0
	for _, l := range v.losses {
		if i >= l.Events {
			n++
		}
	}
	return n
}

// lostBefore explains how flight generation j of key k lost its records with Redis before
// the fresh flight start acquired, or returns "". The records count as lost when the last
// loss before start's acquire came after every run of the generation had started, and no
// event of the generation was written after that loss. Such an event would have put the
// records back in Redis.
func (v *lossView) lostBefore(k string, eps []epoch, j int, start ModelRun) string {
	st := runStart(start)
	l := -1
	for i, loss := range v.losses {
		if loss.At.Before(st) {
			l = i
		}
	}
	if l < 0 {
		return ""
	}
	at := v.losses[l].At
	for _, r := range eps[j].runs {
		if !runStart(r).Before(at) {
			return ""
		}
	}
	lo, hi := eps[j].first(), int64(1<<63-1)
	if j+1 < len(eps) {
		hi = eps[j+1].first()
	}
	for _, ts := range v.evToks[k] {
		if ts.token >= lo && ts.token < hi && ts.seg > l {
			return ""
		}
	}
	return fmt.Sprintf("records lost with Redis at %s", at.Format(time.StampMilli))
}

// lossCount holds the figures of the data losses.
type lossCount struct {
	unanswered, lost, resent         int
	archivedAtLoss, askedAfter       int
	answers, answerKeys, answerTasks int
	runsBefore, runsAfter            int
	lookupFailed, keysRanAgain       int
}

// checkArchive applies rule 7 and counts the losses' figures. DataLoss.Archived, read while
// Redis was paused, holds the keys whose SUCCEEDED outcome the archive held at a loss. For
// every loss and every such key:
//   - No model run of the key may start after the loss, unless that owner's archive lookup
//     failed or timed out. A run starts at its acquire as its token dates it, or else at its
//     log line. A failed lookup is logged. It is the designed fallback, counted apart.
//   - Every event of the key written after the loss is SUCCEEDED with the result the tasks
//     answered by the archived token got before the loss. Events of a run allowed above are
//     excepted.
func checkArchive(h History, v *lossView, runsByKey map[string][]ModelRun, add func(Violation)) lossCount {
	c := lossCount{unanswered: len(v.excused)}
	answered := map[string]bool{}
	firstEv := map[string]topics.Event{}
	for _, ev := range h.Events {
		answered[ev.TaskID] = true
		if f, ok := firstEv[ev.TaskID]; !ok || ev.FinishedAt.Before(f.FinishedAt) {
			firstEv[ev.TaskID] = ev
		}
	}
	for id := range v.excused {
		if !answered[id] {
			c.lost++
		}
	}
	for _, e := range h.Enqueues {
		if e.Resends != "" {
			c.resent++
		}
	}
	keys := map[string]bool{}
	for _, ev := range h.Events {
		if ev.Shared == topics.SharedArchive {
			c.answers++
			keys[ev.RequestKey] = true
		}
	}
	c.answerKeys = len(keys)
	for _, ev := range firstEv {
		if v.archTok[ev.RequestKey][ev.OwnerToken] {
			c.answerTasks++
		}
	}

	everArchived := map[string]bool{}
	for _, l := range v.losses {
		for k, r := range l.Archived {
			if r.Status == string(topics.StatusSucceeded) {
				everArchived[k] = true
			}
		}
	}
	// archivedAt returns the first loss before t at which key k's SUCCEEDED outcome was
	// archived, or -1.
	archivedAt := func(k string, t time.Time) int {
		for i, l := range v.losses {
			if r, ok := l.Archived[k]; ok && r.Status == string(topics.StatusSucceeded) && l.At.Before(t) {
				return i
			}
		}
		return -1
	}
	for i, l := range v.losses {
		for _, k := range sortedKeys(l.Archived) {
			if l.Archived[k].Status != string(topics.StatusSucceeded) {
				continue
			}
			c.archivedAtLoss++
			for _, e := range h.Enqueues {
				if e.Key == k && e.At.After(l.At) {
					c.askedAfter++
					break
				}
			}
			checkArchivedResult(h, v, i, k, add)
		}
	}
	for _, k := range sortedKeys(runsByKey) {
		ranAgain := false
		for _, r := range runsByKey[k] {
			li := archivedAt(k, runStart(r))
			if li < 0 {
				if everArchived[k] {
					c.runsBefore++ // a run of a key archived at a later loss
				}
				continue
			}
			c.runsAfter++
			ranAgain = true
			if v.lookupFailed[k][r.Token] {
				c.lookupFailed++
				continue
			}
			l := v.losses[li]
			add(Violation{Rule: RuleArchive, Key: k, TaskID: r.TaskID, Detail: fmt.Sprintf(
				"model run with token %d (reason %s, %s) started at %s, after the Redis data loss at %s, although the archive held the key's SUCCEEDED outcome (token %d) then; the key's runs: %s",
				r.Token, r.Reason, r.Consumer, runStart(r).Format(time.StampMilli), l.At.Format(time.StampMilli),
				l.Archived[k].Token, describeRuns(runsByKey[k]))})
		}
		if ranAgain {
			c.keysRanAgain++
		}
	}
	return c
}

// checkArchivedResult checks the events of key k written after loss i, whose archive held
// the key's SUCCEEDED outcome. Each must be SUCCEEDED with the result that the archived
// token's events carried before the loss. Events of runs allowed after the loss by a failed
// lookup are skipped, and so is a key whose archived token's result was not read.
func checkArchivedResult(h History, v *lossView, i int, k string, add func(Violation)) {
	l := v.losses[i]
	tok := l.Archived[k].Token
	var ref *topics.Event
	for j := 0; j < l.Events && j < len(h.Events); j++ {
		if ev := h.Events[j]; ev.RequestKey == k && ev.OwnerToken == tok && ev.Status == topics.StatusSucceeded {
			ref = &h.Events[j]
			break
		}
	}
	if ref == nil {
		return
	}
	for j := l.Events; j < len(h.Events); j++ {
		ev := h.Events[j]
		if ev.RequestKey != k || v.lookupFailed[k][ev.OwnerToken] {
			continue
		}
		if ev.Status != topics.StatusSucceeded || !sameResult(*ref, ev) {
			add(Violation{Rule: RuleArchive, Key: k, TaskID: ev.TaskID, Detail: fmt.Sprintf(
				"answered %s (%s, token %d, by %s) with result %s after the Redis data loss at %s; the archive held the key's SUCCEEDED outcome (token %d, result %s)",
				ev.Status, ev.Shared, ev.OwnerToken, ev.Consumer, clip(ev.Result), l.At.Format(time.StampMilli), tok, clip(ref.Result))})
		}
	}
}
