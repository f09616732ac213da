package chaos

import (
	"testing"

	"github.com/flightdeck-ai/flightdeck/topics"
)

// TestRule3HeldAnswerTakenOver: the owner of token 701 completed its flight with the outcome
// of token 700 its process held, but token 702 had taken that flight over (and ran the model)
// before 701's result was accepted: 701's result is stale, whatever token's run it carries.
func TestRule3HeldAnswerTakenOver(t *testing.T) {
	h := cleanHistory()
	h.Enqueues = append(h.Enqueues, Enqueue{TaskID: "e1", Key: "E", Stage: "s", At: at(10)},
		Enqueue{TaskID: "e2", Key: "E", Stage: "s", At: at(11)}, Enqueue{TaskID: "e3", Key: "E", Stage: "s", At: at(12)})
	h.Runs = append(h.Runs, run("E", "e1", 700, "new", "c1/4", 10), run("E", "e3", 702, "takeover", "c2/1", 12.5))
	h.Completions = append(h.Completions, Completion{Key: "E", TaskID: "e2", Token: 701, Consumer: "c1/5", At: at(13)})
	h.HeldAnswers = []HeldAnswer{{Key: "E", TaskID: "e2", Token: 701, HeldToken: 700, Consumer: "c1/5", At: at(13)}}
	h.Events = append(h.Events, ev("e2", "E", topics.StatusSucceeded, topics.SharedOwner, 701, `{"r":"e"}`, 13),
		ev("e1", "E", topics.StatusSucceeded, topics.SharedFollower, 701, `{"r":"e"}`, 14),
		ev("e3", "E", topics.StatusSucceeded, topics.SharedFollower, 701, `{"r":"e"}`, 14))
	h.Flights["E"] = Flight{Found: true, Status: "SUCCEEDED", OwnerToken: 701, ResultStored: true}
	expectRule(t, h, []int{RuleNoStale}, "token 701", "token 702")
}
