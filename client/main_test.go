package client_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/flightdeck-ai/flightdeck/handlers"
	"github.com/flightdeck-ai/flightdeck/handlers/model"
	"github.com/flightdeck-ai/flightdeck/internal/testkit/redistest"
)

// TestMain runs the package's tests and examples (redistest.Shared.RunMain).
func TestMain(m *testing.M) { os.Exit(examples.RunMain(m)) }

// examples is the Redis server the examples share (an Example has no *testing.T).
var examples redistest.Shared

// redisURL returns the examples' private redis-server, emptied, so that each example starts
// from nothing (never the REDIS_URL server: the examples empty it).
func redisURL() string { return examples.URL() }

// scorer is a running consumer of the examples' "answer-score" stage (startScorer).
type scorer struct {
	calls atomic.Int64 // handler calls: one per request key that ran the model
	stop  func()       // stops the consumer and waits for it; panics when it failed
}

// startScorer runs a consumer of the stage "answer-score" on the Redis at url, whose
// handler counts the words of the input's "answer" (and its own calls), and returns once
// the consumer reads its stage, as the handlers package's Consumer example does.
func startScorer(url string) *scorer {
	s := &scorer{}
	mux := handlers.NewMux()
	mux.HandleFunc("answer-score", func(ctx context.Context, task model.Request, progress model.ProgressFunc) (json.RawMessage, error) {
		s.calls.Add(1)
		var in struct {
			Answer string `json:"answer"`
		}
		if err := json.Unmarshal(task.Input, &in); err != nil {
			return nil, model.Permanent("bad_input", err)
		}
		return json.Marshal(map[string]int{"words": len(strings.Fields(in.Answer))})
	})
	c, err := handlers.NewConsumer(handlers.Config{RedisURL: url, Handlers: mux})
	if err != nil {
		panic(fmt.Sprintf("examples: consumer: %v", err))
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- c.Run(ctx) }()
	select {
	case <-c.Started():
	case err := <-done:
		cancel()
		panic(fmt.Sprintf("examples: consumer: %v", err))
	}
	s.stop = func() {
		cancel()
		if err := <-done; err != nil {
			panic(fmt.Sprintf("examples: consumer: %v", err))
		}
	}
	return s
}
