package handlers_test

import (
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/flightdeck-ai/flightdeck/topics"
)

// TestPausedStageStartsNothing: a task of a paused stage is not started (its entry stays
// undelivered) while the other stage keeps running; once resumed it runs.
func TestPausedStageStartsNothing(t *testing.T) {
	b := setup(t)
	ev, fu := "interview-evaluation", "interview-followup"
	if err := b.r.Client.HSet(b.ctx, b.ks.Paused(), ev, `{"by":"test","at":1}`).Err(); err != nil {
		t.Fatal(err)
	}
	b.consumer("c1", nil)
	b.enqueue(topics.Task{TaskID: "paused-1", Stage: ev, Input: simInput(1, 10)})
	b.enqueue(topics.Task{TaskID: "running-1", Stage: fu, Input: simInput(2, 10)})
	got := b.eventsFor([]string{ev, fu}, []string{"running-1"}, 10*time.Second)
	if len(got["running-1"]) == 0 {
		t.Fatal("the task of the running stage was not answered")
	}
	time.Sleep(1500 * time.Millisecond)
	if got := b.events([]string{ev}, 1, 300*time.Millisecond); len(got["paused-1"]) > 0 {
		t.Fatalf("the paused stage's task was answered: %+v", got["paused-1"])
	}
	groups, err := b.r.Client.XInfoGroups(b.ctx, b.ks.Tasks(ev)).Result()
	if err != nil {
		t.Fatal(err)
	}
	for _, g := range groups {
		if g.Name == topics.ConsumerGroup && (g.Lag != 1 || g.Pending != 0) {
			t.Fatalf("paused stage: lag %d pending %d, want the task undelivered", g.Lag, g.Pending)
		}
	}
	if n := b.runs.Load(); n != 1 {
		t.Fatalf("%d model runs while paused, want 1 (the other stage's)", n)
	}
	if err := b.r.Client.HDel(b.ctx, b.ks.Paused(), ev).Err(); err != nil {
		t.Fatal(err)
	}
	got = b.eventsFor([]string{ev}, []string{"paused-1"}, 10*time.Second)
	if evs := got["paused-1"]; len(evs) == 0 || evs[0].Status != topics.StatusSucceeded {
		t.Fatalf("after resume: %+v, want SUCCEEDED", evs)
	}
}

// TestFleetStats: two consumers' answers add up in the stage's per-minute stats hash.
func TestFleetStats(t *testing.T) {
	b := setup(t)
	ev := "interview-evaluation"
	b.consumer("c1", nil)
	b.consumer("c2", nil)
	const n = 12
	ids := make([]string, n)
	for i := range ids {
		ids[i] = "fleet-" + strconv.Itoa(i)
		b.enqueue(topics.Task{TaskID: ids[i], Stage: ev, Input: simInput(100+i, 50)})
	}
	b.eventsFor([]string{ev}, ids, 20*time.Second)
	deadline := time.Now().Add(10 * time.Second)
	for {
		var total, latencies int
		consumers := map[string]bool{}
		keys := b.r.Client.Keys(b.ctx, b.r.Prefix+":stats:"+ev+":*").Val()
		for _, k := range keys {
			for f, v := range b.r.Client.HGetAll(b.ctx, k).Val() {
				x, _ := strconv.Atoi(v)
				switch {
				case strings.HasPrefix(f, topics.StatsOutcomePrefix) && f != topics.StatsOutcomePrefix+"parked":
					total += x
				case f == topics.StatsCount:
					latencies += x
				}
			}
		}
		for _, e := range b.events([]string{ev}, n, time.Second) {
			consumers[e[0].Consumer] = true
		}
		if total == n && latencies == n && len(keys) <= 2 {
			if len(consumers) < 2 {
				t.Logf("only %v answered; the sum is still checked", consumers)
			}
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("stats: %d events, %d latencies in %d hashes, want %d", total, latencies, len(keys), n)
		}
		time.Sleep(200 * time.Millisecond)
	}
}
