package stream_test

import (
	"errors"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/flightdeck-ai/flightdeck/stream"
	"github.com/flightdeck-ai/flightdeck/topics"
)

var errTest = errors.New("test: the handler failed")

// TestServe: Serve runs the handler on workers of its own, never more at once than the topic's
// capacity. A nil return acknowledges the entry, an error hands it out again after NackDelay,
// a handler that exits its goroutine (runtime.Goexit) has its entry handed out again too, and
// Delay keeps the entry held without a worker.
func TestServe(t *testing.T) {
	b := newBench(t)
	var mu sync.Mutex
	seen := map[string][]string{} // payload -> MetaDeliveries of each run
	var running, most atomic.Int64
	h := func(msg *message.Message) error {
		n := running.Add(1)
		defer running.Add(-1)
		for m := most.Load(); n > m && !most.CompareAndSwap(m, n); m = most.Load() {
		}
		p := string(msg.Payload)
		mu.Lock()
		seen[p] = append(seen[p], msg.Metadata.Get(stream.MetaDeliveries))
		runs := len(seen[p])
		mu.Unlock()
		time.Sleep(20 * time.Millisecond)
		switch {
		case p == "fails" && runs == 1:
			return errTest
		case p == "exits" && runs == 1:
			runtime.Goexit()
		case p == "delays" && runs == 1:
			stream.Delay(msg, 50*time.Millisecond)
		}
		return nil
	}
	cfg := stream.Config{Client: b.rdb, Consumer: "a", Unmarshaller: plain{}, Capacity: 2, NackDelay: 50 * time.Millisecond,
		TouchInterval: 100 * time.Millisecond, ClaimInterval: 100 * time.Millisecond, ClaimIdle: time.Second,
		BlockTime: 100 * time.Millisecond}
	s, err := stream.NewSubscriber(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.CloseTimeout(time.Second) })
	if err := s.Serve(b.ctx, b.stream, h); err != nil {
		t.Fatal(err)
	}
	b.add("a", "b", "c", "d", "fails", "exits", "delays")
	eventually(t, "every entry acknowledged", func() bool {
		p, err := b.rdb.XPending(b.ctx, b.stream, topics.ConsumerGroup).Result()
		mu.Lock()
		defer mu.Unlock()
		return err == nil && p.Count == 0 && len(seen) == 7
	})
	mu.Lock()
	defer mu.Unlock()
	for _, p := range []string{"a", "b", "c", "d"} {
		if len(seen[p]) != 1 {
			t.Errorf("%s ran %d times", p, len(seen[p]))
		}
	}
	for _, p := range []string{"fails", "exits", "delays"} {
		if got := seen[p]; len(got) != 2 || got[1] != "2" {
			t.Errorf("%s: runs with deliveries %v, want a second run as delivery 2", p, got)
		}
	}
	if m := most.Load(); m > 2 {
		t.Errorf("%d handlers ran at once, capacity 2", m)
	}
}
