package main_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/flightdeck-ai/flightdeck/client"
	"github.com/flightdeck-ai/flightdeck/topics"
)

// BenchmarkEnqueueAndWait compares one task's enqueue and wait for its terminal event through
// the HTTP API (POST ?wait=) with the Go client's Enqueue and Await, against a private
// redis-server and a stock consumer on the sim model (no latency). Each task has an input of
// its own, so each runs the model. serial measures latency (ns/op is one task's round trip);
// parallel-16 keeps 16 tasks in flight and measures throughput. Both report tasks/s and the
// 50th and 99th percentile latencies.
func BenchmarkEnqueueAndWait(b *testing.B) {
	f := newFleet(b)
	f.consumer()
	_, base := f.gateway()
	cl, err := client.New(client.Config{Client: f.rdb, Keyspace: topics.Keyspace{Prefix: f.prefix}})
	if err != nil {
		b.Fatal(err)
	}
	hc := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 64}}
	var seq atomic.Int64
	input := func() string { return fmt.Sprintf(`{"answer":"bench %d %d"}`, time.Now().UnixNano(), seq.Add(1)) }
	viaHTTP := func(ctx context.Context) error {
		req, _ := http.NewRequestWithContext(ctx, "POST", base+"/v1/stages/"+stage+"/tasks?wait=30s",
			strings.NewReader(`{"input":`+input()+`}`))
		req.Header.Set("Authorization", "Bearer "+acmeToken)
		req.Header.Set("Content-Type", "application/json")
		res, err := hc.Do(req)
		if err != nil {
			return err
		}
		defer res.Body.Close()
		var d struct{ Event topics.Event }
		if err := json.NewDecoder(res.Body).Decode(&d); err != nil {
			return err
		}
		_, _ = io.Copy(io.Discard, res.Body)
		if res.StatusCode != http.StatusOK || d.Event.Status != topics.StatusSucceeded {
			return fmt.Errorf("POST: %d, event %s", res.StatusCode, d.Event.Status)
		}
		return nil
	}
	viaClient := func(ctx context.Context) error {
		rc, err := cl.Enqueue(ctx, topics.Task{Stage: stage, Tenant: "acme", Input: json.RawMessage(input())})
		if err != nil {
			return err
		}
		ev, err := cl.Await(ctx, rc)
		if err == nil && ev.Status != topics.StatusSucceeded {
			err = fmt.Errorf("event %s", ev.Status)
		}
		return err
	}
	for _, par := range []int{1, 16} {
		name := "serial"
		if par > 1 {
			name = fmt.Sprintf("parallel-%d", par)
		}
		for _, api := range []struct {
			name string
			op   func(context.Context) error
		}{{"http", viaHTTP}, {"client", viaClient}} {
			b.Run(name+"/"+api.name, func(b *testing.B) { measure(b, par, api.op) })
		}
	}
}

// measure runs op b.N times, par at once, and reports tasks/s and latency percentiles.
func measure(b *testing.B, par int, op func(context.Context) error) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	var (
		mu    sync.Mutex
		lat   = make([]time.Duration, 0, b.N)
		next  atomic.Int64
		wg    sync.WaitGroup
		first error
	)
	b.ResetTimer()
	start := time.Now()
	for range par {
		wg.Go(func() {
			for next.Add(1) <= int64(b.N) {
				t0 := time.Now()
				err := op(ctx)
				d := time.Since(t0)
				mu.Lock()
				lat = append(lat, d)
				if err != nil && first == nil {
					first = err
				}
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	took := time.Since(start)
	b.StopTimer()
	if first != nil {
		b.Fatal(first)
	}
	slices.Sort(lat)
	b.ReportMetric(float64(b.N)/took.Seconds(), "tasks/s")
	b.ReportMetric(float64(lat[len(lat)/2].Microseconds())/1000, "p50-ms")
	b.ReportMetric(float64(lat[len(lat)*99/100].Microseconds())/1000, "p99-ms")
}
