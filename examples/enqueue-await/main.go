// Command enqueue-await is a service that enqueues tasks through the Go client and awaits
// their results: five answers to score, three of them identical. The three identical ones
// share one semantic key, so the model runs once for them and all three receive the same
// result (one as the owner, the others as followers or from the stored result).
//
// Start consumers first (make demo starts some, or go run ./cmd/consumer), then:
//
//	REDIS_URL=redis://127.0.0.1:6379/0 go run ./examples/enqueue-await
package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/flightdeck-ai/flightdeck/client"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	url := os.Getenv("REDIS_URL")
	if url == "" {
		url = "redis://127.0.0.1:6379/0"
	}
	opt, err := redis.ParseURL(url)
	if err != nil {
		fmt.Fprintln(os.Stderr, "enqueue-await: REDIS_URL:", err)
		os.Exit(2)
	}
	rdb := redis.NewClient(opt)
	defer rdb.Close()
	if err := run(ctx, rdb, client.Keyspace{}, os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "enqueue-await:", err)
		os.Exit(1)
	}
}

// stage is the stage the example enqueues to: one of the stock consumer's built-in stages.
const stage = "interview-evaluation"

// run enqueues the answers on the interview-evaluation stage of ks, waits up to 30 s for
// every result and prints one line per task to out.
func run(ctx context.Context, rdb redis.UniversalClient, ks client.Keyspace, out io.Writer) error {
	cl, err := client.New(client.Config{Client: rdb, Keyspace: ks})
	if err != nil {
		return err
	}
	// A stage no consumer has registered would leave the tasks waiting on a stream nobody
	// reads: say so now rather than after the wait times out.
	if err := cl.CheckStages(ctx, stage); errors.Is(err, client.ErrUnknownStage) {
		return fmt.Errorf("%w: start a consumer of the stage first", err)
	} else if err != nil {
		return err
	}
	answers := []string{
		"I led the migration of our billing database.",
		"I wrote the integration tests.",
		"I led the migration of our billing database.",
		"I measured the latency before and after.",
		"I led the migration of our billing database.",
	}
	tasks := make([]client.Task, len(answers))
	for i, a := range answers {
		input, err := json.Marshal(map[string]string{"question": "Tell me about a project", "answer": a})
		if err != nil {
			return err
		}
		// No TaskID: Enqueue makes one. The request key is derived from stage, tenant and
		// input (and modelVersion, promptVersion, params when set), exactly as consumers do.
		tasks[i] = client.Task{Stage: stage, Tenant: "acme", Input: input,
			SessionID: fmt.Sprintf("candidate-%d", i)}
	}
	receipts, err := cl.EnqueueBatch(ctx, tasks)
	if err != nil {
		return fmt.Errorf("enqueue: %w", err)
	}
	for _, r := range receipts {
		fmt.Fprintf(out, "enqueued %s key %s\n", r.TaskID, r.RequestKey)
	}

	// One task: Await. Many: Collect reads every result stream once for all of them.
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	first, err := cl.Await(ctx, receipts[0])
	if err != nil {
		return fmt.Errorf("await: %w", err)
	}
	fmt.Fprintf(out, "first: %s %s\n", first.Status, first.Result)
	return cl.Collect(ctx, receipts, func(ev client.Event) {
		if ev.Status == client.StatusSucceeded {
			fmt.Fprintf(out, "%s %s shared=%s result=%s\n", ev.TaskID, ev.Status, ev.Shared, ev.Result)
		} else {
			fmt.Fprintf(out, "%s %s %s/%s: %s\n", ev.TaskID, ev.Status, ev.ErrorType, ev.ErrorCode, ev.Error)
		}
	})
}
