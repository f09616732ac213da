package handlers_test

import (
	"context"
	"encoding/json"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/flightdeck-ai/flightdeck/admin"
	"github.com/flightdeck-ai/flightdeck/handlers"
	"github.com/flightdeck-ai/flightdeck/handlers/model"
	"github.com/flightdeck-ai/flightdeck/internal/testkit/ledgertest"
	"github.com/flightdeck-ai/flightdeck/topics"
)

// usageModel answers after a pause and reports a fixed usage for every call.
type usageModel struct {
	calls atomic.Int64
	pause time.Duration
	usage model.Usage
}

func (m *usageModel) Name() string { return "usage" }
func (m *usageModel) Call(ctx context.Context, req model.Request, _ model.ProgressFunc) (json.RawMessage, error) {
	m.calls.Add(1)
	select {
	case <-time.After(m.pause):
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	model.ReportUsage(ctx, m.usage)
	return json.RawMessage(`{"ok":true}`), nil
}

// TestLedgerCountsAKnownMix: 100 keys of tenant acme with 10 tasks each, on two consumers, and
// a key of tenant beta with 5: 101 owners and 904 duplicates answered by joining, following or
// hitting. Every call reports 100 prompt and 20 completion tokens of a model priced at $1 and
// $2 per million. The consumers' metrics and the fleet's ledger in Redis (the dashboard's and
// producer stats' read) count exactly that: the paths add up to the tasks, one call per
// owner, the tokens of 101 calls spent and of 904 avoided, and their prices.
func TestLedgerCountsAKnownMix(t *testing.T) {
	b := setup(t)
	const stage = "interview-evaluation"
	m := &usageModel{pause: 150 * time.Millisecond, usage: model.Usage{Model: "gpt-test-2025-01-01", PromptTokens: 100, CompletionTokens: 20}}
	prices := handlers.Prices{"gpt-test": {Prompt: 1, Completion: 2}, "gpt": {Prompt: 50, Completion: 50}}
	regs := []*prometheus.Registry{prometheus.NewRegistry(), prometheus.NewRegistry()}
	stops := make([]func(), 2)
	for i := range 2 {
		stops[i] = b.consumer(fmt.Sprintf("c%d", i), func(c *handlers.Config) {
			c.Models = map[string]model.Model{"sim": m}
			c.Registry = regs[i]
			for j := range c.Stages {
				c.Stages[j].Prices = prices
			}
		})
	}
	var ids []string
	enq := func(id, tenant string, k int) {
		b.enqueue(topics.Task{TaskID: id, Stage: stage, Tenant: tenant, Input: json.RawMessage(fmt.Sprintf(`{"k":%d}`, k))})
		ids = append(ids, id)
	}
	// Seven copies of every key at once (owners, joined, parked followers), three more once
	// the first ones finished (hits).
	for c := range 7 {
		for k := range 100 {
			enq(fmt.Sprintf("a%d-%d", k, c), "acme", k)
		}
	}
	for c := range 3 {
		enq(fmt.Sprintf("b-%d", c), "beta", 0)
	}
	b.eventsFor([]string{stage}, ids, 60*time.Second)
	for c := 7; c < 10; c++ {
		for k := range 100 {
			enq(fmt.Sprintf("a%d-%d", k, c), "acme", k)
		}
	}
	for c := 3; c < 5; c++ {
		enq(fmt.Sprintf("b-%d", c), "beta", 0)
	}
	got := b.eventsFor([]string{stage}, ids, 60*time.Second)
	if len(got) != 1005 {
		t.Fatalf("%d of 1005 tasks answered", len(got))
	}
	if n := m.calls.Load(); n != 101 {
		t.Fatalf("%d model calls, want 101", n)
	}
	const callNano = 100*1000 + 20*2000 // $1 and $2 per million tokens, in nano-dollars
	want := map[string]topics.LedgerCounts{
		"acme": {Owner: 100, Calls: 100, PromptTokens: 100 * 100, CompletionTokens: 100 * 20,
			AvoidedPromptTokens: 900 * 100, AvoidedCompletionTokens: 900 * 20, SpentNanoUSD: 100 * callNano, AvoidedNanoUSD: 900 * callNano},
		"beta": {Owner: 1, Calls: 1, PromptTokens: 100, CompletionTokens: 20,
			AvoidedPromptTokens: 4 * 100, AvoidedCompletionTokens: 4 * 20, SpentNanoUSD: callNano, AvoidedNanoUSD: 4 * callNano},
	}
	shared := map[string]int64{"acme": 900, "beta": 4}
	check := func(what, tenant string, c topics.LedgerCounts) {
		t.Helper()
		if c.Shared() != shared[tenant] || c.Hit == 0 && tenant == "acme" {
			t.Errorf("%s %s: %d answered without a call (joined %d, follower %d, hit %d, archive %d), want %d with some hits",
				what, tenant, c.Shared(), c.Joined, c.Follower, c.Hit, c.Archive, shared[tenant])
		}
		w := want[tenant]
		w.Joined, w.Follower, w.Hit, w.Archive = c.Joined, c.Follower, c.Hit, c.Archive
		if c != w {
			t.Errorf("%s %s:\n got %+v\nwant %+v", what, tenant, c, w)
		}
	}

	// The consumers' metrics, summed.
	metrics := map[string]topics.LedgerCounts{}
	for _, reg := range regs {
		mfs, err := reg.Gather()
		if err != nil {
			t.Fatal(err)
		}
		for _, mf := range mfs {
			for _, mt := range mf.GetMetric() {
				addMetric(metrics, mf.GetName(), mt)
			}
		}
	}
	for _, tenant := range []string{"acme", "beta"} {
		c := metrics[tenant]
		t.Logf("%s: owner %d, joined %d, follower %d, hit %d", tenant, c.Owner, c.Joined, c.Follower, c.Hit)
		check("metrics", tenant, c)
	}

	// The fleet's ledger, as the dashboard and producer stats read it, after the consumers'
	// last flush.
	for _, stop := range stops {
		stop()
	}
	in, err := admin.New(admin.Config{Client: b.r.Client, Keyspace: b.ks, Stages: []string{stage}})
	if err != nil {
		t.Fatal(err)
	}
	for _, window := range []string{admin.WindowHour, admin.WindowDay} {
		rep, err := in.Ledger(b.ctx, []string{stage}, window)
		if err != nil {
			t.Fatal(err)
		}
		if len(rep.Stages) != 1 || len(rep.Stages[0].Tenants) != 2 {
			t.Fatalf("%s: %+v", window, rep)
		}
		for _, r := range rep.Stages[0].Tenants {
			check(window, r.Tenant, r.LedgerCounts)
		}
		if tot := rep.Total; tot.Tasks != 1005 || tot.Shared != 904 || tot.Calls != 101 || tot.HitRate != 904.0/1005 ||
			tot.SpentUSD != 101*callNano/1e9 {
			t.Errorf("%s total: %+v", window, tot)
		}
	}
}

// addMetric adds a flightdeck_ledger_* sample to the counts of its tenant.
func addMetric(out map[string]topics.LedgerCounts, name string, m *dto.Metric) {
	labels := map[string]string{}
	for _, l := range m.GetLabel() {
		labels[l.GetName()] = l.GetValue()
	}
	ledgertest.Add(out, name, labels, m.GetCounter().GetValue())
}
