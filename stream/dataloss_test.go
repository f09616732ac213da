package stream_test

import (
	"testing"
	"time"

	"github.com/flightdeck-ai/flightdeck/stream"
	"github.com/flightdeck-ai/flightdeck/topics"
)

// TestDataLossKeepsHeldEntries: an entry acknowledged elsewhere while this consumer holds it
// is dropped, but an entry Redis lost with its data (the stream and its group gone, as after a
// restart without persistence) is still this consumer's: the touch passes keep it, it comes
// back when due, and StillHeld answers true. Nobody else holds it, so dropping it would leave
// its task unanswered.
func TestDataLossKeepsHeldEntries(t *testing.T) {
	b := newBench(t)
	s, ch := b.sub("a", nil)
	ids := b.add("answered", "kept")
	first, second := next(t, ch), next(t, ch)
	stream.Delay(first, time.Hour)
	stream.Delay(second, 3*time.Second) // back after the loss below, however slow the machine
	first.Ack()
	second.Ack()
	// Acknowledged elsewhere (say by the script that answered its task): dropped.
	if err := b.rdb.XAck(b.ctx, b.stream, topics.ConsumerGroup, ids[0]).Err(); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the acknowledged entry dropped", func() bool { return s.Stats().Lost == 1 })
	if h := s.Held(b.stream); h != 1 {
		t.Fatalf("held %d, want the unacknowledged entry only", h)
	}

	// Redis loses the stream and its group.
	if err := b.rdb.Del(b.ctx, b.stream).Err(); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the group created again", func() bool {
		g, err := b.rdb.XInfoGroups(b.ctx, b.stream).Result()
		return err == nil && len(g) == 1
	})
	// Two more touch passes (both found the entry gone from the recreated group), or none
	// left to make: the entry was dropped.
	t0 := s.Stats().Touches
	eventually(t, "two touch passes after the loss", func() bool {
		return s.Stats().Touches >= t0+2 || s.Held(b.stream) == 0
	})
	if st := s.Stats(); st.Lost != 1 || s.Held(b.stream) != 1 {
		t.Fatalf("lost %d, held %d: the entry Redis lost was dropped", st.Lost, s.Held(b.stream))
	}

	// It comes back when due, and is still this consumer's.
	back := next(t, ch)
	if string(back.Payload) != "kept" || back.Metadata.Get(stream.MetaHow) != "delayed" {
		t.Fatalf("got %s (%s), want the delayed entry", back.Payload, back.Metadata.Get(stream.MetaHow))
	}
	held, err := stream.StillHeld(b.ctx, back)
	if err != nil || !held {
		t.Errorf("StillHeld of the entry Redis lost: %v, %v; want held", held, err)
	}
	back.Ack()
}
