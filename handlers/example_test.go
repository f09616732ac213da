package handlers_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/flightdeck-ai/flightdeck/client"
	"github.com/flightdeck-ai/flightdeck/handlers"
	"github.com/flightdeck-ai/flightdeck/handlers/model"
	"github.com/flightdeck-ai/flightdeck/topics"
)

// scoreAnswer is the handler of the examples' "answer-score" stage: it counts an answer's
// words, and fails for good when the input has no answer.
func scoreAnswer(ctx context.Context, task handlers.Request, progress handlers.ProgressFunc) (json.RawMessage, error) {
	var in struct {
		Answer string `json:"answer"`
	}
	if err := json.Unmarshal(task.Input, &in); err != nil {
		return nil, handlers.Permanent("bad_input", err) // final: no other attempt runs
	}
	if strings.TrimSpace(in.Answer) == "" {
		return nil, handlers.Permanent("bad_input", errors.New(`"answer" is empty`))
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
	score := func(ctx context.Context, task handlers.Request, progress handlers.ProgressFunc) (json.RawMessage, error) {
		var in struct {
			Answer string `json:"answer"`
		}
		if err := json.Unmarshal(task.Input, &in); err != nil || in.Answer == "" {
			// Final: every task of the key fails with errorCode bad_input, without a retry.
			return nil, handlers.Permanent("bad_input", errors.New(`no "answer"`))
		}
		// Any other error is retried by another attempt, up to the stage's maxAttempts;
		// handlers.RetryLater(d, err) asks for that attempt no sooner than d.
		return json.Marshal(map[string]int{"words": len(strings.Fields(in.Answer))})
	}
	mux := handlers.NewMux()
	mux.HandleFunc("answer-score", score)

	ctx := context.Background()
	noProgress := func() {}
	out, err := score(ctx, handlers.Request{Stage: "answer-score", Attempt: 1,
		Input: json.RawMessage(`{"answer":"I led the migration"}`)}, noProgress)
	fmt.Println(string(out), err)
	_, err = score(ctx, handlers.Request{Stage: "answer-score", Attempt: 1, Input: json.RawMessage(`{}`)}, noProgress)
	var merr *model.Error
	if errors.As(err, &merr) {
		fmt.Println(merr.Type, merr.Code, "retryable:", merr.Retryable)
	}
	// Output:
	// {"words":4} <nil>
	// bad_request bad_input retryable: false
}

// A Consumer runs the handlers of a Mux for the tasks that clients enqueue, once per
// semantic key across every consumer of the same Redis.
func ExampleConsumer() {
	url := redisURL() // e.g. os.Getenv("REDIS_URL")
	mux := handlers.NewMux()
	mux.HandleFunc("answer-score", scoreAnswer)
	c, err := handlers.NewConsumer(handlers.Config{RedisURL: url, Handlers: mux})
	if err != nil {
		log.Fatal(err)
	}
	ctx, stop := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- c.Run(ctx) }() // until ctx ends, then a graceful stop
	select {
	case <-c.Started(): // reading its stages; the stage is registered
	case err := <-done:
		log.Fatal(err)
	}

	// A service enqueues with the client and awaits the task's terminal event.
	opt, err := redis.ParseURL(url)
	if err != nil {
		log.Fatal(err)
	}
	rdb := redis.NewClient(opt)
	defer rdb.Close()
	cl, err := client.New(client.Config{Client: rdb})
	if err != nil {
		log.Fatal(err)
	}
	wait, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for _, input := range []string{`{"answer":"I led the migration"}`, `{"answer":""}`} {
		r, err := cl.Enqueue(wait, topics.Task{Stage: "answer-score", Tenant: "acme", Input: json.RawMessage(input)})
		if err != nil {
			log.Fatal(err)
		}
		ev, err := cl.Await(wait, r)
		if err != nil {
			log.Fatal(err)
		}
		if ev.Status == topics.StatusSucceeded {
			fmt.Println(ev.Status, string(ev.Result))
		} else {
			fmt.Println(ev.Status, ev.ErrorType, ev.ErrorCode)
		}
	}

	stop()
	if err := <-done; err != nil {
		log.Fatal(err)
	}
	// Output:
	// SUCCEEDED {"words":4}
	// FAILED bad_request bad_input
}
