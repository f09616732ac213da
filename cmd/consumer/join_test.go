package main_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/flightdeck-ai/flightdeck/topics"
)

// TestSIGKILLWithJoinedTasks: duplicates waiting in their owner's consumer (joined, never
// parked on the flight) when that consumer is killed are claimed like any entry of a dead
// consumer: another consumer takes the flight over and answers all of them once, running the
// model once.
func TestSIGKILLWithJoinedTasks(t *testing.T) {
	e := newE2E(t)
	e.stages = "interview-evaluation"
	cfg := e.stageConfig(`stages:
  interview-evaluation:
    heartbeatInterval: 250ms
    lease: 1500ms
    joinWait: 1500ms
    concurrency: 4
`)
	a := e.startConfig("victim", cfg)
	want := map[string]bool{}
	var tasks []topics.Task
	for i := range 4 {
		tk := task(fmt.Sprintf("j%d", i), "interview-evaluation", 7, 3000)
		tasks = append(tasks, tk)
		want[tk.TaskID] = true
	}
	e.enqueue(tasks...)
	e.waitOwned([]string{keyOf(t, tasks[0])}, "victim", 10*time.Second)
	held := func(consumer string) int64 {
		p, err := e.rdb.XPendingExt(e.ctx, &redis.XPendingExtArgs{Stream: e.ks.Tasks("interview-evaluation"),
			Group: topics.ConsumerGroup, Start: "-", End: "+", Count: 100, Consumer: consumer}).Result()
		if err != nil {
			t.Fatal(err)
		}
		return int64(len(p))
	}
	deadline := time.Now().Add(2 * time.Second)
	for held("victim") != 4 && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	if v, p := held("victim"), held(topics.ParkingConsumer); v != 4 || p != 0 {
		t.Fatalf("before the kill: victim holds %d entries, %d parked; want 4 held (owner and joined), none parked", v, p)
	}
	if err := a.cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	b := e.startConfig("rescuer", cfg)
	got := e.collect([]string{"interview-evaluation"}, want, 20*time.Second)
	for id := range want {
		if evs := got[id]; len(evs) != 1 || evs[0].Status != topics.StatusSucceeded || evs[0].Consumer != "rescuer" {
			t.Errorf("%s: events %+v; want one SUCCEEDED by the rescuer", id, evs)
		}
	}
	if n := b.modelCalls(t); n != 1 {
		t.Errorf("rescuer ran the model %d times, want 1", n)
	}
}
