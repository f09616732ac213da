package main_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/flightdeck-ai/flightdeck/topics"
)

// TestPerStageOpenAISettings: two stages on the OpenAI adapter in one consumer process, one
// with its own model, system prompt and timeout in the stage file, the other on the shared
// settings from the environment: each call reaches the endpoint with its stage's settings, and
// a stage left on the sim model is named in a warning at start.
func TestPerStageOpenAISettings(t *testing.T) {
	type call struct{ model, system string }
	var mu sync.Mutex
	calls := map[string]call{} // user content -> what the endpoint saw
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var req struct {
			Model    string `json:"model"`
			Messages []struct {
				Role    string          `json:"role"`
				Content json.RawMessage `json:"content"`
			} `json:"messages"`
		}
		if err := json.NewDecoder(r.Body).Decode(&req); err != nil || r.URL.Path != "/v1/chat/completions" {
			http.Error(w, "bad request", http.StatusBadRequest)
			return
		}
		var c call
		var user string
		for _, m := range req.Messages {
			var s string
			_ = json.Unmarshal(m.Content, &s)
			if m.Role == "system" {
				c.system = s
			} else {
				user = s
			}
		}
		c.model = req.Model
		mu.Lock()
		calls[user] = c
		mu.Unlock()
		fmt.Fprintf(w, `{"model":%q,"choices":[{"index":0,"message":{"role":"assistant","content":"ok from %s"},"finish_reason":"stop"}]}`,
			req.Model, req.Model)
	}))
	defer srv.Close()

	e := newE2E(t)
	e.stages = "interview-evaluation,interview-followup,interview-extraction"
	cfg := e.stageConfig(`stages:
  interview-evaluation:
    model: openai
    openai:
      model: scorer-large
      systemPrompt: You score interview answers from 1 to 10.
      timeout: 20s
  interview-followup:
    model: openai
`)
	p := e.startWith("c1", []string{"REDIS_URL=" + e.url, "OPENAI_BASE_URL=" + srv.URL + "/v1",
		"OPENAI_MODEL=shared-small"}, true, "--config", cfg)

	ids := map[string]bool{"ev": true, "fu": true}
	for id, stage := range map[string]string{"ev": "interview-evaluation", "fu": "interview-followup"} {
		if _, err := e.w.EnqueueTask(e.ctx, topics.Task{TaskID: id, Stage: stage, Tenant: "acme",
			Input: json.RawMessage(`{"prompt":"` + id + `"}`)}); err != nil {
			t.Fatal(err)
		}
	}
	got := e.collect([]string{"interview-evaluation", "interview-followup"}, ids, 20*time.Second)
	for id := range ids {
		if evs := got[id]; len(evs) == 0 || evs[0].Status != topics.StatusSucceeded {
			t.Fatalf("task %s: %+v", id, evs)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	if c := calls["ev"]; c.model != "scorer-large" || c.system != "You score interview answers from 1 to 10." {
		t.Errorf("interview-evaluation call %+v: want its own model and system prompt", c)
	}
	if c := calls["fu"]; c.model != "shared-small" || c.system != "" {
		t.Errorf("interview-followup call %+v: want the shared model and no system prompt", c)
	}
	if ev := got["ev"][0]; !strings.Contains(string(ev.Result), "ok from scorer-large") {
		t.Errorf("result %s", ev.Result)
	}
	log, _ := os.ReadFile(p.logPath)
	for _, want := range []string{`"stage":"interview-extraction"`, "simulated model"} {
		if !strings.Contains(string(log), want) {
			t.Errorf("log has no %s: the sim warning for interview-extraction is missing:\n%s", want, log)
		}
	}
	if strings.Count(string(log), "simulated model") != 1 {
		t.Errorf("want exactly one sim warning (interview-extraction):\n%s", log)
	}
}
