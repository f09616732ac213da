package handlers_test

import (
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/flightdeck-ai/flightdeck/topics"
)

// logCalls makes Redis log every command it runs for its clients (SLOWLOG), from now.
func logCalls(t *testing.T, b *bundle) {
	t.Helper()
	for _, kv := range [][2]string{{"slowlog-max-len", "100000"}, {"slowlog-log-slower-than", "0"}} {
		if err := b.r.Client.ConfigSet(b.ctx, kv[0], kv[1]).Err(); err != nil {
			t.Fatal(err)
		}
	}
	if err := b.r.Client.Do(b.ctx, "SLOWLOG", "RESET").Err(); err != nil {
		t.Fatal(err)
	}
}

// loggedFunctions counts the flight functions the logged FCALLs ran, by name without the
// library's prefix; a batch counts each call it carries.
func loggedFunctions(t *testing.T, b *bundle) map[string]int {
	t.Helper()
	logs, err := b.r.Client.SlowLogGet(b.ctx, -1).Result()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]int{}
	for _, l := range logs {
		if len(l.Args) < 2 || !strings.EqualFold(l.Args[0], "fcall") {
			continue
		}
		name := l.Args[1][strings.LastIndexByte(l.Args[1], '_')+1:]
		if name != "batch" {
			out[name]++
			continue
		}
		nk, _ := strconv.Atoi(l.Args[2])
		n, _ := strconv.Atoi(l.Args[3+nk])
		for i := range n {
			if at := 4 + nk + 3*i; at < len(l.Args) {
				out[l.Args[at]]++
			}
		}
	}
	return out
}

// TestLateDuplicateIsAHitWithoutAcquire: duplicates of a key read after this consumer
// completed the key's flight are answered from that outcome, labelled hit, each with one
// event and its entry acknowledged, by the short hit call and not by a full acquire; the
// model ran once.
func TestLateDuplicateIsAHitWithoutAcquire(t *testing.T) {
	b := setup(t)
	reg := prometheus.NewRegistry()
	b.consumer("c1", withStage(reg, 4, 50*time.Millisecond))
	ev := "interview-evaluation"
	first := dupTasks(b, "first", 7, 1, 0)
	onceEach(t, b, first, topics.StatusSucceeded)
	logCalls(t, b)
	late := dupTasks(b, "late", 7, 5, 0)
	shared := onceEach(t, b, late, topics.StatusSucceeded)
	if shared[topics.SharedHit] != 5 {
		t.Errorf("shared %v, want 5 hits", shared)
	}
	if b.runs.Load() != 1 {
		t.Errorf("model runs %d, want 1", b.runs.Load())
	}
	if calls := loggedFunctions(t, b); calls["hit"] != 5 || calls["acquire"] != 0 {
		t.Errorf("flight calls %v for the late duplicates, want 5 hit and no acquire", calls)
	}
	got := b.eventsFor([]string{ev}, late, time.Second)
	for _, id := range late {
		if e := got[id][0]; e.OwnerToken == 0 || e.RequestKey == "" || len(e.Result) == 0 {
			t.Errorf("%s: event %+v lacks the owner's token, key or inlined result", id, e)
		}
	}
	if oc := outcomes(t, reg, ev, 6); oc["hit_SUCCEEDED"] != 5 {
		t.Errorf("outcomes %v, want 5 hit_SUCCEEDED", oc)
	}
	until(t, "no entry pending", func() bool {
		return b.r.Client.XPending(b.ctx, b.ks.Tasks(ev), topics.ConsumerGroup).Val().Count == 0
	})
}

// TestLateDuplicateAfterTheRecordIsGone: a duplicate read after the completed flight's record
// was lost is not answered from the outcome the consumer kept: its call finds the record gone,
// and the duplicate acquires and runs the model again, as without the kept outcome.
func TestLateDuplicateAfterTheRecordIsGone(t *testing.T) {
	b := setup(t)
	b.consumer("c1", withStage(prometheus.NewRegistry(), 4, 50*time.Millisecond))
	first := dupTasks(b, "first", 8, 1, 0)
	onceEach(t, b, first, topics.StatusSucceeded)
	keys, err := b.r.Client.Keys(b.ctx, b.ks.Prefix+":flight:{*").Result()
	if err != nil || len(keys) == 0 {
		t.Fatalf("flight keys %v, %v", keys, err)
	}
	if err := b.r.Client.Del(b.ctx, keys...).Err(); err != nil {
		t.Fatal(err)
	}
	late := dupTasks(b, "late", 8, 1, 0)
	shared := onceEach(t, b, late, topics.StatusSucceeded)
	if shared[topics.SharedOwner] != 1 || b.runs.Load() != 2 {
		t.Errorf("shared %v, model runs %d; want the duplicate to own a new run (2 runs)", shared, b.runs.Load())
	}
}

// TestHitAnswersTheDuplicatesThatJoinedIt: in a consumer that did not run the key's flight,
// the first of a burst of duplicates acquires and is answered from the stored outcome; the
// others, joined to it or read after it, are answered from that same outcome by the short
// hit call: one acquire in all, every task one hit event, the model never called again.
func TestHitAnswersTheDuplicatesThatJoinedIt(t *testing.T) {
	b := setup(t)
	stop := b.consumer("c1", withStage(prometheus.NewRegistry(), 4, 50*time.Millisecond))
	onceEach(t, b, dupTasks(b, "first", 9, 1, 0), topics.StatusSucceeded)
	stop()
	b.consumer("c2", withStage(prometheus.NewRegistry(), 8, 2*time.Second))
	logCalls(t, b)
	late := dupTasks(b, "late", 9, 6, 0)
	shared := onceEach(t, b, late, topics.StatusSucceeded)
	if shared[topics.SharedHit] != 6 || b.runs.Load() != 1 {
		t.Errorf("shared %v, model runs %d; want 6 hits and the one run", shared, b.runs.Load())
	}
	if calls := loggedFunctions(t, b); calls["acquire"] != 1 || calls["hit"] != 5 {
		t.Errorf("flight calls %v, want 1 acquire and 5 hit", calls)
	}
	got := b.eventsFor([]string{"interview-evaluation"}, late, time.Second)
	for _, id := range late[1:] {
		if e, first := got[id][0], got[late[0]][0]; e.OwnerToken != first.OwnerToken || string(e.Result) != string(first.Result) {
			t.Errorf("%s: %+v, want the outcome of %+v", id, e, first)
		}
	}
}
