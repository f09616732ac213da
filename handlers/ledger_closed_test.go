package handlers_test

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/flightdeck-ai/flightdeck/flight"
	"github.com/flightdeck-ai/flightdeck/handlers"
	"github.com/flightdeck-ai/flightdeck/handlers/model"
	"github.com/flightdeck-ai/flightdeck/topics"
)

type gateUsageModel struct {
	keys    chan string
	release chan struct{}
}

func (m *gateUsageModel) Name() string { return "gate" }
func (m *gateUsageModel) Call(ctx context.Context, req model.Request, _ model.ProgressFunc) (json.RawMessage, error) {
	m.keys <- req.RequestKey
	<-m.release
	model.ReportUsage(ctx, model.Usage{Model: "m", PromptTokens: 10, CompletionTokens: 5})
	return json.RawMessage(`{"ok":true}`), nil
}

// TestLedgerCountsAClosedRun: the flight is cancelled while its owner's call runs, and the
// call returns before the next heartbeat: the owner's complete answers its own task CANCELLED.
// The ledger counts the call and the task this consumer answered.
func TestLedgerCountsAClosedRun(t *testing.T) {
	b := setup(t)
	const stage = "interview-evaluation"
	m := &gateUsageModel{keys: make(chan string, 1), release: make(chan struct{})}
	reg := prometheus.NewRegistry()
	stop := b.consumer("c0", func(c *handlers.Config) {
		c.Models = map[string]model.Model{"sim": m}
		c.Registry = reg
		for j := range c.Stages {
			c.Stages[j].HeartbeatInterval = c.Stages[j].Lease / 2
		}
	})
	b.enqueue(topics.Task{TaskID: "c1", Stage: stage, Input: json.RawMessage(`{"k":1}`)})
	key := <-m.keys
	coord, err := flight.NewCoordinator(flight.Config{Client: b.r.Client, Keyspace: b.ks})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := coord.Cancel(b.ctx, key, "client", flight.CancelParams{}); err != nil {
		t.Fatal(err)
	}
	close(m.release)
	got := b.eventsFor([]string{stage}, []string{"c1"}, 20*time.Second)
	if len(got["c1"]) == 0 {
		t.Fatal("no event")
	}
	if e := got["c1"][0]; e.Status != topics.StatusCancelled || e.Shared != topics.SharedOwner {
		t.Fatalf("event %s %s, want CANCELLED owner", e.Status, e.Shared)
	}
	stop()
	counts := map[string]topics.LedgerCounts{}
	mfs, _ := reg.Gather()
	for _, mf := range mfs {
		for _, mt := range mf.GetMetric() {
			addMetric(counts, mf.GetName(), mt)
		}
	}
	c := counts["acme"]
	if c.Calls != 1 || c.Tasks() != 1 {
		t.Errorf("ledger of acme: %d calls, %d tasks (%+v); want 1 call and the 1 task this consumer answered", c.Calls, c.Tasks(), c)
	}
}
