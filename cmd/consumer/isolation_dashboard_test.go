package main_test

import (
	"bufio"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/flightdeck-ai/flightdeck/flight"
	"github.com/flightdeck-ai/flightdeck/topics"
)

// rssMB reads a process's resident set size (VmRSS) in MB.
func rssMB(t *testing.T, pid int) int {
	t.Helper()
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if rest, ok := strings.CutPrefix(sc.Text(), "VmRSS:"); ok {
			kb, err := strconv.Atoi(strings.TrimSuffix(strings.TrimSpace(rest), " kB"))
			if err != nil {
				t.Fatalf("VmRSS %q: %v", rest, err)
			}
			return kb / 1024
		}
	}
	t.Fatalf("no VmRSS in /proc/%d/status", pid)
	return 0
}

// overviewStage is what the test reads of a stage in /ui/api/overview.
type overviewStage struct {
	Name     string `json:"name"`
	LastHour struct {
		Events   int64            `json:"events"`
		Outcomes map[string]int64 `json:"outcomes"`
	} `json:"lastHour"`
	ResultStreamLen int64 `json:"resultStreamLen"`
}

// TestIsolationDashboardUnderHitAmplification: a tenant stores one 40 KB result and sends
// 5,000 duplicates of its key; every answer is a result-cache hit (whose event carries the
// result as resultRef only; admin.TestOverviewUnderAmplification covers events that inline
// it). The dashboard's overview answers at once, with the right totals from the fleet's stats,
// and polling it does not grow the consumer: its reads are bounded whatever the tenant wrote.
func TestIsolationDashboardUnderHitAmplification(t *testing.T) {
	if testing.Short() {
		t.Skip("5,000 tasks")
	}
	const (
		hits       = 5000
		resultSize = 40 << 10
		maxRSSMB   = 200
	)
	e := newE2E(t)
	stage := "interview-evaluation"
	token := secret(t, "ui-read-")
	p := e.startWith("c1", []string{"REDIS_URL=" + e.url, "FLIGHTDECK_UI_READ_TOKEN=" + token}, true)

	// The stored result: a flight of the tenant's key, SUCCEEDED with 40 KB (written as an
	// owner would; the sim model cannot be told an output size).
	key, err := flight.NamespacedKey(stage, "acme", "big-report", 1)
	if err != nil {
		t.Fatal(err)
	}
	result, _ := json.Marshal(map[string]string{"report": strings.Repeat("x", resultSize)})
	d, err := e.coord.Acquire(e.ctx, flight.AcquireParams{Key: key, OwnerID: "tenant-owner", Stage: stage, Tenant: "acme",
		Start: true, Policy: flight.Policy{ResultTTL: time.Hour}})
	if err != nil || d.Owner == nil {
		t.Fatalf("acquire: %+v %v", d, err)
	}
	if _, err := e.coord.Complete(e.ctx, *d.Owner, result, time.Second); err != nil {
		t.Fatal(err)
	}
	// The duplicates.
	for start := 0; start < hits; start += 500 {
		batch := make([]topics.Task, 0, 500)
		for i := start; i < start+500; i++ {
			batch = append(batch, topics.Task{TaskID: fmt.Sprintf("dup-%05d", i), Stage: stage, Tenant: "acme",
				RequestKey: "big-report", Input: json.RawMessage(`{"question":"q","answer":"a"}`)})
		}
		if _, err := e.w.EnqueueTasks(e.ctx, batch); err != nil {
			t.Fatal(err)
		}
	}
	// Every duplicate answered, and the stats flushed.
	deadline := time.Now().Add(3 * time.Minute)
	for {
		n, _ := e.rdb.XLen(e.ctx, e.ks.Results(stage)).Result()
		answered := int64(0)
		now, _ := e.rdb.Time(e.ctx).Result()
		for m := now.Unix()/60 - 5; m <= now.Unix()/60; m++ {
			h, _ := e.rdb.HGetAll(e.ctx, e.ks.Stats(stage, m)).Result()
			for f, v := range h {
				if strings.HasPrefix(f, "o:") && f != "o:parked" {
					c, _ := strconv.ParseInt(v, 10, 64)
					answered += c
				}
			}
		}
		if n == hits && answered == hits {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("after 3 min: %d events, %d answered in the stats; want %d", n, answered, hits)
		}
		time.Sleep(200 * time.Millisecond)
	}
	last, err := e.rdb.XRevRangeN(e.ctx, e.ks.Results(stage), "+", "-", 1).Result()
	if err != nil || len(last) != 1 {
		t.Fatal(err)
	}
	payload, _ := last[0].Values[topics.FieldPayload].(string)
	if ev, err := topics.DecodeEvent([]byte(payload)); err != nil || ev.RequestKey != key || len(ev.Result) > 0 ||
		ev.ResultRef != e.ks.Flight(key) {
		t.Fatalf("the last event: %v, inline result %d bytes, key %s, ref %q; want a hit of %s carrying its 40 KB result as resultRef only",
			err, len(ev.Result), ev.RequestKey, ev.ResultRef, key)
	}

	// The consumer's RSS, sampled every 50 ms while the overview is read.
	pid := p.cmd.Process.Pid
	before := rssMB(t, pid)
	peak := make(chan int)
	stop := make(chan struct{})
	go func() {
		m := before
		tick := time.NewTicker(50 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-stop:
				peak <- m
				return
			case <-tick.C:
				if b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid)); err == nil {
					for line := range strings.Lines(string(b)) {
						if rest, ok := strings.CutPrefix(line, "VmRSS:"); ok {
							kb, _ := strconv.Atoi(strings.TrimSuffix(strings.TrimSpace(rest), " kB"))
							m = max(m, kb/1024)
						}
					}
				}
			}
		}
	}()
	var ov struct {
		Stages          []overviewStage `json:"stages"`
		FlightsByStatus map[string]int  `json:"flightsByStatus"`
	}
	ok := true
	for i := range 5 { // the page polls every second
		start := time.Now()
		code, body := httpGet(t, "http://"+p.http+"/ui/api/overview", "", token)
		if code != http.StatusOK {
			t.Errorf("GET /ui/api/overview %d under the load: %d after %v: %.300s", i+1, code,
				time.Since(start).Round(time.Millisecond), body)
			ok = false
			break
		}
		if err := json.Unmarshal([]byte(body), &ov); err != nil {
			t.Fatalf("overview: %v: %.300s", err, body)
		}
	}
	close(stop)
	most := <-peak
	t.Logf("consumer RSS %d MB before the overview reads, at most %d MB during them", before, most)
	if most > maxRSSMB {
		t.Errorf("consumer RSS %d MB while the overview was read (%d MB before), want under %d MB", most, before, maxRSSMB)
	}
	if !ok {
		t.FailNow()
	}
	var st *overviewStage
	for i := range ov.Stages {
		if ov.Stages[i].Name == stage {
			st = &ov.Stages[i]
		}
	}
	if st == nil {
		t.Fatalf("overview has no stage %s: %+v", stage, ov.Stages)
	}
	var succeeded int64
	for o, n := range st.LastHour.Outcomes {
		if strings.HasSuffix(o, "/SUCCEEDED") {
			succeeded += n
		}
	}
	if st.LastHour.Events != hits || succeeded != hits || st.ResultStreamLen != hits {
		t.Errorf("overview of %s: last hour %d events %v, result stream %d; want %d SUCCEEDED", stage,
			st.LastHour.Events, st.LastHour.Outcomes, st.ResultStreamLen, hits)
	}
	if ov.FlightsByStatus["SUCCEEDED"] != 1 {
		t.Errorf("flights by status %v, want the one SUCCEEDED flight", ov.FlightsByStatus)
	}
}
