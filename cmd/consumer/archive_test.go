package main_test

import (
	"context"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/flightdeck-ai/flightdeck/archive/postgres"
	"github.com/flightdeck-ai/flightdeck/internal/testkit/pgtest"
	"github.com/flightdeck-ai/flightdeck/topics"
)

// TestRedisDataLossCostsNoModelCall: two consumers with the archive finish 20 keys; Redis is
// killed and comes back empty; the consumers recover by themselves, and 20 new tasks with the
// same keys all end SUCCEEDED with the same results, answered from the archive (shared
// "archive" or as followers of such an answer) with no model call.
func TestRedisDataLossCostsNoModelCall(t *testing.T) {
	pg := pgtest.New(t)
	e := newE2E(t)
	env := []string{"REDIS_URL=" + e.url, "FLIGHTDECK_ARCHIVE_URL=" + pg.URL}
	c1 := e.startWith("a1", env, true)
	c2 := e.startWith("a2", env, true)

	// run enqueues copies tasks per key (together, so that duplicates race for the flight)
	// and returns the events by key.
	run := func(round string, copies int) map[int][]topics.Event {
		want := map[string]bool{}
		var tasks []topics.Task
		for c := range copies {
			for k := range 20 {
				id := fmt.Sprintf("%s-%d-%d", round, k, c)
				want[id] = true
				tasks = append(tasks, task(id, "interview-evaluation", k, 0))
			}
		}
		if _, err := e.w.EnqueueTasks(e.ctx, tasks); err != nil {
			t.Fatal(err)
		}
		got := e.collect([]string{"interview-evaluation"}, want, 30*time.Second)
		out := map[int][]topics.Event{}
		for c := range copies {
			for k := range 20 {
				evs := got[fmt.Sprintf("%s-%d-%d", round, k, c)]
				if len(evs) == 0 || evs[0].Status != topics.StatusSucceeded {
					t.Fatalf("%s key %d copy %d: %+v", round, k, c, evs)
				}
				out[k] = append(out[k], evs[0])
			}
		}
		return out
	}
	beforeAll := run("before", 1)
	before := map[int]topics.Event{}
	for k, evs := range beforeAll {
		before[k] = evs[0]
	}
	if n := c1.modelCalls(t) + c2.modelCalls(t); n != 20 {
		t.Fatalf("%d model calls for 20 keys", n)
	}
	// Every outcome is in the archive before Redis goes.
	store, err := postgres.Open(context.Background(), postgres.Config{URL: pg.URL, Deployment: e.prefix})
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		missing := 0
		for _, ev := range before {
			if _, ok, _ := store.Get(context.Background(), ev.RequestKey); !ok {
				missing++
			}
		}
		if missing == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d outcomes not archived", missing)
		}
	}

	e.srv.Stop()
	e.srv.Restart() // empty: no persistence
	if n, _ := e.rdb.Exists(e.ctx, e.ks.Flight(before[0].RequestKey), e.ks.Flight(before[0].RequestKey)).Result(); n != 0 {
		t.Fatalf("Redis kept the flight of key 0 (%d keys)", n)
	}
	// The consumers recover by themselves (the function library and the consumer group are
	// made again on demand).
	for deadline := time.Now().Add(20 * time.Second); !c1.ready() || !c2.ready(); time.Sleep(100 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("consumers not ready after the Redis restart")
		}
	}
	// Three tasks per key at once: one rebuilds the flight from the archive, the others
	// follow it (parked) or hit the rebuilt result.
	after := run("after", 3)
	shared := map[topics.Shared]int{}
	for k := range 20 {
		for _, a := range after[k] {
			if b := before[k]; string(a.Result) != string(b.Result) || a.RequestKey != b.RequestKey {
				t.Errorf("key %d: after the loss %s, before %s", k, a.Result, b.Result)
			}
			shared[a.Shared]++
		}
	}
	if n := c1.modelCalls(t) + c2.modelCalls(t); n != 20 {
		t.Errorf("%d model calls in all: the Redis loss cost %d", n, n-20)
	}
	if shared[topics.SharedArchive] != 20 {
		t.Errorf("events by shared %v: want exactly one archive answer per key (20)", shared)
	}
	for _, p := range []*proc{c1, c2} {
		b, _ := os.ReadFile(p.logPath)
		if strings.Contains(string(b), "DATA RACE") {
			t.Errorf("%s: data race", p.name)
		}
	}
	t.Logf("after the loss: %v", shared)
}
