package admin

import (
	"math"
	"testing"
	"time"

	"github.com/flightdeck-ai/flightdeck/flight"
)

func TestMinuteStatsQuantiles(t *testing.T) {
	// 98 latencies in (0.1, 0.25], 2 in (2.5, 5]: p50 inside the first bucket, p99 in the last.
	ms := minuteStats(60, map[string]string{"le:0.25": "98", "le:5": "2", "n": "100", "sumMs": "20000",
		"o:owner_SUCCEEDED": "90", "o:hit_SUCCEEDED": "10", "o:parked": "3", "le:0.1": "0", "junk": "x"})
	if ms.Total != 100 || ms.Outcomes["parked"] != 3 || ms.Count != 100 || ms.MeanMs != 200 {
		t.Errorf("counts %+v", ms)
	}
	if ms.P50Ms <= 100 || ms.P50Ms > 250 {
		t.Errorf("p50 %d ms, want in (100, 250]", ms.P50Ms)
	}
	if ms.P99Ms <= 2500 || ms.P99Ms > 5000 {
		t.Errorf("p99 %d ms, want in (2500, 5000]", ms.P99Ms)
	}
	if inf := bucketQuantile([]latencyBucket{{le: 1, n: 1}, {le: math.Inf(1), n: 9}}, 0.99); inf != 1000 {
		t.Errorf("a quantile in the +Inf bucket: %d ms, want the largest bound 1000", inf)
	}
	if empty := minuteStats(0, nil); empty.P50Ms != -1 || empty.P99Ms != -1 || empty.Total != 0 {
		t.Errorf("empty minute %+v", empty)
	}
}

func TestAttemptsFromLog(t *testing.T) {
	m := flight.Meta{Status: flight.StatusRunning, OwnerID: "c2", TaskID: "t2", OwnerToken: 9, Attempts: 2,
		ExpireAt: time.UnixMilli(200_000), Policy: flight.Policy{RunningTTL: 100 * time.Second},
		Fields: map[string]string{AttemptLogField: "1\t7\tc1\tt1\t1000\t5000\tFAILED\trate_limit\ttoo\tmany\n"}}
	a := attempts(m)
	if len(a) != 2 {
		t.Fatalf("attempts %+v", a)
	}
	if a[0] != (AttemptView{Attempt: 1, Token: 7, Owner: "c1", TaskID: "t1", StartedAt: 1000, EndedAt: 5000,
		Outcome: "FAILED", ErrorCode: "rate_limit", Error: "too many", Logged: true}) {
		t.Errorf("logged attempt %+v", a[0])
	}
	if c := a[1]; c.Token != 9 || c.Outcome != "RUNNING" || c.StartedAt != 100_000 || c.EndedAt != 0 || c.Logged {
		t.Errorf("current attempt %+v", c)
	}
	// Once the log holds the ended current attempt, it is not listed twice.
	m.Status = flight.StatusSucceeded
	m.Fields[AttemptLogField] += "2\t9\tc2\tt2\t100000\t150000\tSUCCEEDED\t\t"
	if a := attempts(m); len(a) != 2 || a[1].Outcome != "SUCCEEDED" || !a[1].Logged {
		t.Errorf("attempts %+v", a)
	}
}
