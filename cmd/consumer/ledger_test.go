package main_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/flightdeck-ai/flightdeck/admin"
	"github.com/flightdeck-ai/flightdeck/internal/testkit/ledgertest"
	"github.com/flightdeck-ai/flightdeck/internal/testkit/openaitest"
	"github.com/flightdeck-ai/flightdeck/topics"
)

// TestLedgerKnownMix: two stock consumers call an OpenAI-compatible server for 100 keys of
// tenant acme, each enqueued 10 times (100 owners, 900 duplicates), and for one key of tenant
// beta enqueued 3 times. Each call reports the same usage, priced by the stage file at $1 and
// $2 per million tokens. The consumers' /metrics, the dashboard's ledger and `producer stats`
// each show exactly 101 calls, the tokens the server counted, the usage of 902 calls avoided,
// and both in dollars.
func TestLedgerKnownMix(t *testing.T) {
	srv := openaitest.Start(t, openaitest.Config{CompletionTokens: 40, Latency: 300 * time.Millisecond})
	e := newE2E(t)
	e.stages = limitedStage
	cfg := e.stageConfig("prices:\n  test-model: {prompt: 1, completion: 2}\nstages:\n  " + limitedStage +
		":\n    model: openai\n    concurrency: 16\n")
	token := secret(t, "ui-read-")
	var ps []*proc
	for i := range 2 {
		ps = append(ps, e.startWith("c"+strconv.Itoa(i+1), []string{"REDIS_URL=" + e.url, "OPENAI_BASE_URL=" + srv.BaseURL(),
			"OPENAI_MODEL=test-model", "FLIGHTDECK_UI_READ_TOKEN=" + token}, true, "--config", cfg))
	}
	want := map[string]bool{}
	enqueue := func(id, tenant string, key int) {
		if _, err := e.w.EnqueueTask(e.ctx, topics.Task{TaskID: id, Stage: limitedStage, Tenant: tenant,
			Input: json.RawMessage(fmt.Sprintf(`{"prompt":"key %03d"}`, key))}); err != nil {
			t.Fatal(err)
		}
		want[id] = true
	}
	for c := range 10 {
		for k := range 100 {
			enqueue(fmt.Sprintf("a%d-%d", k, c), "acme", k)
		}
		if c < 3 {
			enqueue(fmt.Sprintf("b-%d", c), "beta", 0)
		}
	}
	got := e.collect([]string{limitedStage}, want, 60*time.Second)
	e.allSucceeded(got, want)
	requests, limited, used := srv.Stats()
	if requests != 101 || limited != 0 {
		t.Fatalf("the provider saw %d calls (%d answered 429), want 101", requests, limited)
	}
	u := *got["a0-0"][0].Usage // every call's: equal prompts, the same completion
	for _, evs := range got {
		if ev := evs[0]; ev.Shared == topics.SharedOwner && (ev.Usage == nil || *ev.Usage != u) {
			t.Fatalf("owner event %+v: usage %+v, want %+v like every call", ev, ev.Usage, u)
		}
	}
	if used != 101*u.Tokens() {
		t.Fatalf("the server counted %d tokens, the events %d each", used, u.Tokens())
	}
	nano := int64(u.PromptTokens)*1000 + int64(u.CompletionTokens)*2000
	want1 := func(calls, shared int64) topics.LedgerCounts {
		return topics.LedgerCounts{Owner: calls, Calls: calls, PromptTokens: calls * int64(u.PromptTokens),
			CompletionTokens: calls * int64(u.CompletionTokens), AvoidedPromptTokens: shared * int64(u.PromptTokens),
			AvoidedCompletionTokens: shared * int64(u.CompletionTokens), SpentNanoUSD: calls * nano, AvoidedNanoUSD: shared * nano}
	}
	wants := map[string]topics.LedgerCounts{"acme": want1(100, 900), "beta": want1(1, 2)}
	check := func(what, tenant string, c topics.LedgerCounts) {
		t.Helper()
		w := wants[tenant]
		w.Joined, w.Follower, w.Hit = c.Joined, c.Follower, c.Hit
		if c != w || c.Shared() != w.AvoidedPromptTokens/int64(u.PromptTokens) {
			t.Errorf("%s, tenant %s:\n got %+v\nwant %+v (joined, follower and hit adding up to %d)", what, tenant, c, w,
				w.AvoidedPromptTokens/int64(u.PromptTokens))
		}
	}

	// The metrics of both consumers, summed. A task is counted when its handler's script call
	// returns, a moment after its event is readable.
	var metrics map[string]topics.LedgerCounts
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(200 * time.Millisecond) {
		metrics = map[string]topics.LedgerCounts{}
		for _, p := range ps {
			ledgerSamples(metrics, p.scrape(t))
		}
		if metrics["acme"].Tasks() == 1000 && metrics["beta"].Tasks() == 3 || time.Now().After(deadline) {
			break
		}
	}
	t.Logf("acme: %d owners, %d joined, %d followers, %d hits", metrics["acme"].Owner, metrics["acme"].Joined,
		metrics["acme"].Follower, metrics["acme"].Hit)
	for tenant := range wants {
		check("/metrics", tenant, metrics[tenant])
	}

	// The fleet's ledger through the dashboard's API and producer stats, once the consumers
	// flushed (every 2 s).
	var rep admin.LedgerReport
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(200 * time.Millisecond) {
		code, body := httpGet(t, "http://"+ps[1].http+"/ui/api/ledger?window=day", "", token)
		if code != http.StatusOK || json.Unmarshal([]byte(body), &rep) != nil {
			t.Fatalf("GET /ui/api/ledger: %d %.300s", code, body)
		}
		if rep.Total.Tasks == 1003 || time.Now().After(deadline) {
			break
		}
	}
	reportRows := func(what string, rep admin.LedgerReport) {
		t.Helper()
		if len(rep.Stages) != 1 || len(rep.Stages[0].Tenants) != 2 || rep.Total.Tasks != 1003 || rep.Total.Calls != 101 {
			t.Fatalf("%s: %+v", what, rep)
		}
		for _, r := range rep.Stages[0].Tenants {
			check(what, r.Tenant, r.LedgerCounts)
		}
		if r := rep.Total; r.HitRate != 902.0/1003 || r.SpentUSD != float64(101*nano)/1e9 || r.AvoidedUSD != float64(902*nano)/1e9 {
			t.Errorf("%s: total %+v", what, r)
		}
	}
	reportRows("the dashboard's ledger of the day", rep)

	bin := producerBinary(t)
	for _, window := range []string{"hour", "day"} {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		cmd := exec.CommandContext(ctx, bin, "--prefix", e.prefix, "stats", "--window", window, "--format", "json")
		cmd.Env = producerEnv("REDIS_URL=" + e.url)
		var out, errOut bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &errOut
		err := cmd.Run()
		cancel()
		var prep admin.LedgerReport
		if err != nil || json.Unmarshal(out.Bytes(), &prep) != nil {
			t.Fatalf("producer stats --window %s: %v\n%s\n%s", window, err, out.String(), errOut.String())
		}
		reportRows("producer stats --window "+window, prep)
	}
	cmd := exec.Command(bin, "--prefix", e.prefix, "stats")
	cmd.Env = producerEnv("REDIS_URL=" + e.url)
	table, err := cmd.CombinedOutput()
	if err != nil || !strings.Contains(string(table), "acme") || !strings.Contains(string(table), "89.9%") {
		t.Errorf("producer stats as a table: %v\n%s", err, table)
	}
}

// ledgerSamples adds a consumer's flightdeck_ledger_* samples to the counts of their tenants.
func ledgerSamples(out map[string]topics.LedgerCounts, m map[string]float64) {
	for series, v := range m {
		name, labels, ok := strings.Cut(series, "{")
		if !ok || !strings.HasPrefix(name, "flightdeck_ledger_") {
			continue
		}
		l := map[string]string{}
		for _, kv := range strings.Split(strings.TrimSuffix(labels, "}"), ",") {
			k, val, _ := strings.Cut(kv, "=")
			l[k] = strings.Trim(val, `"`)
		}
		ledgertest.Add(out, name, l, v)
	}
}
