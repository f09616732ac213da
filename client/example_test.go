package client_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/flightdeck-ai/flightdeck/client"
)

// Enqueue appends a task to its stage's stream and returns a receipt for Await and
// Collect. Tasks with the same stage, tenant and input share a request key, the key their
// one model call runs under; an invalid task is refused before anything is written.
func ExampleClient_Enqueue() {
	opt, err := redis.ParseURL(redisURL()) // e.g. os.Getenv("REDIS_URL")
	if err != nil {
		log.Fatal(err)
	}
	rdb := redis.NewClient(opt)
	defer rdb.Close()
	cl, err := client.New(client.Config{Client: rdb})
	if err != nil {
		log.Fatal(err)
	}
	ctx := context.Background()

	answer := json.RawMessage(`{"answer":"I led the migration"}`)
	first, err := cl.Enqueue(ctx, client.Task{TaskID: "candidate-1", Stage: "answer-score", Tenant: "acme", Input: answer})
	if err != nil {
		log.Fatal(err)
	}
	// No TaskID: Enqueue makes one (a UUID).
	second, err := cl.Enqueue(ctx, client.Task{Stage: "answer-score", Tenant: "acme", Input: answer})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(first.TaskID, first.Stage, first.Tenant)
	fmt.Println("same request key:", first.RequestKey == second.RequestKey)

	_, err = cl.Enqueue(ctx, client.Task{Stage: "answer-score", Input: answer}) // no tenant
	var invalid *client.InvalidTaskError
	if errors.Is(err, client.ErrInvalidTask) && errors.As(err, &invalid) {
		fmt.Println("refused:", invalid.Reason, invalid.Field)
	}
	// Output:
	// candidate-1 answer-score acme
	// same request key: true
	// refused: missing_field tenant
}

// Await waits for one task's terminal event. Three tasks with the same input get the result
// of one model call: one task owns the call, the others follow it or find it stored.
func ExampleClient_Await() {
	url := redisURL()
	scorer := startScorer(url) // a consumer of "answer-score", as in the handlers package's Consumer example
	defer scorer.stop()

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
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()

	var receipts []client.Receipt
	for range 3 {
		r, err := cl.Enqueue(ctx, client.Task{Stage: "answer-score", Tenant: "acme",
			Input: json.RawMessage(`{"answer":"I led the migration"}`)})
		if err != nil {
			log.Fatal(err)
		}
		receipts = append(receipts, r)
	}
	owners := 0
	for _, r := range receipts {
		ev, err := cl.Await(ctx, r)
		if err != nil {
			log.Fatal(err)
		}
		fmt.Println(ev.Status, string(ev.Result))
		if ev.Shared == client.SharedOwner {
			owners++
		}
	}
	fmt.Printf("%d tasks, %d owner, %d model call\n", len(receipts), owners, scorer.calls.Load())
	// Output:
	// SUCCEEDED {"words":4}
	// SUCCEEDED {"words":4}
	// SUCCEEDED {"words":4}
	// 3 tasks, 1 owner, 1 model call
}

// Collect waits for many tasks with one reader, calling fn once per task as its event
// arrives (in the order of the result stream, so index the events by task id to report
// them in another order). Here two distinct inputs among four tasks cost two model calls.
func ExampleClient_Collect() {
	url := redisURL()
	scorer := startScorer(url) // a consumer of "answer-score", as in the handlers package's Consumer example
	defer scorer.stop()

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
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()

	answers := []string{"I led the migration", "I wrote the integration tests", "I led the migration", "I led the migration"}
	var tasks []client.Task
	for i, a := range answers {
		input, err := json.Marshal(map[string]string{"answer": a})
		if err != nil {
			log.Fatal(err)
		}
		tasks = append(tasks, client.Task{TaskID: fmt.Sprint("candidate-", i+1), Stage: "answer-score",
			Tenant: "acme", Input: input})
	}
	receipts, err := cl.EnqueueBatch(ctx, tasks) // one round trip
	if err != nil {
		log.Fatal(err)
	}
	events := map[string]client.Event{}
	if err := cl.Collect(ctx, receipts, func(ev client.Event) { events[ev.TaskID] = ev }); err != nil {
		log.Fatal(err)
	}
	for _, r := range receipts {
		ev := events[r.TaskID]
		fmt.Println(ev.TaskID, ev.Status, string(ev.Result))
	}
	fmt.Printf("%d tasks, %d model calls\n", len(receipts), scorer.calls.Load())
	// Output:
	// candidate-1 SUCCEEDED {"words":4}
	// candidate-2 SUCCEEDED {"words":5}
	// candidate-3 SUCCEEDED {"words":4}
	// candidate-4 SUCCEEDED {"words":4}
	// 4 tasks, 2 model calls
}
