package chaos

import (
	"strings"
	"testing"

	"github.com/flightdeck-ai/flightdeck/topics"
)

// Tests of the Redis data loss with the archive on (redis-data-loss, rule 7).

// withDataLoss turns cleanHistory into a run whose Redis lost its data at 50 s and was back
// at 51 s. Before it, A (token 100), B and D had SUCCEEDED; the archive held A's outcome, not
// D's (written too late); X's task x1 (enqueued at 49 s) had no event yet: its entry went
// with Redis, and its client sent it again as x2. After the loss: A's task a4 is answered
// from the archive (token 700, shared archive), D's task d2 runs the model again (fresh flight
// 900, allowed: nothing held D's result), x2 runs X. C's second flight (400, at 100 s)
// comes after the loss as before. B's and D's old flights are gone from Redis.
func withDataLoss(h *History) {
	var before, after []topics.Event
	for _, ev := range h.Events {
		if ev.FinishedAt.Before(at(50)) {
			before = append(before, ev)
		} else {
			after = append(after, ev)
		}
	}
	h.Enqueues = append(h.Enqueues, Enqueue{TaskID: "x1", Key: "X", Stage: "s", At: at(49)},
		Enqueue{TaskID: "x2", Key: "X", Stage: "s", At: at(51.5), Resends: "x1"},
		Enqueue{TaskID: "a4", Key: "A", Stage: "s", At: at(60)},
		Enqueue{TaskID: "d2", Key: "D", Stage: "s", At: at(60)})
	h.Runs = append(h.Runs, run("X", "x2", 800, "new", "c1/4", 52), run("D", "d2", 900, "new", "c2/2", 60))
	h.Completions = append(h.Completions, Completion{Key: "X", TaskID: "x2", Token: 800, Consumer: "c1/4", At: at(53)},
		Completion{Key: "D", TaskID: "d2", Token: 900, Consumer: "c2/2", At: at(61)})
	after = append(after,
		ev("x2", "X", topics.StatusSucceeded, topics.SharedOwner, 800, `{"r":"x"}`, 53),
		ev("a4", "A", topics.StatusSucceeded, topics.SharedArchive, 700, `{"r":"a"}`, 60.1),
		ev("d2", "D", topics.StatusSucceeded, topics.SharedOwner, 900, `{"r":"d2"}`, 61))
	h.ArchiveAnswers = []ArchiveAnswer{{Key: "A", TaskID: "a4", Token: 700, ArchivedToken: 100, Status: "SUCCEEDED",
		Consumer: "c3/2", At: at(60.1)}}
	h.Events = append(before, after...)
	h.DataLosses = []DataLoss{{At: at(50), Back: at(51), Events: len(before), Unanswered: []string{"x1"},
		Archived: map[string]ArchivedRow{"A": {Status: "SUCCEEDED", Token: 100}, "B": {Status: "SUCCEEDED", Token: 201}}}}
	h.Flights = map[string]Flight{
		"A": {Found: true, Status: "SUCCEEDED", OwnerToken: 700, ResultStored: true},
		"B": {}, // lost with Redis, nobody asked again
		"C": {Found: true, Status: "SUCCEEDED", OwnerToken: 400, ResultStored: true},
		"D": {Found: true, Status: "SUCCEEDED", OwnerToken: 900, ResultStored: true},
		"X": {Found: true, Status: "SUCCEEDED", OwnerToken: 800, ResultStored: true},
	}
	h.Faults = append(h.Faults, Fault{Kind: FaultRedisDataLoss, Target: "redis", At: at(50)})
}

func TestDataLossEffectsAreNoViolations(t *testing.T) {
	h := cleanHistory()
	withDataLoss(&h)
	r := Check(h)
	if len(r.Violations) != 0 {
		t.Fatalf("violations of a clean data loss: %v", r.Violations)
	}
	f := r.Figures
	if f.DataLosses != 1 || f.UnansweredAtLoss != 1 || f.LostWithRedis != 1 || f.Resent != 1 || f.LostTasks != 0 {
		t.Errorf("losses %d, unanswered %d, lost with Redis %d, resent %d, lost tasks %d; want 1, 1, 1, 1, 0",
			f.DataLosses, f.UnansweredAtLoss, f.LostWithRedis, f.Resent, f.LostTasks)
	}
	if f.ArchivedAtLoss != 2 || f.AskedAfterLoss != 1 || f.ArchiveAnswers != 1 || f.ArchiveKeys != 1 || f.ArchiveTasks != 1 {
		t.Errorf("archived %d, asked again %d, archive answers %d keys %d tasks %d; want 2, 1, 1, 1, 1",
			f.ArchivedAtLoss, f.AskedAfterLoss, f.ArchiveAnswers, f.ArchiveKeys, f.ArchiveTasks)
	}
	if f.ArchivedRunsBefore != 3 || f.ArchivedRunsAfter != 0 || f.KeysRanAgain != 0 || f.FreshAfterLoss != 1 {
		t.Errorf("archived keys' runs before %d after %d (keys %d), fresh after loss %d; want 3, 0, 0, 1",
			f.ArchivedRunsBefore, f.ArchivedRunsAfter, f.KeysRanAgain, f.FreshAfterLoss)
	}
	// Without the loss's excuse, x1 is a lost task.
	h.DataLosses[0].Unanswered = nil
	expectRule(t, h, []int{RuleEvent}, "task x1: no terminal event")
}

// TestArchivedKeyRunsAgainAfterLoss: A's outcome was archived before the loss, yet its task
// a4 ran the model after it: rule 7 must fail, whatever else allows a fresh flight.
func TestArchivedKeyRunsAgainAfterLoss(t *testing.T) {
	h := cleanHistory()
	withDataLoss(&h)
	h.ArchiveAnswers = nil
	h.Runs = append(h.Runs, run("A", "a4", 700, "new", "c3/2", 60))
	h.Completions = append(h.Completions, Completion{Key: "A", TaskID: "a4", Token: 700, Consumer: "c3/2", At: at(60.1)})
	for i := range h.Events {
		if h.Events[i].TaskID == "a4" {
			h.Events[i].Shared, h.Events[i].Result = topics.SharedOwner, []byte(`{"r":"a-again"}`)
		}
	}
	expectRule(t, h, []int{RuleArchive}, "key A task a4: model run with token 700 (reason new, c3/2)",
		"although the archive held the key's SUCCEEDED outcome (token 100)", `with result {"r":"a-again"} after the Redis data loss`)
	if f := Check(h).Figures; f.ArchivedRunsAfter != 1 || f.KeysRanAgain != 1 {
		t.Errorf("runs after the loss %d on %d keys; want 1, 1", f.ArchivedRunsAfter, f.KeysRanAgain)
	}
	// The same run after a failed archive lookup is the designed fallback: allowed, counted.
	h.LookupFailures = []LookupFailure{{Key: "A", TaskID: "a4", Token: 700, Consumer: "c3/2", At: at(60)}}
	r := Check(h)
	if len(r.Violations) != 0 || r.Figures.LookupFailedRuns != 1 {
		t.Errorf("after a failed lookup: violations %v, lookup-failed runs %d (want none, 1)", r.Violations, r.Figures.LookupFailedRuns)
	}
	// Had the archive not held A (the row came too late), the run is allowed.
	h.LookupFailures = nil
	delete(h.DataLosses[0].Archived, "A")
	if r := Check(h); len(r.Violations) != 0 {
		t.Errorf("A not archived: violations %v", r.Violations)
	}
}

func TestArchiveAnswerCarriesTheArchivedResult(t *testing.T) {
	h := cleanHistory()
	withDataLoss(&h)
	for i := range h.Events {
		if h.Events[i].TaskID == "a4" {
			h.Events[i].Result = []byte(`{"r":"other"}`)
		}
	}
	expectRule(t, h, []int{RuleArchive}, "key A task a4: answered SUCCEEDED (archive, token 700", `result {"r":"a"})`)
}

// TestFreshFlightAfterArchiveAnswer: once the archive answer put A back in Redis, a fresh
// flight of A is no loss's effect: rules 2 (a second token between two losses), 4 and 7
// all hold it.
func TestFreshFlightAfterArchiveAnswer(t *testing.T) {
	h := cleanHistory()
	withDataLoss(&h)
	h.Enqueues = append(h.Enqueues, Enqueue{TaskID: "a5", Key: "A", Stage: "s", At: at(70)})
	h.Runs = append(h.Runs, run("A", "a5", 750, "new", "c1/5", 70))
	h.Events = append(h.Events, ev("a5", "A", topics.StatusSucceeded, topics.SharedOwner, 750, `{"r":"a"}`, 71))
	h.Flights["A"] = Flight{Found: true, Status: "SUCCEEDED", OwnerToken: 750, ResultStored: true}
	expectRule(t, h, []int{RuleOneResult, RuleRuns, RuleArchive}, "token 700 result", "fresh flight (token 750, task a5, c1/5) ran the model again",
		"model run with token 750")
}

func TestParseArchiveLines(t *testing.T) {
	log := `{"level":"info","consumer":"c1-0","taskId":"t1","requestKey":"K","token":12,"status":"SUCCEEDED","archivedToken":7,"time":"2026-03-01T12:00:01Z","message":"answered from the archive; no model call"}
{"level":"debug","consumer":"c1-0","taskId":"t2","requestKey":"L","token":13,"error":"context deadline exceeded","time":"2026-03-01T12:00:02Z","message":"archive lookup failed; running the model"}`
	p, err := ParseLog(strings.NewReader(log))
	if err != nil {
		t.Fatal(err)
	}
	if len(p.ArchiveAnswers) != 1 || p.ArchiveAnswers[0] != (ArchiveAnswer{Key: "K", TaskID: "t1", Token: 12, ArchivedToken: 7,
		Status: "SUCCEEDED", Consumer: "c1-0", At: at(1)}) {
		t.Errorf("archive answers %+v", p.ArchiveAnswers)
	}
	if len(p.LookupFailures) != 1 || p.LookupFailures[0] != (LookupFailure{Key: "L", TaskID: "t2", Token: 13, Consumer: "c1-0", At: at(2)}) {
		t.Errorf("lookup failures %+v", p.LookupFailures)
	}
}
