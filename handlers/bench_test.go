package handlers_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill-redisstream/pkg/redisstream"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/redis/go-redis/v9"
	"github.com/rs/zerolog"

	"github.com/flightdeck-ai/flightdeck/handlers"
	"github.com/flightdeck-ai/flightdeck/handlers/model"
	"github.com/flightdeck-ai/flightdeck/internal/broker"
	"github.com/flightdeck-ai/flightdeck/internal/redisconn"
	"github.com/flightdeck-ai/flightdeck/internal/testkit/redistest"
	"github.com/flightdeck-ai/flightdeck/topics"
)

const benchSubscribers = 8

// enqueueAll appends n tasks (key i % keys) to the evaluation stream in pipelined batches.
func enqueueAll(b *testing.B, rdb *redis.Client, ks topics.Keyspace, run, n, keys int) {
	b.Helper()
	ctx := context.Background()
	for start := 0; start < n; start += 500 {
		_, err := rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
			for i := start; i < min(start+500, n); i++ {
				payload, _ := json.Marshal(topics.Task{TaskID: fmt.Sprintf("r%d-t%d", run, i), Stage: "interview-evaluation",
					Tenant: "bench", Input: json.RawMessage(fmt.Sprintf(`{"run":%d,"k":%d}`, run, i%keys))})
				p.XAdd(ctx, &redis.XAddArgs{Stream: ks.Tasks("interview-evaluation"),
					Values: []any{topics.FieldUUID, strconv.Itoa(i), topics.FieldPayload, payload}})
			}
			return nil
		})
		if err != nil {
			b.Fatal(err)
		}
	}
}

// waitEvents blocks until n events arrived on the evaluation result stream after from.
func waitEvents(b *testing.B, rdb *redis.Client, ks topics.Keyspace, from string, n int) string {
	b.Helper()
	streams := map[string]string{ks.Results("interview-evaluation"): from}
	for seen := 0; seen < n; {
		evs, _, err := broker.ReadEvents(context.Background(), rdb, streams, 5000, 2*time.Second)
		if err != nil {
			b.Fatal(err)
		}
		if len(evs) == 0 {
			b.Fatalf("stalled at %d of %d events", seen, n)
		}
		seen += len(evs)
		streams[ks.Results("interview-evaluation")] = evs[len(evs)-1].ID
	}
	return streams[ks.Results("interview-evaluation")]
}

// BenchmarkPipeline measures end-to-end tasks per second through one consumer process with
// benchSubscribers subscribers and a zero-latency simulated model: enqueue, acquire, model,
// complete, event. "bare-watermill" is the floor: the same subscribers with a no-op handler
// that only acks, on the same Redis, in the same run.
func BenchmarkPipeline(b *testing.B) {
	r := redistest.New(b)
	for _, bc := range []struct {
		name   string
		perKey int
	}{{"unique", 1}, {"dup10", 10}} {
		b.Run(bc.name, func(b *testing.B) {
			ks := topics.Keyspace{Prefix: redistest.Prefix()}
			stages, _ := handlers.LoadStages("", []string{"interview-evaluation"})
			stages[0].Concurrency = benchSubscribers
			log := zerolog.Nop()
			c, err := handlers.NewConsumer(handlers.Config{NewClient: redisconn.Factory(r.Client.Options()), Keyspace: ks,
				Name: "bench", Stages: stages, Models: map[string]model.Model{"sim": &model.Sim{}}, Logger: &log})
			if err != nil {
				b.Fatal(err)
			}
			ctx, cancel := context.WithCancel(context.Background())
			done := make(chan error, 1)
			go func() { done <- c.Run(ctx) }()
			<-c.Started()
			defer func() { cancel(); <-done }()
			from := "0"
			run := 0
			b.ResetTimer()
			for range b.N {
				run++
				const n = 1000
				enqueueAll(b, r.Client, ks, run, n, n/bc.perKey)
				from = waitEvents(b, r.Client, ks, from, n)
			}
			b.ReportMetric(float64(b.N*1000)/b.Elapsed().Seconds(), "tasks/s")
		})
	}
	b.Run("bare-watermill", func(b *testing.B) {
		ks := topics.Keyspace{Prefix: redistest.Prefix()}
		var acked atomic.Int64
		router, _ := message.NewRouter(message.RouterConfig{}, nil)
		for i := range benchSubscribers {
			sub, err := redisstream.NewSubscriber(redisstream.SubscriberConfig{
				Client: redisconn.NewClient(r.Client.Options()), Consumer: "bare/" + strconv.Itoa(i),
				ConsumerGroup: topics.ConsumerGroup, DisableIndefiniteInitialBlock: true}, nil)
			if err != nil {
				b.Fatal(err)
			}
			router.AddNoPublisherHandler("h"+strconv.Itoa(i), ks.Tasks("interview-evaluation"), sub,
				func(*message.Message) error { acked.Add(1); return nil })
		}
		var wg sync.WaitGroup
		wg.Add(1)
		go func() { defer wg.Done(); _ = router.Run(context.Background()) }()
		<-router.Running()
		defer func() { _ = router.Close(); wg.Wait() }()
		run := 0
		b.ResetTimer()
		for range b.N {
			run++
			const n = 1000
			want := acked.Load() + n
			enqueueAll(b, r.Client, ks, run, n, n)
			for deadline := time.Now().Add(30 * time.Second); acked.Load() < want; time.Sleep(time.Millisecond) {
				if time.Now().After(deadline) {
					b.Fatalf("stalled at %d of %d", acked.Load(), want)
				}
			}
		}
		b.ReportMetric(float64(b.N*1000)/b.Elapsed().Seconds(), "tasks/s")
	})
}
