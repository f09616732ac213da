package stream_test

import (
	"testing"
	"time"

	"github.com/flightdeck-ai/flightdeck/stream"
	"github.com/flightdeck-ai/flightdeck/topics"
)

// TestDataLossKeepsNotedEntries: an entry acknowledged elsewhere while this consumer holds it
// is dropped. When Redis loses the stream and its group (a restart without persistence), a
// delayed entry is dropped too, but one delayed with a note (a task waiting for its spooled
// outcome's write-back, which only its holder can give) is kept: the touch passes leave it
// held, and it comes back when due, with its note.
func TestDataLossKeepsNotedEntries(t *testing.T) {
	b := newBench(t)
	s, ch := b.sub("a", func(c *stream.Config) { c.Capacity = 3 })
	ids := b.add("answered", "plain", "noted")
	for range 3 {
		m := next(t, ch)
		switch string(m.Payload) {
		case "noted":
			stream.DelayWith(m, 3*time.Second, "write_back") // back after the loss below
		default:
			stream.Delay(m, time.Hour)
		}
		m.Ack()
	}
	// Acknowledged elsewhere (say by the script that answered its task): dropped.
	if err := b.rdb.XAck(b.ctx, b.stream, topics.ConsumerGroup, ids[0]).Err(); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the acknowledged entry dropped", func() bool { return s.Stats().Lost == 1 })
	if h := s.Held(b.stream); h != 2 {
		t.Fatalf("held %d, want the two unacknowledged entries", h)
	}

	// Redis loses the stream and its group.
	if err := b.rdb.Del(b.ctx, b.stream).Err(); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the plain entry dropped", func() bool { return s.Stats().Lost >= 2 })
	// Two more touch passes (both found the noted entry gone), or none left to make.
	t0 := s.Stats().Touches
	eventually(t, "two touch passes after the loss", func() bool {
		return s.Stats().Touches >= t0+2 || s.Held(b.stream) == 0
	})
	if st := s.Stats(); st.Lost != 2 || s.Held(b.stream) != 1 {
		t.Fatalf("lost %d, held %d: want the noted entry kept", st.Lost, s.Held(b.stream))
	}
	back := next(t, ch)
	if string(back.Payload) != "noted" || back.Metadata.Get(stream.MetaHow) != "delayed" ||
		back.Metadata.Get(stream.MetaNote) != "write_back" {
		t.Fatalf("got %s (%s, note %q), want the noted entry", back.Payload, back.Metadata.Get(stream.MetaHow),
			back.Metadata.Get(stream.MetaNote))
	}
	back.Ack()
}
