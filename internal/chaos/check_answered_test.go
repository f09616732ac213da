package chaos

import (
	"testing"
	"time"

	"github.com/flightdeck-ai/flightdeck/topics"
)

// withAnsweredF adds key F, whose task f1 is answered by the owner that took it over and is
// then run again by the owner it took over from: c1/0 owned f1 (token 700) and was stopped;
// c2/0 claimed f1's entry, took the flight over (701) and failed for good (FAILED event at
// 12.3 s); the FAILED meta expired after failureTTL, and c1/0, woken, acquired a fresh flight
// (702) at rerunAt and ran the model for f1 again.
func withAnsweredF(h *History, rerunAt float64) {
	h.Enqueues = append(h.Enqueues, Enqueue{TaskID: "f1", Key: "F", Stage: "s", At: at(10)})
	h.Runs = append(h.Runs, run("F", "f1", 700, "new", "c1/0", 10), run("F", "f1", 701, "takeover", "c2/0", 12),
		run("F", "f1", 702, "new", "c1/0", rerunAt))
	failed := func(tok int64, sec float64) topics.Event {
		e := ev("f1", "F", topics.StatusFailed, topics.SharedOwner, tok, "", sec)
		e.Error = "sim: final failure"
		return e
	}
	h.Events = append(h.Events, failed(701, 12.3), failed(702, rerunAt+0.3))
	h.Flights["F"] = Flight{} // the FAILED meta expired
}

func TestRule6NoRunForAnAnsweredTask(t *testing.T) {
	h := cleanHistory()
	withAnsweredF(&h, 14.6)
	expectRule(t, h, []int{RuleAnsweredRun}, "key F task f1",
		"model run with token 702 (reason new, attempt 1, c1/0) started at", "2.3s after the task's first terminal event (FAILED, owner, token 701, by c",
		"the task's runs: 700/new/c1/0@", "702/new/c1/0@")
	if f := Check(h).Figures; f.RunsAfterAnswer != 1 || f.ViolationsByRule["6"] != 1 {
		t.Errorf("runs after answer %d, rule 6 violations %d; want 1, 1", f.RunsAfterAnswer, f.ViolationsByRule["6"])
	}
	// Within the slack of the event, the run counts as started before it; past it, not.
	h = cleanHistory()
	withAnsweredF(&h, 12.3+answeredSlack.Seconds()-0.01)
	if r := Check(h); len(r.Violations) != 0 {
		t.Errorf("violations for a run within the slack: %v", r.Violations)
	}
	h = cleanHistory()
	withAnsweredF(&h, 12.3+answeredSlack.Seconds()+0.01)
	expectRule(t, h, []int{RuleAnsweredRun}, "model run with token 702")
	// Tokens that date the acquire (µs of Redis time): a fresh flight acquired after the
	// event is caught the same way.
	h = cleanHistory()
	withAnsweredF(&h, 14.6)
	realTokens(&h, "F")
	expectRule(t, h, []int{RuleAnsweredRun}, "reason new, attempt 1, c1/0) started at Mar  1 12:00:14.600")
}

func TestRule6AllowedRuns(t *testing.T) {
	// A task enqueued twice: its second entry may run after the first was answered.
	h := cleanHistory()
	withAnsweredF(&h, 14.6)
	h.Enqueues = append(h.Enqueues, Enqueue{TaskID: "f1", Key: "F", Stage: "s", At: at(10)})
	r := Check(h)
	if len(r.Violations) != 0 {
		t.Errorf("violations for a task enqueued twice: %v", r.Violations)
	}
	if r.Figures.RunsAfterAnswer != 0 || r.Figures.ReRunsMultiEnqueued != 1 {
		t.Errorf("runs after answer %d, of tasks enqueued twice %d; want 0, 1", r.Figures.RunsAfterAnswer, r.Figures.ReRunsMultiEnqueued)
	}
	// The same when one of its XADDs answered an error (it may have been applied and sent
	// again).
	h = cleanHistory()
	withAnsweredF(&h, 14.6)
	h.Enqueues = append(h.Enqueues, Enqueue{TaskID: "f1", Key: "F", Stage: "s", At: at(10), Unsure: true})
	if r := Check(h); len(r.Violations) != 0 {
		t.Errorf("violations for a task enqueued unsurely: %v", r.Violations)
	}
	// Runs before the event only: the stopped owner's first run and the takeover that
	// answered f1 (and, in cleanHistory, a retry after a retryable failure of d1, which writes
	// no event, and takeovers of b1 and c1). A follower (b2, a2) runs nothing.
	h = cleanHistory()
	withAnsweredF(&h, 14.6)
	h.Runs = h.Runs[:len(h.Runs)-1]
	h.Events = h.Events[:len(h.Events)-1]
	if r := Check(h); len(r.Violations) != 0 || r.Figures.RunsAfterAnswer != 0 {
		t.Errorf("violations %v, runs after answer %d", r.Violations, r.Figures.RunsAfterAnswer)
	}
	// Another task of the key ran after f1 was answered: only a run's own task id counts.
	h = cleanHistory()
	withAnsweredF(&h, 14.6)
	h.Runs[len(h.Runs)-1].TaskID = "f2"
	h.Events[len(h.Events)-1].TaskID = "f2"
	h.Enqueues = append(h.Enqueues, Enqueue{TaskID: "f2", Key: "F", Stage: "s", At: at(14.5)})
	if r := Check(h); len(r.Violations) != 0 {
		t.Errorf("violations for a run of another task of the key: %v", r.Violations)
	}
}

func TestRule6LateLogOfAnEarlierAcquire(t *testing.T) {
	// c1/0 acquired f1 (token dated 10 s) and was stopped before its "model call" line, which
	// it wrote at 14.6 s, after the takeover had answered f1: its run started before the event.
	h := cleanHistory()
	withAnsweredF(&h, 14.6)
	h.Runs = h.Runs[:len(h.Runs)-1]
	h.Events = h.Events[:len(h.Events)-1]
	realTokens(&h, "F")
	h.Runs[len(h.Runs)-2].At = at(14.6)
	r := Check(h)
	if len(r.Violations) != 0 {
		t.Errorf("violations for a late log line: %v", r.Violations)
	}
	if r.Figures.LateRunLogs != 1 || r.Figures.RunsAfterAnswer != 0 {
		t.Errorf("late run logs %d, runs after answer %d; want 1, 0", r.Figures.LateRunLogs, r.Figures.RunsAfterAnswer)
	}
	// A token dated more than tokenClockWindow before the line is not read as a time.
	h.Runs[len(h.Runs)-2].At = at(10).Add(tokenClockWindow + time.Second)
	expectRule(t, h, []int{RuleAnsweredRun}, "model run with token")
}

// realTokens replaces the tokens of key's runs and events by tokens that date their acquire
// as the flight scripts make them (Redis time in µs): each run's token is its log time.
func realTokens(h *History, key string) {
	real := map[int64]int64{}
	for i, r := range h.Runs {
		if r.Key == key {
			real[r.Token] = r.At.UnixMicro()
			h.Runs[i].Token = real[r.Token]
		}
	}
	for i, e := range h.Events {
		if e.RequestKey == key {
			h.Events[i].OwnerToken = real[e.OwnerToken]
		}
	}
}
