// Command custom-consumer is a Flightdeck consumer that runs its own code for a stage of its
// own, "answer-score": every task on ai:tasks:answer-score runs scoreAnswer once per semantic
// key across every consumer started with the same Redis, and each task gets a terminal event
// on ai:results:answer-score.
//
//	REDIS_URL=redis://127.0.0.1:6379/0 go run ./examples/custom-consumer
//
// Enqueue a task from another shell once it runs (it registers its stage at start; before
// that the producer refuses an unknown stage):
//
//	go run ./cmd/producer enqueue --stage answer-score --tenant acme \
//	  --input '{"question":"Tell me about a migration","answer":"I led the migration of our billing database"}' --wait
package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"github.com/rs/zerolog"

	"github.com/flightdeck-ai/flightdeck/handlers"
)

// Stage is the stage this consumer serves: its tasks are read from ai:tasks:answer-score.
const Stage = "answer-score"

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	log := zerolog.New(os.Stderr).Level(zerolog.InfoLevel).With().Timestamp().Logger()
	cfg := handlers.Config{RedisURL: os.Getenv("REDIS_URL"), Logger: &log}
	if cfg.RedisURL == "" {
		cfg.RedisURL = "redis://127.0.0.1:6379/0"
	}
	if err := run(ctx, cfg); err != nil {
		fmt.Fprintln(os.Stderr, "custom-consumer:", err)
		os.Exit(1)
	}
}

// run serves Stage with scoreAnswer until ctx ends, then shuts down gracefully. cfg names
// Redis, the logger and anything else to change from the defaults.
func run(ctx context.Context, cfg handlers.Config) error {
	mux := handlers.NewMux()
	mux.HandleFunc(Stage, scoreAnswer)
	cfg.Handlers = mux
	c, err := handlers.NewConsumer(cfg)
	if err != nil {
		return err
	}
	return c.Run(ctx)
}

// answer is the input of an answer-score task.
type answer struct {
	Question string `json:"question"`
	Answer   string `json:"answer"`
}

// score is the result every task of one key receives.
type score struct {
	Words    int      `json:"words"`
	Score    int      `json:"score"`
	Keywords []string `json:"keywords"`
	Attempt  int      `json:"attempt"`
}

// scoreAnswer is the stage's handler. A real one calls a model here, passing ctx on (it is
// cancelled when the flight is cancelled or this consumer loses it) and calling progress
// as output streams in. An input that can never be scored is a permanent failure: it is not
// retried, and every task of its key gets a FAILED event with errorCode bad_input.
func scoreAnswer(ctx context.Context, task handlers.Request, progress handlers.ProgressFunc) (json.RawMessage, error) {
	var in answer
	if err := json.Unmarshal(task.Input, &in); err != nil {
		return nil, handlers.Permanent("bad_input", fmt.Errorf("input: %w", err))
	}
	if strings.TrimSpace(in.Answer) == "" {
		return nil, handlers.Permanent("bad_input", errors.New(`input: "answer" is empty`))
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	progress()
	words := strings.Fields(strings.ToLower(in.Answer))
	var keywords []string
	for _, w := range words {
		switch strings.Trim(w, ".,;:!?") {
		case "led", "designed", "migrated", "migration", "measured", "tested", "shipped":
			keywords = append(keywords, strings.Trim(w, ".,;:!?"))
		}
	}
	return json.Marshal(score{Words: len(words), Score: min(10, 2*len(keywords)+len(words)/10),
		Keywords: keywords, Attempt: task.Attempt})
}
