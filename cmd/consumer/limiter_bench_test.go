package main_test

import (
	"encoding/json"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/flightdeck-ai/flightdeck/internal/testkit/openaitest"
	"github.com/flightdeck-ai/flightdeck/topics"
)

// BenchmarkLimitedProvider: 4 stock consumers of concurrency 16 send unique tasks to an
// OpenAI-compatible server that enforces 600 requests and 150,000 tokens a minute (buckets of
// 10 s) and answers 429 with Retry-After past them; each call is about 250 tokens. With a
// limiter set to those figures (limiter=on) and without one (off). Reported: the calls a
// minute the server answered after the first 20 s (steady-rpm, against 600), the share of
// calls answered 429 (429-pct), the tasks that failed for good, and how far the tokens the
// events report are from what the server counted (token-gap-pct).
func BenchmarkLimitedProvider(b *testing.B) {
	const tasks = 700
	for _, on := range []bool{true, false} {
		name := "limiter=off"
		if on {
			name = "limiter=on"
		}
		b.Run(name, func(b *testing.B) {
			for range b.N {
				srv := openaitest.Start(b, openaitest.Config{RequestsPerMinute: 600, TokensPerMinute: 150000, CompletionTokens: 150})
				e := newE2E(b)
				e.stages = limitedStage
				stage := "stages:\n  " + limitedStage + ":\n    model: openai\n    concurrency: 16\n    estimateTokens: 150\n"
				if on {
					stage = "limiters:\n  main:\n    requestsPerMinute: 600\n    tokensPerMinute: 150000\n" + stage + "    limiter: main\n"
				}
				cfg := e.stageConfig(stage)
				for i := range 4 {
					e.startWith("c"+strconv.Itoa(i+1), []string{"REDIS_URL=" + e.url, "OPENAI_BASE_URL=" + srv.BaseURL(),
						"OPENAI_MODEL=test-model"}, true, "--config", cfg)
				}
				want := map[string]bool{}
				prompt := strings.Repeat("a", 380) // about 100 prompt tokens with the JSON around it
				ts := make([]topics.Task, tasks)
				for i := range ts {
					id := "u" + strconv.Itoa(i)
					ts[i] = topics.Task{TaskID: id, Stage: limitedStage, Tenant: "acme", Input: json.RawMessage(`{"prompt":"` + id + prompt + `"}`)}
					want[id] = true
				}
				start := time.Now()
				if _, err := e.w.EnqueueTasks(e.ctx, ts); err != nil {
					b.Fatal(err)
				}
				got := e.collect([]string{limitedStage}, want, 5*time.Minute)
				failed, tokens := 0, 0
				for id := range want {
					if evs := got[id]; len(evs) == 0 || evs[0].Status != topics.StatusSucceeded {
						failed++
					} else if u := evs[0].Usage; u != nil {
						tokens += u.Tokens()
					}
				}
				requests, limited, counted := srv.Stats()
				steady := 0
				var last time.Time
				for _, at := range srv.Times() {
					if at.After(start.Add(20 * time.Second)) {
						steady++
						last = at
					}
				}
				if d := last.Sub(start.Add(20 * time.Second)); d > 0 {
					b.ReportMetric(float64(steady)/d.Minutes(), "steady-rpm")
				}
				b.ReportMetric(100*float64(limited)/float64(max(requests, 1)), "429-pct")
				b.ReportMetric(float64(failed), "failed")
				b.ReportMetric(100*float64(counted-tokens)/float64(max(counted, 1)), "token-gap-pct")
				b.ReportMetric(time.Since(start).Seconds(), "s")
				b.ReportMetric(0, "ns/op")
			}
		})
	}
}
