package chaos

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/flightdeck-ai/flightdeck/topics"
)

var t0 = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)

func at(sec float64) time.Time { return t0.Add(time.Duration(sec * float64(time.Second))) }

func ev(task, key string, st topics.Status, sh topics.Shared, tok int64, result string, sec float64) topics.Event {
	e := topics.Event{TaskID: task, RequestKey: key, Stage: "s", Status: st, Shared: sh, OwnerToken: tok,
		FinishedAt: at(sec), Consumer: "c"}
	if result != "" {
		e.Result = json.RawMessage(result)
	}
	return e
}

func run(key, task string, tok int64, reason, consumer string, sec float64) ModelRun {
	return ModelRun{Key: key, TaskID: task, Token: tok, Reason: reason, Attempt: 1, Consumer: consumer, At: at(sec)}
}

// cleanHistory is a run with no violation: a plain key (A), a takeover (B), a flight that
// expired after its attempts and ran fresh later (C), a retry (D), and an unsure enqueue.
func cleanHistory() History {
	enq := func(task, key string, sec float64) Enqueue {
		return Enqueue{TaskID: task, Key: key, Stage: "s", At: at(sec)}
	}
	return History{
		Enqueues: []Enqueue{
			enq("a1", "A", 0), enq("a2", "A", 0.1), enq("a3", "A", 5),
			enq("b1", "B", 1), enq("b2", "B", 1.5),
			enq("c1", "C", 2), enq("c2", "C", 100),
			enq("d1", "D", 3),
			{TaskID: "u1", Key: "A", Stage: "s", At: at(4), Unsure: true},
		},
		Runs: []ModelRun{
			run("A", "a1", 100, "new", "c1/0", 0),
			run("B", "b1", 200, "new", "c1/1", 1), run("B", "b1", 201, "takeover", "c2/0", 4),
			run("C", "c1", 300, "new", "c1/2", 2), run("C", "c1", 301, "takeover", "c2/1", 5),
			run("C", "c1", 302, "takeover", "c3/0", 8),
			run("C", "c2", 400, "new", "c3/1", 100),
			run("D", "d1", 500, "new", "c1/3", 3), run("D", "d1", 501, "retry", "c1/3", 4),
		},
		Completions: []Completion{
			{Key: "A", TaskID: "a1", Token: 100, Consumer: "c1/0", At: at(1)},
			{Key: "B", TaskID: "b1", Token: 201, Consumer: "c2/0", At: at(6)},
			{Key: "C", TaskID: "c2", Token: 400, Consumer: "c3/1", At: at(101)},
			{Key: "D", TaskID: "d1", Token: 501, Consumer: "c1/3", At: at(5)},
		},
		Events: []topics.Event{
			ev("a1", "A", topics.StatusSucceeded, topics.SharedOwner, 100, `{"r":"a"}`, 1),
			ev("a2", "A", topics.StatusSucceeded, topics.SharedFollower, 100, `{"r":"a"}`, 1),
			ev("a3", "A", topics.StatusSucceeded, topics.SharedHit, 100, `{"r":"a"}`, 5),
			ev("a3", "A", topics.StatusSucceeded, topics.SharedHit, 100, `{"r":"a"}`, 5.2), // redelivered
			ev("b1", "B", topics.StatusSucceeded, topics.SharedOwner, 201, `{"r":"b"}`, 6),
			ev("b2", "B", topics.StatusSucceeded, topics.SharedFollower, 201, `{"r":"b"}`, 6),
			ev("c1", "C", topics.StatusExpired, topics.SharedFollower, 302, "", 12),
			ev("c2", "C", topics.StatusSucceeded, topics.SharedOwner, 400, `{"r":"c"}`, 101),
			ev("d1", "D", topics.StatusSucceeded, topics.SharedOwner, 501, `{"r":"d"}`, 5),
		},
		Flights: map[string]Flight{
			"A": {Found: true, Status: "SUCCEEDED", OwnerToken: 100, ResultStored: true},
			"B": {Found: true, Status: "SUCCEEDED", OwnerToken: 201, ResultStored: true},
			"C": {Found: true, Status: "SUCCEEDED", OwnerToken: 400, ResultStored: true},
			"D": {Found: true, Status: "SUCCEEDED", OwnerToken: 501, ResultStored: true},
		},
		Backlog:    []Backlog{{Stage: "s", Pending: 0, Lag: 0}},
		ResultTTL:  10 * time.Minute,
		RunningTTL: 4 * time.Second,
		FailureTTL: 2 * time.Second,
		SnapshotAt: at(300),
		Faults:     []Fault{{Kind: "sigkill", Target: "c1", At: at(2)}, {Kind: "sigstop", Target: "c2", At: at(3)}},
	}
}

func TestCheckClean(t *testing.T) {
	r := Check(cleanHistory())
	for _, v := range r.Violations {
		t.Errorf("unexpected violation: %s", v)
	}
	f := r.Figures
	checks := map[string][2]int{
		"tasks":          {f.Tasks, 8},
		"unsure":         {f.UnsureEnqueues, 1},
		"keys":           {f.DistinctKeys, 4},
		"events":         {f.Events, 9},
		"duplicate evts": {f.DuplicateEvts, 1},
		"succeeded":      {f.Succeeded, 7},
		"expired":        {f.Expired, 1},
		"model runs":     {f.ModelRuns, 9},
		"flights":        {f.Flights, 5},
		"duplicate runs": {f.DuplicateRuns, 4},
		"takeovers":      {f.Takeovers, 3},
		"retry runs":     {f.RetryRuns, 1},
		"completions":    {f.Completions, 4},
		"faults":         {f.FaultsTotal, 2},
		"lost":           {f.LostTasks, 0},
	}
	for name, c := range checks {
		if c[0] != c[1] {
			t.Errorf("%s = %d, want %d", name, c[0], c[1])
		}
	}
}

// expectRule checks that h breaks exactly the rules in want (at least once each) and that
// some violation's text contains every fragment.
func expectRule(t *testing.T, h History, want []int, fragments ...string) {
	t.Helper()
	r := Check(h)
	got := map[int]bool{}
	var all []string
	for _, v := range r.Violations {
		got[v.Rule] = true
		all = append(all, v.String())
	}
	for _, w := range want {
		if !got[w] {
			t.Errorf("rule %d not reported; violations:\n%s", w, strings.Join(all, "\n"))
		}
		delete(got, w)
	}
	for rule := range got {
		t.Errorf("unexpected rule %d reported:\n%s", rule, strings.Join(all, "\n"))
	}
	text := strings.Join(all, "\n")
	for _, fr := range fragments {
		if !strings.Contains(text, fr) {
			t.Errorf("no violation mentions %q:\n%s", fr, text)
		}
	}
	if r.Figures.Violations != len(r.Violations) {
		t.Errorf("figures count %d violations, report holds %d", r.Figures.Violations, len(r.Violations))
	}
}

func dropEvents(h *History, task string) {
	var keep []topics.Event
	for _, e := range h.Events {
		if e.TaskID != task {
			keep = append(keep, e)
		}
	}
	h.Events = keep
}

func TestRule1LostTask(t *testing.T) {
	h := cleanHistory()
	dropEvents(&h, "b2")
	h.DeadLetters = []DeadLetter{{Stage: "s", TaskID: "b2", Reason: "handler_failed", Detail: "breaker open", Consumer: "c2-2", At: "12:00:03.000"}}
	expectRule(t, h, []int{RuleEvent}, "task b2", "no terminal event", "dead-lettered by c2-2 at 12:00:03.000: handler_failed: breaker open")
	if r := Check(h); r.Figures.LostTasks != 1 {
		t.Errorf("lost tasks %d, want 1", r.Figures.LostTasks)
	}
}

func TestRule1UnsureEnqueueNeedsNoEvent(t *testing.T) {
	h := cleanHistory()
	h.Enqueues = append(h.Enqueues, Enqueue{TaskID: "u2", Key: "B", Stage: "s", At: at(7), Unsure: true})
	if r := Check(h); len(r.Violations) != 0 {
		t.Errorf("violations for an unsure enqueue: %v", r.Violations)
	}
}

func TestRule1EventUnderAnotherKey(t *testing.T) {
	h := cleanHistory()
	h.Events = append(h.Events, ev("d1", "X", topics.StatusSucceeded, topics.SharedHit, 501, `{"r":"d"}`, 9))
	expectRule(t, h, []int{RuleEvent, RuleNoStale}, "event under another key X", "never ran")
}

func TestRule2DifferentResult(t *testing.T) {
	h := cleanHistory()
	h.Events = append(h.Events, ev("a4", "A", topics.StatusSucceeded, topics.SharedHit, 100, `{"r":"other"}`, 20))
	h.Enqueues = append(h.Enqueues, Enqueue{TaskID: "a4", Key: "A", Stage: "s", At: at(19)})
	h.Events = append(h.Events, ev("a5", "A", topics.StatusSucceeded, topics.SharedHit, 100, `{"r":"other"}`, 21))
	h.Enqueues = append(h.Enqueues, Enqueue{TaskID: "a5", Key: "A", Stage: "s", At: at(19)})
	expectRule(t, h, []int{RuleOneResult}, "task a4", `{"r":"other"} in 2 events`, "6 SUCCEEDED events")
	if n := Check(h).Figures.ViolationsByRule["2"]; n != 1 {
		t.Errorf("%d rule 2 violations, want 1 per key", n)
	}
}

func TestRule2DifferentTokenWithinTTL(t *testing.T) {
	h := cleanHistory()
	// A second owner of A ran and published another result 2 minutes later: two results
	// (rule 2), a fresh flight inside the result TTL (rule 4), and the stored token is not
	// the last event's (rule 3).
	h.Runs = append(h.Runs, run("A", "a4", 150, "new", "c2/3", 120))
	h.Completions = append(h.Completions, Completion{Key: "A", TaskID: "a4", Token: 150, Consumer: "c2/3", At: at(121)})
	h.Events = append(h.Events, ev("a4", "A", topics.StatusSucceeded, topics.SharedOwner, 150, `{"r":"a2"}`, 121))
	h.Enqueues = append(h.Enqueues, Enqueue{TaskID: "a4", Key: "A", Stage: "s", At: at(119)})
	expectRule(t, h, []int{RuleOneResult, RuleNoStale, RuleRuns}, "token 150", "within the result TTL")
}

func TestRule2OutsideTTLIsANewResult(t *testing.T) {
	h := cleanHistory()
	h.ResultTTL = time.Minute
	h.SnapshotAt = at(200)
	// A's result expired after a minute; a fresh flight ran at 90 s with another result.
	h.Runs = append(h.Runs, run("A", "a4", 150, "new", "c2/3", 90))
	h.Completions = append(h.Completions, Completion{Key: "A", TaskID: "a4", Token: 150, Consumer: "c2/3", At: at(91)})
	h.Events = append(h.Events, ev("a4", "A", topics.StatusSucceeded, topics.SharedOwner, 150, `{"r":"a2"}`, 91))
	h.Enqueues = append(h.Enqueues, Enqueue{TaskID: "a4", Key: "A", Stage: "s", At: at(89)})
	h.Flights["A"] = Flight{Found: true, Status: "SUCCEEDED", OwnerToken: 150, ResultStored: true}
	// C's second generation also happened after its first ended: nothing else changes.
	h.Flights["B"] = Flight{} // B's result expired by the snapshot: not found is fine
	if r := Check(h); len(r.Violations) != 0 {
		t.Errorf("violations: %v", r.Violations)
	}
}

func TestRule3StaleTokenAccepted(t *testing.T) {
	h := cleanHistory()
	// The stopped owner of B (token 200) came back after the takeover (201) and its result
	// was accepted and published; the stored flight still says 201.
	h.Completions[1] = Completion{Key: "B", TaskID: "b1", Token: 200, Consumer: "c1/1", At: at(6)}
	for i := range h.Events {
		if h.Events[i].RequestKey == "B" {
			h.Events[i].OwnerToken = 200
		}
	}
	expectRule(t, h, []int{RuleNoStale}, "token 201 (reason takeover, c2/0, task b1) had taken the flight over",
		"stored flight has token 201")
}

func TestRule3TwoResultsAcceptedInOneFlight(t *testing.T) {
	h := cleanHistory()
	h.Completions = append(h.Completions, Completion{Key: "B", TaskID: "b1", Token: 200, Consumer: "c1/1", At: at(7)})
	expectRule(t, h, []int{RuleNoStale}, "two results accepted in one flight", "stale owner's result was accepted")
}

func TestRule3TokenNeverRan(t *testing.T) {
	h := cleanHistory()
	h.Events = append(h.Events, ev("d2", "D", topics.StatusSucceeded, topics.SharedHit, 777, `{"r":"d"}`, 8))
	h.Enqueues = append(h.Enqueues, Enqueue{TaskID: "d2", Key: "D", Stage: "s", At: at(7)})
	h.Flights["D"] = Flight{Found: true, Status: "SUCCEEDED", OwnerToken: 777, ResultStored: true}
	expectRule(t, h, []int{RuleOneResult, RuleNoStale}, "token 777 never ran the model")
}

func TestRule3StoredFlight(t *testing.T) {
	for name, fl := range map[string]Flight{
		"gone within TTL": {},
		"not succeeded":   {Found: true, Status: "FAILED", OwnerToken: 100},
		"other token":     {Found: true, Status: "SUCCEEDED", OwnerToken: 99, ResultStored: true},
		"result missing":  {Found: true, Status: "SUCCEEDED", OwnerToken: 100},
	} {
		t.Run(name, func(t *testing.T) {
			h := cleanHistory()
			h.Flights["A"] = fl
			expectRule(t, h, []int{RuleNoStale}, "key A")
		})
	}
}

func TestRule4FreshFlightAfterSuccess(t *testing.T) {
	h := cleanHistory()
	// D ran again under a fresh flight while its result still lived; its event was the
	// result hit (same token), so only the extra run shows.
	h.Runs = append(h.Runs, run("D", "d2", 600, "new", "c2/2", 30))
	expectRule(t, h, []int{RuleRuns}, "fresh flight (token 600, task d2, c2/2)", "within the result TTL")
}

func TestRule4FreshFlightWhileOpen(t *testing.T) {
	h := cleanHistory()
	// B's first generation never ended (its events are gone) and a fresh flight ran.
	dropEvents(&h, "b1")
	dropEvents(&h, "b2")
	h.Enqueues = h.Enqueues[:3]
	h.Enqueues = append(h.Enqueues, Enqueue{TaskID: "c1", Key: "C", Stage: "s", At: at(2)},
		Enqueue{TaskID: "c2", Key: "C", Stage: "s", At: at(100)}, Enqueue{TaskID: "d1", Key: "D", Stage: "s", At: at(3)})
	h.Completions = append(h.Completions[:1], h.Completions[2:]...)
	h.Runs = append(h.Runs, run("B", "b3", 250, "new", "c3/2", 9))
	h.Flights["B"] = Flight{Found: true, Status: "FAILED", OwnerToken: 250}
	expectRule(t, h, []int{RuleRuns}, "never ended with an event")
}

func TestRule4DuplicateTokenAndUnknownReason(t *testing.T) {
	h := cleanHistory()
	h.Runs = append(h.Runs, run("A", "a2", 100, "new", "c2/0", 0))
	expectRule(t, h, []int{RuleRuns}, "token 100 ran the model twice")
	h = cleanHistory()
	h.Runs[0].Reason = "whim"
	expectRule(t, h, []int{RuleRuns}, `unknown reason "whim"`)
}

func TestRule5Pending(t *testing.T) {
	h := cleanHistory()
	h.Backlog = []Backlog{{Stage: "s", Pending: 2, Lag: 1}}
	expectRule(t, h, []int{RulePending}, "2 entries pending", "1 entries never delivered")
	if r := Check(h); r.Figures.Pending != 3 {
		t.Errorf("pending figure %d, want 3", r.Figures.Pending)
	}
	h = cleanHistory()
	h.Flights["E"] = Flight{Found: true, Status: "RUNNING", OwnerToken: 9}
	h.Flights["C"] = Flight{Found: true, Status: "SUCCEEDED", OwnerToken: 400, ResultStored: true, Parked: 2}
	expectRule(t, h, []int{RulePending}, "flight still RUNNING", "2 tasks still parked")
}

func TestParseLog(t *testing.T) {
	log := `{"level":"info","name":"c1-0","stages":2,"time":"2026-03-01T12:00:00Z","message":"starting"}
{"level":"info","consumer":"c1-0","entry":"1-0","stage":"s","taskId":"t1","requestKey":"K","token":1234567890123456,"reason":"takeover","attempt":2,"time":"2026-03-01T12:00:01Z","message":"model call"}
{"level":"warn","consumer":"c1-0","taskId":"t1","requestKey":"K","token":1234567890123456,"time":"2026-03-01T12:00:02Z","message":"the flight was gone when the result arrived; written back"}
{"level":"info","consumer":"c1-0","taskId":"t1","requestKey":"K","token":1234567890123456,"answered":2,"runMs":5,"time":"2026-03-01T12:00:02Z","message":"owner completed"}
{"level":"warn","consumer":"c1-0","taskId":"t2","requestKey":"L","token":5,"time":"2026-03-01T12:00:02Z","message":"result refused: another owner holds the flight"}
{"level":"warn","consumer":"c1-0","taskId":"t2","requestKey":"L","token":5,"error":"x","time":"2026-03-01T12:00:02Z","message":"run aborted by the flight; acquiring again"}
panic: boom
goroutine 1 [running]:
{"level":"info","consumer":"c1-0","written":2,"refused":1,"kept":0,"answered":3,"time":"2026-03-01T12:00:03Z","message":"uncertain outcomes written back"}
{"level":"info","consumer":"c1-0","written":1,"refused":0,"kept":0,"answered":1,"time":"2026-03-01T12:00:03Z","message":"spooled outcomes written back at start"}
{"level":"warn","consumer":"c1-0","outcomes":4,"dir":"/x","time":"2026-03-01T12:00:03Z","message":"adopted the spooled outcomes of stopped processes; writing them back"}
{"level":"info","consumer":"c1-0","taskId":"t3","requestKey":"M","token":7,"reason":"new","attempt":1,"time":"2026-03-01T12:00:03Z","message":"model call"}
{"level":"warn","consumer":"c1-0","taskId":"t3","requestKey":"M","token":7,"retryIn":200,"time":"2026-03-01T12:00:04Z","message":"model call failed; the flight retries"}
{"level":"warn","consumer":"c1-0","taskId":"t4","requestKey":"N","token":8,"time":"2026-03-01T12:00:04Z","message":"model call failed for good"}
{"level":"warn","consumer":"c1-0","taskId":"t3","requestKey":"M","token":7,"time":"2026-03-01T12:00:04Z","message":"the flight's meta was gone; written back by its owner"}
{"level":"info","consumer":"c1-0","taskId":"t5","requestKey":"P","token":9,"why":"consumer_stopped","time":"2026-03-01T12:00:05Z","message":"flight handed over; the attempt is not spent"}
{"level":"info","consumer":"c1-0","stream":"ai:tasks:s","entries":3,"time":"2026-03-01T12:00:05Z","message":"picked up this consumer's own pending entries"}
{"level":"info","consumer":"c1-0","stream":"ai:tasks:s","entries":2,"time":"2026-03-01T12:00:06Z","message":"held entries handed over to the other consumers"}
{"level":"error","consumer":"c1-0","time":"2026-03-01T12:00:06Z","message":"router stopped"}
{"level":"error","fault":"crash_after_script","op":"complete","message":"fault injection: exiting after the complete script, before its answers"}`
	p, err := ParseLog(strings.NewReader(log))
	if err != nil {
		t.Fatal(err)
	}
	if len(p.Runs) != 2 || p.Runs[0] != (ModelRun{Key: "K", TaskID: "t1", Token: 1234567890123456, Reason: "takeover", Attempt: 2,
		Consumer: "c1-0", At: at(1)}) || p.Runs[1].Token != 7 || p.Runs[1].Reason != "new" {
		t.Errorf("runs %+v", p.Runs)
	}
	if len(p.Completions) != 1 || p.Completions[0].Token != 1234567890123456 || !p.Completions[0].Restored || p.Completions[0].Key != "K" {
		t.Errorf("completions %+v", p.Completions)
	}
	if len(p.Failures) != 1 || p.Failures[0] != (RunFailure{Key: "M", TaskID: "t3", Token: 7, Consumer: "c1-0", At: at(4)}) {
		t.Errorf("failures %+v", p.Failures)
	}
	if len(p.Handovers) != 1 || p.Handovers[0] != (Handover{Key: "P", Token: 9, Consumer: "c1-0", Why: "consumer_stopped", At: at(5)}) {
		t.Errorf("handovers %+v", p.Handovers)
	}
	want := LogStats{Lines: 20, NotJSON: 2, Panics: 1, Refused: 1, Aborted: 1, Restored: 1, MetaBack: 1, SpoolWritten: 3,
		SpoolRefused: 1, SpoolAdopted: 4, FailedCalls: 2, HandedOver: 1, PickedUp: 3, Released: 2, FaultCrashes: 1, Errors: 1}
	if p.Stats != want {
		t.Errorf("stats\n%+v, want\n%+v", p.Stats, want)
	}
}

// TestRule3HeldAnswer: an owner that completed its flight with the outcome its process held
// (the earlier owner's write was refused: this owner had taken the flight over) ran nothing
// under its own token: rule 3 accepts that token when the held token ran, and flags it when
// it did not.
func TestRule3HeldAnswer(t *testing.T) {
	held := func(heldToken int64) History {
		h := cleanHistory()
		h.Enqueues = append(h.Enqueues, Enqueue{TaskID: "e1", Key: "E", Stage: "s", At: at(10)},
			Enqueue{TaskID: "e2", Key: "E", Stage: "s", At: at(11)})
		h.Runs = append(h.Runs, run("E", "e1", 700, "new", "c1/4", 10))
		h.Completions = append(h.Completions, Completion{Key: "E", TaskID: "e2", Token: 701, Consumer: "c1/5", At: at(13)})
		h.HeldAnswers = []HeldAnswer{{Key: "E", TaskID: "e2", Token: 701, HeldToken: heldToken, Consumer: "c1/5", At: at(13)}}
		h.Events = append(h.Events, ev("e2", "E", topics.StatusSucceeded, topics.SharedOwner, 701, `{"r":"e"}`, 13),
			ev("e1", "E", topics.StatusSucceeded, topics.SharedFollower, 701, `{"r":"e"}`, 14))
		h.Flights["E"] = Flight{Found: true, Status: "SUCCEEDED", OwnerToken: 701, ResultStored: true}
		return h
	}
	if vs := Check(held(700)).Violations; len(vs) != 0 {
		t.Errorf("held outcome of a token that ran: violations %+v", vs)
	}
	expectRule(t, held(999), []int{RuleNoStale}, "token 701 completed with the outcome of token 999", "token 999 never ran")
}

func TestParseLogHeldAnswer(t *testing.T) {
	log := `{"level":"info","consumer":"c1-0","taskId":"t9","requestKey":"K","token":12,"heldToken":11,"time":"2026-03-01T12:00:01Z","message":"answered from the outcome this process holds; no model call"}`
	p, err := ParseLog(strings.NewReader(log))
	if err != nil {
		t.Fatal(err)
	}
	want := HeldAnswer{Key: "K", TaskID: "t9", Token: 12, HeldToken: 11, Consumer: "c1-0", At: at(1)}
	if len(p.HeldAnswers) != 1 || p.HeldAnswers[0] != want {
		t.Errorf("held answers %+v, want %+v", p.HeldAnswers, want)
	}
}
