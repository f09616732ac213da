package handlers_test

import (
	"bufio"
	"fmt"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/flightdeck-ai/flightdeck/topics"
)

// recordReads watches Redis (MONITOR, on a connection of its own) and returns a function that
// stops watching and counts how the flight functions read a record meanwhile: an acquire
// reads its head (GETRANGE 0 4095), the short hit only its first line (GETRANGE 0 47).
func recordReads(t *testing.T, b *bundle) (stop func() (acquires, hits int)) {
	t.Helper()
	opt := b.r.Client.Options()
	conn, err := net.Dial("tcp", opt.Addr)
	if err != nil {
		t.Fatal(err)
	}
	rd := bufio.NewReader(conn)
	cmd := "*1\r\n$7\r\nMONITOR\r\n"
	if opt.Password != "" {
		user := opt.Username
		if user == "" {
			user = "default"
		}
		cmd = fmt.Sprintf("*3\r\n$4\r\nAUTH\r\n$%d\r\n%s\r\n$%d\r\n%s\r\n", len(user), user, len(opt.Password), opt.Password) + cmd
		if _, err := conn.Write([]byte(cmd)); err != nil {
			t.Fatal(err)
		}
		if l, err := rd.ReadString('\n'); err != nil || !strings.HasPrefix(l, "+OK") {
			t.Fatalf("AUTH: %q, %v", l, err)
		}
	} else if _, err := conn.Write([]byte(cmd)); err != nil {
		t.Fatal(err)
	}
	if l, err := rd.ReadString('\n'); err != nil || !strings.HasPrefix(l, "+OK") {
		t.Fatalf("MONITOR: %q, %v", l, err)
	}
	var mu sync.Mutex
	var a, h int
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			l, err := rd.ReadString('\n')
			if err != nil {
				return
			}
			l = strings.TrimRight(l, "\r\n")
			if !strings.Contains(strings.ToLower(l), `"getrange"`) {
				continue
			}
			mu.Lock()
			switch {
			case strings.HasSuffix(l, `"0" "4095"`):
				a++
			case strings.HasSuffix(l, `"0" "47"`):
				h++
			}
			mu.Unlock()
		}
	}()
	return func() (acquires, hits int) {
		time.Sleep(200 * time.Millisecond) // the last lines are on their way
		_ = conn.Close()
		<-done
		mu.Lock()
		defer mu.Unlock()
		return a, h
	}
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
	reads := recordReads(t, b)
	late := dupTasks(b, "late", 7, 5, 0)
	shared := onceEach(t, b, late, topics.StatusSucceeded)
	acquires, hits := reads()
	if shared[topics.SharedHit] != 5 {
		t.Errorf("shared %v, want 5 hits", shared)
	}
	if b.runs.Load() != 1 {
		t.Errorf("model runs %d, want 1", b.runs.Load())
	}
	if acquires != 0 || hits != 5 {
		t.Errorf("the late duplicates made %d acquires and %d hits, want 5 hits", acquires, hits)
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
	reads := recordReads(t, b)
	late := dupTasks(b, "late", 9, 6, 0)
	shared := onceEach(t, b, late, topics.StatusSucceeded)
	acquires, hits := reads()
	if shared[topics.SharedHit] != 6 || b.runs.Load() != 1 {
		t.Errorf("shared %v, model runs %d; want 6 hits and the one run", shared, b.runs.Load())
	}
	if acquires != 1 || hits != 5 {
		t.Errorf("%d acquires and %d hits, want 1 acquire and 5 hits", acquires, hits)
	}
	got := b.eventsFor([]string{"interview-evaluation"}, late, time.Second)
	for _, id := range late[1:] {
		if e, first := got[id][0], got[late[0]][0]; e.OwnerToken != first.OwnerToken || string(e.Result) != string(first.Result) {
			t.Errorf("%s: %+v, want the outcome of %+v", id, e, first)
		}
	}
}
