package chaos

import (
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/flightdeck-ai/flightdeck/internal/faults"
	"github.com/flightdeck-ai/flightdeck/topics"
)

// Tests of the rules that the newer fault kinds exercise: cancelled keys, handovers,
// vanished flight records (deleted, or expired while every consumer was down), pauses
// shorter than the lease, parked followers left pending.

// withCancelledE adds key E: its owner (token 600) was cancelled by a crashed canceller; the
// owner's task and a parked one ended CANCELLED.
func withCancelledE(h *History) {
	h.Enqueues = append(h.Enqueues, Enqueue{TaskID: "e1", Key: "E", Stage: "s", At: at(10)},
		Enqueue{TaskID: "e2", Key: "E", Stage: "s", At: at(10.5)})
	h.Runs = append(h.Runs, run("E", "e1", 600, "new", "c1-1", 10))
	cancelled := func(task string, sh topics.Shared, sec float64) topics.Event {
		e := ev(task, "E", topics.StatusCancelled, sh, 600, "", sec)
		e.Error = "chaos: canceller-crash"
		return e
	}
	h.Events = append(h.Events, cancelled("e2", topics.SharedFollower, 12), cancelled("e1", topics.SharedOwner, 12.3))
	h.Flights["E"] = Flight{Found: true, Status: "CANCELLED", OwnerToken: 600}
	h.Faults = append(h.Faults, Fault{Kind: FaultCancellerCrash, At: at(11.9), Key: "E", Token: 600})
}

func TestRule1CancelledOnlyIfCancelled(t *testing.T) {
	h := cleanHistory()
	withCancelledE(&h)
	h.Cancels = []Cancel{{Key: "E", At: at(11.9), Crash: true, Exit: faults.CrashExitCode}}
	r := Check(h)
	if len(r.Violations) != 0 {
		t.Fatalf("violations for a cancelled key: %v", r.Violations)
	}
	if r.Figures.Cancelled != 2 || r.Figures.CancelledKeys != 1 || r.Figures.CancellerCrashes != 1 {
		t.Errorf("cancelled %d tasks, %d keys, %d canceller crashes; want 2, 1, 1", r.Figures.Cancelled,
			r.Figures.CancelledKeys, r.Figures.CancellerCrashes)
	}
	// Nobody cancelled E: its CANCELLED events are wrong.
	h.Cancels = nil
	expectRule(t, h, []int{RuleEvent}, "task e1", "task e2", "CANCELLED event (token 600", "nobody cancelled the key")
	// A canceller that never ran its script (the flight was not found) cancelled nothing.
	h.Cancels = []Cancel{{Key: "E", At: at(11.9), Crash: true, Exit: 1}}
	expectRule(t, h, []int{RuleEvent}, "nobody cancelled the key")
}

func TestRule4HandoverNeedsAHandedOverOwner(t *testing.T) {
	h := cleanHistory()
	// B's first owner (token 200) shut down and handed the flight over: 201 is a handover,
	// not a takeover, and spends no attempt.
	h.Runs[2].Reason = "handover"
	h.Handovers = []Handover{{Key: "B", Token: 200, Consumer: "c1/1", Why: "consumer_stopped", At: at(3.9)}}
	r := Check(h)
	if len(r.Violations) != 0 {
		t.Fatalf("violations: %v", r.Violations)
	}
	if r.Figures.HandoverRuns != 1 || r.Figures.Takeovers != 2 {
		t.Errorf("handover runs %d, takeovers %d; want 1, 2", r.Figures.HandoverRuns, r.Figures.Takeovers)
	}
	// No handover by token 200: a run that claims one ran beside a live owner.
	h.Handovers = []Handover{{Key: "B", Token: 999, Consumer: "c1/1", At: at(3.9)}}
	expectRule(t, h, []int{RuleRuns}, "reason handover, but the previous owner (token 200, c1/1) never handed the flight over")

	// A's first claim (token 90) was handed over before its call (no replica acknowledged
	// it): A's only run, token 100, is a handover run and not an extra one.
	h = cleanHistory()
	h.Runs[0].Reason = "handover"
	h.Handovers = []Handover{{Key: "A", Token: 90, Consumer: "c1/0", Why: "no replica acknowledged the claim", At: at(0)}}
	if r := Check(h); len(r.Violations) != 0 {
		t.Fatalf("handover before the first run: %v", r.Violations)
	}
	// Between two runs: B's first owner ran as token 199; the owner that took over from it
	// (token 200) gave up before its call, and 201 took the flight over from that one.
	h = cleanHistory()
	h.Runs[1].Token = 199
	h.Runs[2].Reason = "handover"
	h.Handovers = []Handover{{Key: "B", Token: 200, Consumer: "c2/0", At: at(3.9)}}
	if r := Check(h); len(r.Violations) != 0 || r.Figures.HandoverRuns != 1 {
		t.Fatalf("handover between runs: %v, %d handover runs", r.Violations, r.Figures.HandoverRuns)
	}
	// A handover after the run it should precede proves nothing.
	h = cleanHistory()
	h.Runs[0].Reason = "handover"
	h.Handovers = []Handover{{Key: "A", Token: 150, Consumer: "c1/0", At: at(0)}}
	expectRule(t, h, []int{RuleRuns}, "reason handover, but the previous owner (no earlier run) never handed the flight over")
}

// withVanishedB makes B's first flight (token 200, never ended) lose its records and a fresh
// flight (token 250) run at sec; the fresh flight's result answers B's tasks.
func withVanishedB(h *History, sec float64) {
	h.Runs = append(h.Runs[:2], h.Runs[3:]...) // no takeover: the owner died with every consumer
	h.Runs = append(h.Runs, run("B", "b2", 250, "new", "c2-1", sec))
	h.Completions[1] = Completion{Key: "B", TaskID: "b2", Token: 250, Consumer: "c2-1", At: at(sec + 1)}
	for i := range h.Events {
		if h.Events[i].RequestKey == "B" {
			h.Events[i].OwnerToken, h.Events[i].FinishedAt = 250, at(sec+1)
		}
	}
	h.Flights["B"] = Flight{Found: true, Status: "SUCCEEDED", OwnerToken: 250, ResultStored: true}
}

func TestRule4FreshFlightAfterExpiredRecords(t *testing.T) {
	// B's owner acquired at 1 s: its records expire by 1 + 4 + 2 = 7 s.
	h := cleanHistory()
	withVanishedB(&h, 7.2)
	h.Faults = append(h.Faults, Fault{Kind: FaultAllDown, Target: "all", At: at(1.5), For: "7s"})
	r := Check(h)
	if len(r.Violations) != 0 {
		t.Fatalf("violations: %v", r.Violations)
	}
	if r.Figures.FreshVanished != 1 {
		t.Errorf("fresh flights after vanished records %d, want 1", r.Figures.FreshVanished)
	}
	// Too early: the records still lived, so the fresh flight ran beside an open one.
	h = cleanHistory()
	withVanishedB(&h, 5)
	expectRule(t, h, []int{RuleRuns}, "fresh flight (token 250, task b2, c2-1)", "never ended with an event, and its records had not vanished")
	// After a retryable failure the FAILED meta lives failureTTL only.
	h = cleanHistory()
	withVanishedB(&h, 3.6)
	h.Failures = []RunFailure{{Key: "B", TaskID: "b1", Token: 200, Consumer: "c1/1", At: at(1.5)}}
	if r := Check(h); len(r.Violations) != 0 {
		t.Errorf("violations after a retryable failure: %v", r.Violations)
	}
	h.Failures[0].At = at(2.5) // its meta lived until 4.5 s
	expectRule(t, h, []int{RuleRuns}, "fresh flight (token 250")
	// A takeover (token 220) that a limiter made wait 0.25 s at 2 s, and that never ran,
	// recorded a free failure: the meta lived failureTTL plus the wait, until 4.25 s.
	h = cleanHistory()
	withVanishedB(&h, 4.4)
	h.Failures = []RunFailure{{Key: "B", TaskID: "b1", Token: 220, Consumer: "c2/1", At: at(2), Wait: 250 * time.Millisecond}}
	if r := Check(h); len(r.Violations) != 0 || r.Figures.FreshVanished != 1 {
		t.Errorf("violations after a free failure: %v (fresh after vanished records %d)", r.Violations, r.Figures.FreshVanished)
	}
	h.Failures[0].Wait = time.Second // its meta lived until 5 s
	expectRule(t, h, []int{RuleRuns}, "fresh flight (token 250")
}

func TestRule4FreshFlightAfterDeletedRecords(t *testing.T) {
	h := cleanHistory()
	withVanishedB(&h, 2.1)
	h.Faults = append(h.Faults, Fault{Kind: FaultDeleteKeys, At: at(2), Key: "B", Token: 200})
	if r := Check(h); len(r.Violations) != 0 || r.Figures.FreshVanished != 1 {
		t.Fatalf("violations %v, fresh after vanished records %d", r.Violations, r.Figures.FreshVanished)
	}
	// The deletion came after the fresh flight ran: it explains nothing.
	h.Faults[len(h.Faults)-1].At = at(2.2)
	expectRule(t, h, []int{RuleRuns}, "fresh flight (token 250")
	// One deletion allows one fresh flight, not two.
	h = cleanHistory()
	withVanishedB(&h, 2.1)
	h.Faults = append(h.Faults, Fault{Kind: FaultDeleteKeys, At: at(2), Key: "B", Token: 200})
	h.Runs = append(h.Runs, run("B", "b2", 240, "new", "c3-1", 2.05))
	expectRule(t, h, []int{RuleRuns}, "fresh flight (token 250")
}

func TestRule4NoRunWhileAPausedOwnersLeaseLives(t *testing.T) {
	// B's owner (token 200) was paused at 3.5 s for 0.6 s; its last heartbeat (3.4 s) keeps
	// its lease live until 4.6 s. The takeover at 4 s ran beside it.
	h := cleanHistory()
	h.Faults = append(h.Faults, Fault{Kind: FaultPauseLease, Target: "c1/1", At: at(3.5), For: "600ms",
		Key: "B", Token: 200, LeaseUntil: at(4.6)})
	expectRule(t, h, []int{RuleRuns}, "run with token 201 (reason takeover, c2/0) started at",
		"while the paused owner's lease was live: c1/1 held token 200")
	// The same takeover once the lease could have lapsed is a takeover of a lapsed lease.
	h.Faults[len(h.Faults)-1].LeaseUntil = at(3.9)
	if r := Check(h); len(r.Violations) != 0 {
		t.Errorf("violations: %v", r.Violations)
	}
	// An attempt whose runningTTL ran out may be run again whatever its lease.
	h.Faults[len(h.Faults)-1].LeaseUntil = at(4.6)
	h.Runs[2].Reason = "expired"
	if r := Check(h); len(r.Violations) != 0 {
		t.Errorf("violations for an expired attempt: %v", r.Violations)
	}
}

func TestRule5ParkedFollowersPending(t *testing.T) {
	h := cleanHistory()
	h.Backlog = []Backlog{{Stage: "s", Pending: 3, Parked: 2, Holders: map[string]int64{"~parked": 2, "c1-1": 1}}}
	expectRule(t, h, []int{RulePending}, "3 entries pending in the group (2 parked under ~parked; by holder: c1-1 1, ~parked 2)")
	if r := Check(h); r.Figures.Pending != 3 || r.Figures.Parked != 2 {
		t.Errorf("pending %d, parked %d; want 3, 2", r.Figures.Pending, r.Figures.Parked)
	}
}

func TestInjectedCrashesAreNotCrashes(t *testing.T) {
	h := cleanHistory()
	h.InjectedCrashes = []Exit{{Process: "c2-1", At: at(5), Status: "exit status 86"}}
	h.Exits = []Exit{{Process: "c3-1", At: at(6), Status: "exit status 2"}}
	r := Check(h)
	if r.Figures.InjectedCrashes != 1 || r.Figures.Crashes != 1 {
		t.Errorf("injected crashes %d, crashes %d; want 1, 1", r.Figures.InjectedCrashes, r.Figures.Crashes)
	}
}

func TestFirstRoundCoversEveryKind(t *testing.T) {
	for _, c := range []struct {
		mode    redisMode
		archive bool
	}{{modeNode, false}, {modeCluster, false}, {modeSentinel, false}, {modeNode, true}, {modeCluster, true}, {modeSentinel, true}} {
		in := &injector{rng: newRand(3), canceller: &canceller{}, mode: c.mode}
		switch c.mode {
		case modeCluster:
			in.cluster = (*localCluster)(nil)
		case modeSentinel:
			in.cluster = (*localSentinel)(nil)
		default:
			in.redis = &redisServer{}
		}
		if c.archive {
			in.losses = &lossRecorder{}
		}
		in.firstRound()
		kinds := drawableKinds(c.mode, c.archive)
		if slices.Contains(kinds, FaultRedisDataLoss) != (c.archive && c.mode == modeNode) {
			t.Errorf("mode %d, archive %v: data loss drawable: %v", c.mode, c.archive, kinds)
		}
		if slices.Contains(kinds, FaultSentinelKill) != (c.mode == modeSentinel) || slices.Contains(kinds, FaultMasterKill) != (c.mode == modeCluster) {
			t.Errorf("mode %d: master kills drawable: %v", c.mode, kinds)
		}
		if len(in.queue) != len(kinds) {
			t.Fatalf("mode %d: first round %v, want every kind of %v", c.mode, in.queue, kinds)
		}
		seen := map[string]bool{}
		for i, k := range in.queue {
			seen[k] = true
			if k == FaultAllDown && i >= (len(in.queue)+1)/2 {
				t.Errorf("all-down-past-ttl at %d of %d: want it in the first half", i, len(in.queue))
			}
		}
		for _, k := range kinds {
			if !seen[k] {
				t.Errorf("mode %d: %s not in the first round", c.mode, k)
			}
		}
	}
	if d := defaultFaultEvery(40*time.Second, 11); d != 2*time.Second {
		t.Errorf("fault gap of a 40 s run %v, want 2s", d)
	}
	if d := defaultFaultEvery(5*time.Minute, 11); d != 5*time.Second {
		t.Errorf("fault gap of a 5 min run %v, want 5s", d)
	}
}

func newRand(seed uint64) *rand.Rand { return rand.New(rand.NewPCG(seed, 2)) }
