package handlers_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"github.com/flightdeck-ai/flightdeck/handlers"
	"github.com/flightdeck-ai/flightdeck/handlers/model"
)

// scoreAnswer is the handler of the examples' "answer-score" stage: it counts an answer's
// words, and fails for good when the input has no answer.
func scoreAnswer(ctx context.Context, task model.Request, progress model.ProgressFunc) (json.RawMessage, error) {
	var in struct {
		Answer string `json:"answer"`
	}
	if err := json.Unmarshal(task.Input, &in); err != nil {
		return nil, model.Permanent("bad_input", err) // final: no other attempt runs
	}
	if strings.TrimSpace(in.Answer) == "" {
		return nil, model.Permanent("bad_input", errors.New(`"answer" is empty`))
	}
	progress() // a long model call reports progress as its output streams in
	return json.Marshal(map[string]int{"words": len(strings.Fields(in.Answer))})
}

// A Mux routes each stage to its handler; a Consumer given the Mux consumes every stage
// registered in it.
func ExampleMux() {
	mux := handlers.NewMux()
	mux.HandleFunc("answer-score", scoreAnswer)
	mux.Handle("answer-draft", &model.Sim{}) // a model adapter, such as model.NewOpenAI(...)
	fmt.Println(mux.Stages())
	// Output: [answer-draft answer-score]
}

// A handler is a plain function: register it for a stage, and test it without Redis by
// calling it as a consumer would.
func ExampleMux_HandleFunc() {
	score := func(ctx context.Context, task model.Request, progress model.ProgressFunc) (json.RawMessage, error) {
		var in struct {
			Answer string `json:"answer"`
		}
		if err := json.Unmarshal(task.Input, &in); err != nil || in.Answer == "" {
			// Final: every task of the key fails with errorCode bad_input, without a retry.
			return nil, model.Permanent("bad_input", errors.New(`no "answer"`))
		}
		// Any other error is retried by another attempt, up to the stage's maxAttempts;
		// model.RetryLater(d, err) asks for that attempt no sooner than d.
		return json.Marshal(map[string]int{"words": len(strings.Fields(in.Answer))})
	}
	mux := handlers.NewMux()
	mux.HandleFunc("answer-score", score)

	ctx := context.Background()
	noProgress := func() {}
	out, err := score(ctx, model.Request{Stage: "answer-score", Attempt: 1,
		Input: json.RawMessage(`{"answer":"I led the migration"}`)}, noProgress)
	fmt.Println(string(out), err)
	_, err = score(ctx, model.Request{Stage: "answer-score", Attempt: 1, Input: json.RawMessage(`{}`)}, noProgress)
	var merr *model.Error
	if errors.As(err, &merr) {
		fmt.Println(merr.Type, merr.Code, "retryable:", merr.Retryable)
	}
	// Output:
	// {"words":4} <nil>
	// bad_request bad_input retryable: false
}
