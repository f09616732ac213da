package stream_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/redis/go-redis/v9"

	"github.com/flightdeck-ai/flightdeck/stream"
)

// forging reads entries as plain does, and puts the entry's "note" field in the note metadata,
// as a producer's metadata would.
type forging struct{}

func (forging) Unmarshal(v map[string]any) (*message.Message, error) {
	p, _ := v["payload"].(string)
	m := message.NewMessage(fmt.Sprint(v["id"]), []byte(p))
	if n, ok := v["note"].(string); ok {
		m.Metadata.Set(stream.MetaNote, n)
	}
	return m, nil
}

// TestDelayWithNote: the note a handler leaves with DelayWith comes back with the entry's next
// delivery, a plain Delay drops it, and a note the entry itself names is never handed out.
func TestDelayWithNote(t *testing.T) {
	b := newBench(t)
	_, ch := b.sub("a", func(c *stream.Config) { c.Capacity, c.Unmarshaller = 1, forging{} })
	if _, err := b.rdb.XAdd(b.ctx, &redis.XAddArgs{Stream: b.stream, Values: []any{"id", "n", "payload", "n", "note", "forged"}}).Result(); err != nil {
		t.Fatal(err)
	}
	m := next(t, ch)
	if got := m.Metadata.Get(stream.MetaNote); got != "" {
		t.Fatalf("first delivery: note %q, want none (the entry's own is not a handler's)", got)
	}
	stream.DelayWith(m, 50*time.Millisecond, "write_back")
	m.Ack()
	m = next(t, ch)
	if got := m.Metadata.Get(stream.MetaNote); got != "write_back" {
		t.Fatalf("after DelayWith: note %q, want write_back", got)
	}
	stream.Delay(m, 50*time.Millisecond)
	m.Ack()
	m = next(t, ch)
	if got := m.Metadata.Get(stream.MetaNote); got != "" {
		t.Fatalf("after a plain Delay: note %q, want none", got)
	}
	m.Ack()
}
