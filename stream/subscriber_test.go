package stream_test

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/redis/go-redis/v9"

	"github.com/flightdeck-ai/flightdeck/internal/testkit/redistest"
	"github.com/flightdeck-ai/flightdeck/stream"
	"github.com/flightdeck-ai/flightdeck/topics"
)

// plain reads entries written as {payload: ...}.
type plain struct{}

func (plain) Unmarshal(v map[string]any) (*message.Message, error) {
	p, _ := v["payload"].(string)
	return message.NewMessage(fmt.Sprint(v["id"]), []byte(p)), nil
}

type bench struct {
	t      *testing.T
	ctx    context.Context
	rdb    *redis.Client
	stream string
}

func newBench(t *testing.T) *bench {
	r := redistest.New(t)
	return &bench{t: t, ctx: context.Background(), rdb: r.Client, stream: r.Prefix + ":tasks:s"}
}

func (b *bench) add(payloads ...string) []string {
	b.t.Helper()
	var ids []string
	for _, p := range payloads {
		id, err := b.rdb.XAdd(b.ctx, &redis.XAddArgs{Stream: b.stream, Values: []any{"id", p, "payload", p}}).Result()
		if err != nil {
			b.t.Fatal(err)
		}
		ids = append(ids, id)
	}
	return ids
}

// readAs delivers n new entries to consumer name (a process that then dies: nobody touches them).
func (b *bench) readAs(name string, n int) {
	b.t.Helper()
	b.rdb.XGroupCreateMkStream(b.ctx, b.stream, topics.ConsumerGroup, "0")
	res, err := b.rdb.XReadGroup(b.ctx, &redis.XReadGroupArgs{Group: topics.ConsumerGroup, Consumer: name,
		Streams: []string{b.stream, ">"}, Count: int64(n), Block: -1}).Result()
	if err != nil || len(res[0].Messages) != n {
		b.t.Fatalf("read as %s: %v %v", name, res, err)
	}
}

func (b *bench) pending() map[string]int64 {
	b.t.Helper()
	p, err := b.rdb.XPending(b.ctx, b.stream, topics.ConsumerGroup).Result()
	if err != nil {
		b.t.Fatal(err)
	}
	return p.Consumers
}

func (b *bench) sub(name string, mod func(*stream.Config)) (*stream.Subscriber, <-chan *message.Message) {
	b.t.Helper()
	cfg := stream.Config{Client: b.rdb, Consumer: name, Unmarshaller: plain{}, Capacity: 2,
		TouchInterval: 100 * time.Millisecond, ClaimInterval: 100 * time.Millisecond,
		ClaimIdle: 500 * time.Millisecond, ParkCheck: 300 * time.Millisecond, BlockTime: 100 * time.Millisecond}
	if mod != nil {
		mod(&cfg)
	}
	s, err := stream.NewSubscriber(cfg)
	if err != nil {
		b.t.Fatal(err)
	}
	ch, err := s.Subscribe(b.ctx, b.stream)
	if err != nil {
		b.t.Fatal(err)
	}
	b.t.Cleanup(func() { _ = s.CloseTimeout(time.Second) })
	return s, ch
}

// eventTimeout bounds the wait for something the code must do (hand a message out, claim an
// entry, reach a state). It is no margin: the assertion is that it happens, so it is generous,
// for a loaded machine.
const eventTimeout = 15 * time.Second

// eventually polls cond until it holds, failing the test after eventTimeout.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(eventTimeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("not within %v: %s", eventTimeout, what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// idleFor reports whether consumer holds an entry nobody touched for at least d (by Redis's
// clock, which the claim loops judge by too).
func (b *bench) idleFor(consumer string, d time.Duration) bool {
	b.t.Helper()
	p, err := b.rdb.XPendingExt(b.ctx, &redis.XPendingExtArgs{Stream: b.stream, Group: topics.ConsumerGroup,
		Idle: d, Start: "-", End: "+", Count: 1, Consumer: consumer}).Result()
	if err != nil {
		b.t.Fatal(err)
	}
	return len(p) > 0
}

// claimPasses waits until s has completed n more claim passes than it had when called: the
// n-th of them began after the call.
func claimPasses(t *testing.T, s *stream.Subscriber, n int64) {
	t.Helper()
	p0 := s.Stats().Passes
	eventually(t, fmt.Sprintf("%d claim passes", n), func() bool { return s.Stats().Passes >= p0+n })
}

func next(t *testing.T, ch <-chan *message.Message) *message.Message {
	t.Helper()
	select {
	case m := <-ch:
		return m
	case <-time.After(eventTimeout):
		t.Fatalf("no message within %v", eventTimeout)
		return nil
	}
}

func none(t *testing.T, ch <-chan *message.Message, d time.Duration) {
	t.Helper()
	select {
	case m := <-ch:
		t.Fatalf("unexpected message %s (%s)", m.Payload, m.Metadata.Get(stream.MetaHow))
	case <-time.After(d):
	}
}

// TestNoReadAhead: a topic reads only what its free handlers can start; a busy one leaves the
// rest in the stream for the others.
func TestNoReadAhead(t *testing.T) {
	b := newBench(t)
	_, ch := b.sub("a", func(c *stream.Config) { c.Capacity = 1 })
	b.add("1", "2", "3")
	first := next(t, ch)
	none(t, ch, 300*time.Millisecond)
	if p := b.pending(); p["a"] != 1 {
		t.Errorf("pending %v: a busy handler's consumer holds more than the entry it runs", p)
	}
	// Another consumer with a free handler gets the next entry at once.
	_, ch2 := b.sub("b", func(c *stream.Config) { c.Capacity = 1 })
	if m := next(t, ch2); string(m.Payload) != "2" {
		t.Errorf("b got %s", m.Payload)
	}
	first.Ack()
	if m := next(t, ch); string(m.Payload) != "3" {
		t.Errorf("a got %s", m.Payload)
	}
	eventually(t, "after the ack a holds one entry", func() bool { return b.pending()["a"] == 1 })
}

// TestRestartUnderSameName: a consumer restarted under its name picks up its own pending
// entries first, before new ones.
func TestRestartUnderSameName(t *testing.T) {
	b := newBench(t)
	b.add("old-1", "old-2")
	b.readAs("host-1", 2) // then host-1 died
	b.add("new")
	_, ch := b.sub("host-1", func(c *stream.Config) { c.Capacity = 3; c.ClaimIdle = time.Hour; c.ParkCheck = time.Hour })
	for _, want := range []string{"old-1", "old-2", "new"} {
		m := next(t, ch)
		if string(m.Payload) != want {
			t.Errorf("got %s (%s), want %s", m.Payload, m.Metadata.Get(stream.MetaHow), want)
		}
		m.Ack()
	}
}

// TestClaimBehindLiveEntries: a dead consumer's entry is found by the first claim pass that
// looks once it has been idle for ClaimIdle, while 200 older entries are held (and touched) by
// a live consumer, and claimed; the live entries are not.
func TestClaimBehindLiveEntries(t *testing.T) {
	b := newBench(t)
	many := make([]string, 200)
	for i := range many {
		many[i] = fmt.Sprint("live-", i)
	}
	b.add(many...)
	live, liveCh := b.sub("live", func(c *stream.Config) { c.Capacity = 200 })
	for range many {
		next(t, liveCh) // held, never acknowledged: a live, busy owner
	}
	b.add("orphan")
	b.readAs("dead", 1)
	// The rescuer's ClaimIdle leaves the live consumer (touching every 100 ms) a wide margin, so
	// that a loaded machine does not make its entries look abandoned. Its small ClaimBatch would
	// make a scan that pages through the live entries (windows from "0", as watermill's) reach
	// the orphan once in 41 passes, long after the first pass that must find it.
	const claimIdle = 2 * time.Second
	var (
		rescuer atomic.Pointer[stream.Subscriber]
		started = make(chan struct{})
		foundIn atomic.Int64 // the rescuer's claim pass that first listed the orphan
	)
	s, ch := b.sub("rescuer", func(c *stream.Config) {
		c.ClaimIdle = claimIdle
		c.ClaimBatch = 5
		c.Check = func(_ context.Context, cands []stream.Candidate) []stream.Verdict {
			<-started
			out := make([]stream.Verdict, len(cands))
			for i, cd := range cands {
				if cd.Consumer == "dead" {
					foundIn.CompareAndSwap(0, rescuer.Load().Stats().Passes+1)
				}
				if !cd.Parked {
					out[i] = stream.Claim
				}
			}
			return out
		}
	})
	rescuer.Store(s)
	close(started)
	// Passes that begin once the orphan has been idle for ClaimIdle must list it: the second
	// pass completed after this point began after it.
	var lookedBy int64
	eventually(t, "the orphan idle for ClaimIdle, or found", func() bool {
		if foundIn.Load() != 0 {
			return true // found before this test saw it idle: in time
		}
		if b.idleFor("dead", claimIdle) {
			lookedBy = s.Stats().Passes + 2
			return true
		}
		return false
	})
	m := next(t, ch)
	if string(m.Payload) != "orphan" || m.Metadata.Get(stream.MetaHow) != "claimed" {
		t.Fatalf("got %s (%s)", m.Payload, m.Metadata.Get(stream.MetaHow))
	}
	if lookedBy != 0 && foundIn.Load() > lookedBy {
		t.Errorf("the orphan was first listed by claim pass %d; pass %d began after it was idle for ClaimIdle",
			foundIn.Load(), lookedBy)
	}
	none(t, ch, 700*time.Millisecond) // the live consumer's touched entries are never claimed
	if p := b.pending(); p["live"] != 200 || live.Held(b.stream) != 200 {
		t.Errorf("pending %v", p)
	}
}

// TestClaimWhileBusy: a dead consumer's entry is found while every handler is busy and handed
// over the moment one is free, before any new entry.
func TestClaimWhileBusy(t *testing.T) {
	b := newBench(t)
	s, ch := b.sub("busy", func(c *stream.Config) { c.Capacity = 1 })
	b.add("long")
	long := next(t, ch)
	b.add("orphan")
	b.readAs("dead", 1)
	b.add("later")
	// The orphan becomes a candidate: a claim pass that began once it had been idle for
	// ClaimIdle listed it, while the only handler was busy.
	eventually(t, "the orphan idle for ClaimIdle", func() bool { return b.idleFor("dead", 500*time.Millisecond) })
	claimPasses(t, s, 2)
	long.Ack()
	if m := next(t, ch); string(m.Payload) != "orphan" {
		t.Errorf("first after the free slot: %s (%s), want the orphan", m.Payload, m.Metadata.Get(stream.MetaHow))
	}
}

// TestDelayKeepsCustody: a delayed message frees its handler, stays pending under this
// consumer (touched, so nobody claims it) and comes back after the delay.
func TestDelayKeepsCustody(t *testing.T) {
	b := newBench(t)
	s, ch := b.sub("a", func(c *stream.Config) { c.Capacity = 1 })
	b.add("wait", "meanwhile")
	m := next(t, ch)
	stream.Delay(m, time.Hour) // not due within the test: the freed handler must take the next entry
	m.Ack()
	got := next(t, ch)
	if string(got.Payload) != "meanwhile" {
		t.Fatalf("the freed handler got %s (%s), want the next entry", got.Payload, got.Metadata.Get(stream.MetaHow))
	}
	// b never claims the delayed entry: a touches it every 100 ms, so it never looks idle for
	// b's ClaimIdle (1 s, a wide margin on a loaded machine). The window outlasts that ClaimIdle
	// and a few claim passes, so an entry a did not touch would be claimed in it.
	_, other := b.sub("b", func(c *stream.Config) { c.ClaimIdle = time.Second })
	none(t, other, 1500*time.Millisecond)
	if p := b.pending(); p["a"] != 2 || s.Held(b.stream) != 2 {
		t.Errorf("pending %v, held %d: a keeps both entries", p, s.Held(b.stream))
	}
	// Delayed briefly, a message comes back from custody once due.
	delayed := time.Now()
	stream.Delay(got, 200*time.Millisecond)
	got.Ack()
	back := next(t, ch)
	if string(back.Payload) != "meanwhile" || back.Metadata.Get(stream.MetaHow) != "delayed" ||
		back.Metadata.Get(stream.MetaDeliveries) != "2" {
		t.Errorf("got %s (%s, deliveries %s)", back.Payload, back.Metadata.Get(stream.MetaHow),
			back.Metadata.Get(stream.MetaDeliveries))
	}
	// Delay keeps the due time in Unix milliseconds: it may round the delay down by up to 1 ms.
	if took := time.Since(delayed); took < 199*time.Millisecond {
		t.Errorf("back after %v, before its delay", took)
	}
	back.Ack()
	if st := s.Stats(); st.Delayed != 2 || st.Claimed != 0 {
		t.Errorf("stats %+v", st)
	}
}

// TestParkedEntriesAreChecked: a parked entry is left alone while Check says Keep, and handed
// to a handler once Check says Claim (its flight ended or vanished).
func TestParkedEntriesAreChecked(t *testing.T) {
	b := newBench(t)
	var ended atomic.Bool
	s, ch := b.sub("a", func(c *stream.Config) {
		c.Check = func(_ context.Context, cands []stream.Candidate) []stream.Verdict {
			out := make([]stream.Verdict, len(cands))
			for i, cd := range cands {
				switch {
				case !cd.Parked || cd.Values["payload"] != "parked":
					out[i] = stream.Skip
				case ended.Load():
					out[i] = stream.Claim
				default:
					out[i] = stream.Keep
				}
			}
			return out
		}
	})
	b.add("parked")
	m := next(t, ch)
	id := m.Metadata.Get(stream.MetaEntry)
	if err := b.rdb.XClaim(b.ctx, &redis.XClaimArgs{Stream: b.stream, Group: topics.ConsumerGroup,
		Consumer: topics.ParkingConsumer, Messages: []string{id}}).Err(); err != nil {
		t.Fatal(err)
	}
	stream.Park(m)
	m.Ack()
	none(t, ch, 1200*time.Millisecond)
	// Checked (every ParkCheck) and kept, more than once: it stays with the parking consumer.
	eventually(t, "the parked entry checked and kept twice", func() bool { return s.Stats().Kept >= 2 })
	if p := b.pending(); p[topics.ParkingConsumer] != 1 {
		t.Fatalf("pending %v: a kept entry left the parking consumer", p)
	}
	ended.Store(true)
	back := next(t, ch)
	if string(back.Payload) != "parked" || back.Metadata.Get(stream.MetaHow) != "claimed" {
		t.Errorf("got %s (%s)", back.Payload, back.Metadata.Get(stream.MetaHow))
	}
	back.Ack()
	if st := s.Stats(); st.Unparked != 1 {
		t.Errorf("stats %+v, want one entry unparked", st)
	}
}

// TestCloseHandsOver: on Close the entries a consumer still holds look idle for long, so the
// others claim them at once rather than after the lease. A touch pass in flight or due while
// Close hands over must not make them look fresh again: each round's consumer touches every
// millisecond.
func TestCloseHandsOver(t *testing.T) {
	b := newBench(t)
	base := b.stream
	for i := range 10 {
		b.stream = fmt.Sprint(base, "-", i)
		s, ch := b.sub("leaving", func(c *stream.Config) { c.ClaimIdle = time.Minute; c.TouchInterval = time.Millisecond })
		b.add("delayed")
		m := next(t, ch)
		stream.Delay(m, time.Hour)
		m.Ack()
		eventually(t, "the delay settled", func() bool { return s.Stats().Delayed == 1 })
		if err := s.CloseTimeout(time.Second); err != nil {
			t.Fatal(err)
		}
		// Closed, the subscriber touches nothing any more: the entry looks idle for long, or a
		// touch undid the hand-over.
		if !b.idleFor("leaving", time.Hour) {
			t.Errorf("round %d: after Close the entry does not look handed over (pending %v)", i, b.pending())
		}
		_, ch2 := b.sub("peer", func(c *stream.Config) { c.ClaimIdle = time.Minute; c.TouchInterval = time.Second })
		got := next(t, ch2)
		if string(got.Payload) != "delayed" || got.Metadata.Get(stream.MetaHow) != "claimed" {
			t.Errorf("round %d: peer got %s (%s)", i, got.Payload, got.Metadata.Get(stream.MetaHow))
		}
		got.Ack()
	}
}

// TestReleaseHandsOver: a released entry looks idle for long at once, so that another consumer
// claims it rather than after the lease, even while the consumer touches its other entries
// (here every millisecond).
func TestReleaseHandsOver(t *testing.T) {
	b := newBench(t)
	const n = 20
	s, ch := b.sub("leaving", func(c *stream.Config) {
		c.Capacity = n
		c.ClaimIdle = time.Minute
		c.TouchInterval = time.Millisecond
	})
	for i := range n {
		b.add(fmt.Sprint("r-", i))
	}
	msgs := make([]*message.Message, n)
	for i := range msgs {
		msgs[i] = next(t, ch)
	}
	for _, m := range msgs {
		stream.Release(m)
		m.Ack()
	}
	eventually(t, "every released entry forgotten", func() bool { return s.Held(b.stream) == 0 })
	if err := s.CloseTimeout(time.Second); err != nil {
		t.Fatal(err)
	}
	// Closed, the subscriber touches nothing any more: an entry that looks fresh was touched
	// after its release.
	p, err := b.rdb.XPendingExt(b.ctx, &redis.XPendingExtArgs{Stream: b.stream, Group: topics.ConsumerGroup,
		Start: "-", End: "+", Count: 2 * n}).Result()
	if err != nil {
		t.Fatal(err)
	}
	fresh := 0
	for _, e := range p {
		if e.Idle < time.Hour {
			fresh++
		}
	}
	if len(p) != n || fresh != 0 {
		t.Errorf("%d pending, %d of them looking fresh after their release", len(p), fresh)
	}
	_, ch2 := b.sub("peer", func(c *stream.Config) { c.Capacity = n; c.ClaimIdle = time.Minute })
	for range n {
		next(t, ch2).Ack()
	}
}

// TestNackRedelivers: a nacked message comes back after NackDelay, from custody, not Redis.
func TestNackRedelivers(t *testing.T) {
	b := newBench(t)
	_, ch := b.sub("a", func(c *stream.Config) { c.NackDelay = 100 * time.Millisecond })
	b.add("x")
	m := next(t, ch)
	m.Nack()
	again := next(t, ch)
	if string(again.Payload) != "x" || again.Metadata.Get(stream.MetaDeliveries) != "2" {
		t.Errorf("got %s deliveries %s", again.Payload, again.Metadata.Get(stream.MetaDeliveries))
	}
	again.Ack()
}

// TestSettleMetadataFromProducersIsIgnored: a producer cannot smuggle a settlement into an
// entry's metadata.
func TestSettleMetadataFromProducersIsIgnored(t *testing.T) {
	b := newBench(t)
	_, ch := b.sub("a", func(c *stream.Config) {
		c.Unmarshaller = smuggler{}
	})
	b.add("x")
	m := next(t, ch)
	m.Ack()
	eventually(t, "the entry acknowledged", func() bool { return len(b.pending()) == 0 })
}

type smuggler struct{}

func (smuggler) Unmarshal(v map[string]any) (*message.Message, error) {
	m := message.NewMessage("x", []byte("x"))
	m.Metadata.Set("_flightdeck_settle", "parked")
	return m, nil
}

// TestFinishingFreesTheSlot: a handler that says it is finishing frees its slot for the next
// entry at once, while its own message stays held (pending, waited for on Close) until it is
// settled; saying it twice frees one slot only.
func TestFinishingFreesTheSlot(t *testing.T) {
	b := newBench(t)
	s, ch := b.sub("a", func(c *stream.Config) { c.Capacity = 1 })
	b.add("1", "2", "3")
	first := next(t, ch)
	none(t, ch, 200*time.Millisecond)
	stream.Finishing(first)
	stream.Finishing(first)
	second := next(t, ch)
	if string(second.Payload) != "2" {
		t.Fatalf("got %s after Finishing", second.Payload)
	}
	none(t, ch, 300*time.Millisecond) // the second holds the only slot
	if p := b.pending(); p["a"] != 2 {
		t.Errorf("pending %v: the finishing entry must stay held until settled", p)
	}
	// Close waits for the finishing message too. Reading stops first, so that the slot the
	// second frees reads nothing: a message handed out then, which nobody takes here, would
	// hold Close up as well.
	s.StopReading()
	closed := make(chan error, 1)
	go func() { closed <- s.CloseTimeout(time.Minute) }()
	second.Ack()
	select {
	case err := <-closed:
		t.Fatalf("Close returned (%v) while a finishing message was unsettled", err)
	case <-time.After(300 * time.Millisecond):
	}
	first.Ack()
	select {
	case err := <-closed:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(eventTimeout): // well before CloseTimeout
		t.Fatal("Close did not return once every message was settled")
	}
}

// TestWaitingFreesTheSlot: a handler that waits for another's outcome (Waiting) frees its slot
// for the next entry while its own message stays held; Finishing on it afterwards frees nothing
// more; at most MaxWaitingPerSlot times Capacity messages wait so, and the next one keeps its
// slot.
func TestWaitingFreesTheSlot(t *testing.T) {
	b := newBench(t)
	_, ch := b.sub("a", func(c *stream.Config) { c.Capacity = 1 })
	ids := make([]string, stream.MaxWaitingPerSlot+2)
	for i := range ids {
		ids[i] = strconv.Itoa(i)
	}
	b.add(ids...)
	var waiting []*message.Message
	for i := range stream.MaxWaitingPerSlot {
		m := next(t, ch)
		if string(m.Payload) != ids[i] {
			t.Fatalf("got %s, want %s", m.Payload, ids[i])
		}
		stream.Waiting(m)
		stream.Finishing(m)
		waiting = append(waiting, m)
	}
	last := next(t, ch) // the bound is reached: it keeps its slot
	stream.Waiting(last)
	none(t, ch, 300*time.Millisecond)
	if p := b.pending(); p["a"] != int64(stream.MaxWaitingPerSlot+1) {
		t.Errorf("pending %v: the waiting entries must stay held until settled", p)
	}
	waiting[0].Ack() // settles a waiting one: no slot comes free
	none(t, ch, 200*time.Millisecond)
	last.Ack()
	if m := next(t, ch); string(m.Payload) != ids[len(ids)-1] {
		t.Fatalf("got %s once the slot came free", m.Payload)
	}
}

// TestResumeTakesTheSlotBack: a waiting handler that resumes holds a slot again, beyond
// Capacity when none is free, so nothing more is handed out until the topic is back under
// Capacity; a second Resume, and Waiting on a settled message, change nothing.
func TestResumeTakesTheSlotBack(t *testing.T) {
	b := newBench(t)
	_, ch := b.sub("a", func(c *stream.Config) { c.Capacity = 1 })
	b.add("1", "2", "3", "4", "5")
	first := next(t, ch)
	stream.Waiting(first)
	second := next(t, ch)
	stream.Resume(first) // two out, capacity 1
	stream.Resume(first)
	second.Ack()
	none(t, ch, 300*time.Millisecond) // first holds the only slot again
	first.Ack()
	third := next(t, ch)
	third.Ack()
	if m := next(t, ch); string(m.Payload) != "4" { // so third is settled
		t.Fatalf("got %s, want 4", m.Payload)
	}
	stream.Waiting(third)             // settled: frees nothing
	none(t, ch, 300*time.Millisecond) // 4 holds the only slot
}

// TestAddedAfter: an entry read once the subscriber found its stream drained carries the time
// that read was sent (MetaAddedAfter), even when its producer gave it an id far back; an entry
// the first read of a backlog returns carries none.
func TestAddedAfter(t *testing.T) {
	b := newBench(t)
	backlog := b.add("backlog")[0]
	b.rdb.XGroupCreateMkStream(b.ctx, b.stream, topics.ConsumerGroup, "0")
	s, ch := b.sub("a", func(c *stream.Config) { c.Capacity = 1 })
	first := next(t, ch)
	if v := first.Metadata.Get(stream.MetaAddedAfter); v != "" {
		t.Errorf("the backlog's entry, read first: added after %q, want unknown", v)
	}
	first.Ack()
	// A read that finds nothing, sent after the millisecond of the backlog's id (the backlog's
	// read returned as many as it asked for: it proved nothing).
	ms, _, _ := strings.Cut(backlog, "-")
	idMs, _ := strconv.ParseInt(ms, 10, 64)
	for time.Now().UnixMilli() <= idMs {
		time.Sleep(time.Millisecond)
	}
	// Two more drained reads: the second was sent after the first returned, so after now.
	d0 := s.Stats().Drained
	for deadline := time.Now().Add(eventTimeout); s.Stats().Drained < d0+2; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the subscriber never found its stream drained")
		}
	}
	// Ids only have to grow: one just after the backlog's entry lies in the past.
	if err := b.rdb.XAdd(b.ctx, &redis.XAddArgs{Stream: b.stream, ID: ms + "-999", Values: []any{"id", "x", "payload", "x"}}).Err(); err != nil {
		t.Fatal(err)
	}
	added := time.Now()
	m := next(t, ch)
	after, err := strconv.ParseInt(m.Metadata.Get(stream.MetaAddedAfter), 10, 64)
	if err != nil || after > added.UnixMilli() || after <= idMs {
		t.Errorf("an entry read after the stream drained: added after %q (its id's ms %d, added at %d); want a read sent just before it was added",
			m.Metadata.Get(stream.MetaAddedAfter), idMs, added.UnixMilli())
	}
	m.Ack()
}
