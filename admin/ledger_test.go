package admin_test

import (
	"context"
	"net/http"
	"strconv"
	"testing"
	"time"

	"github.com/flightdeck-ai/flightdeck/admin"
	"github.com/flightdeck-ai/flightdeck/topics"
)

// TestAPILedger: the ledger sums the consumers' counts of the current minute with the earlier
// minutes of the hour, and the hours of the day; fields it cannot read (foreign names, text,
// negative counts) count nothing; a window other than hour or day is a 400, an unknown stage
// a 404.
func TestAPILedger(t *testing.T) {
	p := startPipeline(t, []string{"interview-evaluation"}, "node-a")
	const stage = "interview-evaluation"
	ctx := context.Background()
	for i := range 4 {
		p.enqueue(topics.Task{TaskID: "l-" + strconv.Itoa(i), Tenant: "acme",
			Input: input(map[string]any{"answer": "same", "sim": map[string]any{"latencyMs": 20}})})
	}
	eventually(t, 20*time.Second, "the events", func() bool { return len(p.events()) == 4 })
	now, err := p.r.Client.Time(ctx).Result()
	if err != nil {
		t.Fatal(err)
	}
	// What earlier minutes and hours, and anyone who may write to Redis, left.
	minute, hour := now.Unix()/60, now.Unix()/3600
	rdb := p.r.Client
	rdb.HSet(ctx, p.ks.Stats(stage, minute-30), topics.LedgerField("acme", "hit"), 6, topics.LedgerField("acme", "calls"), 2,
		topics.LedgerField("beta", "owner"), 1, topics.LedgerField("beta", "spentNanoUSD"), 2500000,
		topics.LedgerField("acme", "nope"), 9, topics.LedgerField("acme", "owner"), "x", topics.LedgerField("beta", "hit"), -5,
		"l:broken", 1)
	rdb.HSet(ctx, p.ks.Stats(stage, minute-61), topics.LedgerField("acme", "hit"), 1000) // past the hour
	rdb.HSet(ctx, p.ks.StatsHour(stage, hour-5), topics.LedgerField("acme", "hit"), 100)
	rdb.HSet(ctx, p.ks.StatsHour(stage, hour-24), topics.LedgerField("acme", "hit"), 1000) // past the day

	var rep admin.LedgerReport
	eventually(t, 10*time.Second, "the consumer's ledger flush", func() bool {
		if code := p.get("ledger?stage="+stage, &rep); code != http.StatusOK {
			t.Fatalf("GET ledger: %d", code)
		}
		return len(rep.Stages) == 1 && rep.Stages[0].Total.Tasks == 4+6+1
	})
	acme, beta := rep.Stages[0].Tenants[0], rep.Stages[0].Tenants[1]
	if rep.Window != admin.WindowHour || acme.Tenant != "acme" || beta.Tenant != "beta" {
		t.Fatalf("ledger: %+v", rep)
	}
	if acme.Owner != 1 || acme.Owner+acme.Joined+acme.Follower != 4 || acme.Hit != 6 || acme.Calls != 3 || acme.Shared != 9 ||
		acme.HitRate != 9.0/10 {
		t.Errorf("acme: %+v", acme)
	}
	if beta.Owner != 1 || beta.Hit != 0 || beta.SpentUSD != 0.0025 || beta.Tasks != 1 {
		t.Errorf("beta: %+v", beta)
	}
	if code := p.get("ledger?window=day", &rep); code != http.StatusOK {
		t.Fatalf("GET ledger of the day: %d", code)
	}
	// The day holds the current hour's flushes (the consumer's four tasks) and hour-5.
	if a := rep.Stages[0].Tenants[0]; rep.Window != admin.WindowDay || a.Tenant != "acme" || a.Hit != 100 || a.Tasks != 104 {
		t.Errorf("day: %+v", rep.Stages[0])
	}
	for path, want := range map[string]int{"ledger?window=week": http.StatusBadRequest, "ledger?stage=nope": http.StatusNotFound} {
		if code := p.get(path, nil); code != want {
			t.Errorf("GET %s: %d, want %d", path, code, want)
		}
	}
}
