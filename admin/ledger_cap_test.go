package admin_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/flightdeck-ai/flightdeck/admin"
	"github.com/flightdeck-ai/flightdeck/internal/testkit/redistest"
	"github.com/flightdeck-ai/flightdeck/topics"
)

// TestLedgerPastTheTenantCap: a fleet of many consumers, each counting its own 100 tenants
// apart, writes 1,200 tenants into the hour's hashes. The stage's and the fleet's totals count
// every task; past 1,000 rows the least busy tenants count together under "*", the same ones
// on every read.
func TestLedgerPastTheTenantCap(t *testing.T) {
	r := redistest.New(t)
	ks := topics.Keyspace{Prefix: r.Prefix}
	ctx := context.Background()
	const stage = "interview-evaluation"
	now, err := r.Client.Time(ctx).Result()
	if err != nil {
		t.Fatal(err)
	}
	var args []any
	for i := range 1200 {
		args = append(args, topics.LedgerField(fmt.Sprintf("t%04d", i), "owner"), 1+i/600)
	}
	if err := r.Client.HSet(ctx, ks.Stats(stage, now.Unix()/60), args...).Err(); err != nil {
		t.Fatal(err)
	}
	in, err := admin.New(admin.Config{Client: r.Client, Keyspace: ks, Stages: []string{stage}})
	if err != nil {
		t.Fatal(err)
	}
	var first []admin.LedgerRow
	for range 3 {
		rep, err := in.Ledger(ctx, []string{stage}, admin.WindowHour)
		if err != nil {
			t.Fatal(err)
		}
		sl := rep.Stages[0]
		if sl.Total.Tasks != 1800 || rep.Total.Tasks != 1800 {
			t.Fatalf("stage total %d tasks, fleet total %d, want 1800", sl.Total.Tasks, rep.Total.Tasks)
		}
		rows, sum := sl.Tenants, int64(0)
		for _, r := range rows {
			sum += r.Tasks
		}
		last := rows[len(rows)-1]
		if len(rows) != 1000 || sum != 1800 || last.Tenant != topics.LedgerOther || last.Tasks != 201 || rows[0].Tenant != "t0600" {
			t.Fatalf("%d rows summing to %d, first %+v, last %+v: want 1,000 rows, the busiest first, the 201 least busy under *",
				len(rows), sum, rows[0], last)
		}
		if first == nil {
			first = rows
		} else if fmt.Sprint(first) != fmt.Sprint(rows) {
			t.Fatal("the rows changed from one read to the next")
		}
	}
}
