package stream_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/flightdeck-ai/flightdeck/stream"
	"github.com/flightdeck-ai/flightdeck/topics"
)

// TestPaused: a paused subscriber reads nothing new and claims only parked entries (a dead
// consumer's are left alone), asking Paused at most once per PauseCheck; resumed, it reads and
// claims again.
func TestPaused(t *testing.T) {
	b := newBench(t)
	b.add("dead-1")
	b.readAs("dead", 1) // a dead consumer's entry, claimable after ClaimIdle
	parked := b.add("parked-1")
	b.readAs(topics.ParkingConsumer, 1)
	b.add("new-1")
	var paused atomic.Bool
	var asks atomic.Int64
	paused.Store(true)
	_, ch := b.sub("a", func(c *stream.Config) {
		c.PauseCheck = 200 * time.Millisecond
		c.Paused = func(context.Context) (bool, error) { asks.Add(1); return paused.Load(), nil }
		c.Check = func(_ context.Context, cands []stream.Candidate) []stream.Verdict {
			out := make([]stream.Verdict, len(cands))
			for i := range out {
				out[i] = stream.Claim
			}
			return out
		}
	})
	m := next(t, ch)
	if string(m.Payload) != "parked-1" || m.Metadata.Get(stream.MetaEntry) != parked[0] {
		t.Fatalf("paused: got %s (%s), want the parked entry", m.Payload, m.Metadata.Get(stream.MetaHow))
	}
	m.Ack()
	since := time.Now()
	asked := asks.Load()
	none(t, ch, 1500*time.Millisecond)
	// Answers are cached for PauseCheck, so the asks begin at least that far apart: in a window
	// of d, at most d/PauseCheck + 1.
	n := asks.Load() - asked
	if d := time.Since(since); n > int64(d/(200*time.Millisecond))+1 {
		t.Errorf("Paused asked %d times in %v, want at most one per 200 ms", n, d)
	}
	if p := b.pending(); p["dead"] != 1 {
		t.Errorf("pending %v: the paused subscriber claimed the dead consumer's entry", p)
	}
	paused.Store(false)
	got := map[string]bool{}
	for range 2 {
		m := next(t, ch)
		got[string(m.Payload)] = true
		m.Ack()
	}
	if !got["dead-1"] || !got["new-1"] {
		t.Errorf("resumed: got %v, want dead-1 and new-1", got)
	}
}
