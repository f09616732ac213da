package stream

import (
	"container/heap"
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/redis/go-redis/v9"
)

// Entry states inside a topic loop.
const (
	stateReady   = iota // waiting for a free handler
	stateOut            // handed out to a handler
	stateDelayed        // waiting for its due time
	stateSettled        // settled and forgotten: nothing its handler says counts any more
)

// heldEntry is an entry this process holds, pending under its consumer name.
type heldEntry struct {
	id         string
	values     map[string]any
	deliveries int64
	how        string
	// addedAfter is a time before the entry was added to the stream. It is set for read
	// entries only, and zero means unknown. See MetaAddedAfter.
	addedAfter time.Time
	due        time.Time
	state      int
	index      int // position in the delayed heap
	// finishing is set when the entry is handed out and its handler called Finishing or
	// Waiting. Its slot counts as free while the message is not yet settled. waiting is set
	// too when it was Waiting.
	finishing, waiting bool
	// note is what the handler of its last delivery left with DelayWith. See MetaNote.
	note string
}

// delayHeap orders delayed entries by due time.
type delayHeap []*heldEntry

func (h delayHeap) Len() int           { return len(h) }
func (h delayHeap) Less(i, j int) bool { return h[i].due.Before(h[j].due) }
func (h delayHeap) Swap(i, j int)      { h[i], h[j] = h[j], h[i]; h[i].index = i; h[j].index = j }
func (h *delayHeap) Push(x any)        { e := x.(*heldEntry); e.index = len(*h); *h = append(*h, e) }
func (h *delayHeap) Pop() any {
	old := *h
	e := old[len(old)-1]
	*h = old[:len(old)-1]
	e.index = -1
	return e
}

// topicLoop consumes one topic. It hands entries out to at most Capacity handlers in this
// order: ready entries that were recovered, claimed or are due after a delay, then claim
// candidates, then this consumer's own pending entries left by an earlier run, then new
// entries.
type topicLoop struct {
	s     *Subscriber
	topic string
	out   chan *message.Message // Subscribe: where messages go; nil under Serve
	wake  chan struct{}
	ctx   context.Context
	stop  context.CancelFunc

	// handler runs each message on the loop's own workers under Serve. work hands a message
	// to an idle worker; a message that finds none starts one, and the worker stays.
	handler Handler
	work    chan job
	workers sync.WaitGroup

	mu         sync.Mutex
	held       map[string]*heldEntry
	ready      []*heldEntry
	delayed    delayHeap
	inflight   int // handed out and holding a slot
	finishing  int // handed out, finishing or waiting: no slot held, not yet settled
	waiting    int // of those, waiting (Waiting): not about to settle
	cands      []Candidate
	candIDs    map[string]bool
	recovering bool
	recoverAt  string
	settled    *sync.Cond
	// drained is when the last read of new entries that found no more than it returned was
	// sent. Every entry read later was added after it. Used by the loop's goroutine only.
	drained time.Time

	// touchMu orders touching against handing over. A touch pass holds it from its list of
	// held ids to Redis's answer. A hand-over by Release or Close holds it while it makes its
	// entries look idle and stops holding them. So no touch in flight lands after a hand-over
	// and makes the entry look fresh again, which would make peers wait ClaimIdle to claim
	// it. handedOver is set under touchMu once Close handed the topic's entries over.
	touchMu    sync.Mutex
	handedOver bool
}

func newTopicLoop(s *Subscriber, topic string, h Handler) *topicLoop {
	ctx, stop := context.WithCancel(context.Background())
	l := &topicLoop{s: s, topic: topic, handler: h, work: make(chan job), wake: make(chan struct{}, 1),
		ctx: ctx, stop: stop, held: map[string]*heldEntry{}, candIDs: map[string]bool{},
		recovering: true, recoverAt: "0"}
	if h == nil {
		l.out = make(chan *message.Message)
	}
	l.settled = sync.NewCond(&l.mu)
	go func() { <-s.done; stop() }()
	return l
}

// signal wakes the loop, for example when a handler became free or candidates arrived.
func (l *topicLoop) signal() {
	select {
	case l.wake <- struct{}{}:
	default:
	}
}

func (l *topicLoop) run() {
	cfg := &l.s.cfg
	backoff := 50 * time.Millisecond
	for {
		if l.ctx.Err() != nil {
			return
		}
		reading := l.s.reading()
		l.mu.Lock()
		now := time.Now()
		for len(l.delayed) > 0 && !l.delayed[0].due.After(now) {
			e := heap.Pop(&l.delayed).(*heldEntry)
			e.state = stateReady
			l.ready = append(l.ready, e)
		}
		free := cfg.Capacity - l.inflight
		var next *heldEntry
		if reading && free > 0 && len(l.ready) > 0 {
			next = l.ready[0]
			l.ready = l.ready[1:]
			next.state = stateOut
			l.inflight++
		}
		wait := cfg.BlockTime
		if len(l.delayed) > 0 {
			wait = min(wait, max(time.Until(l.delayed[0].due), time.Millisecond))
		}
		hasCands := len(l.cands) > 0
		l.mu.Unlock()

		switch {
		case next != nil:
			l.emit(next)
			continue
		case !reading || free <= 0:
			l.sleep(wait)
			continue
		case hasCands:
			if l.claim(free) > 0 {
				continue
			}
		}
		if !l.recovering && l.s.paused(l.ctx) {
			l.sleep(wait) // a paused stage reads nothing new
			continue
		}
		var err error
		if free = l.gather(free); free <= 0 {
			continue // a handler resumed (Resume) meanwhile and took the slot back
		}
		if l.recovering {
			err = l.recover(free)
		} else {
			err = l.read(free, wait)
		}
		if err != nil {
			if l.ctx.Err() != nil {
				return
			}
			l.s.log.Warn().Err(err).Str("stream", l.topic).Msg("reading the task stream failed; retrying")
			l.sleep(backoff)
			backoff = min(2*backoff, 2*time.Second)
			continue
		}
		backoff = 50 * time.Millisecond
	}
}

// gather waits, for at most ReadWait, while handlers are finishing and slots are taken, so
// that the next read serves the slots they free as well. It returns the free slots.
func (l *topicLoop) gather(free int) int {
	cfg := &l.s.cfg
	if cfg.ReadWait <= 0 {
		return free
	}
	var timer *time.Timer
	woken := false
	defer func() {
		if woken {
			l.signal() // pass it on, as the loop may have been woken for something else too
		}
	}()
	for {
		l.mu.Lock()
		free = cfg.Capacity - l.inflight
		finishing := l.finishing - l.waiting // a waiting handler is not about to free anything
		l.mu.Unlock()
		if finishing == 0 || free >= cfg.Capacity {
			return free
		}
		if timer == nil {
			timer = time.NewTimer(cfg.ReadWait)
			defer timer.Stop()
		}
		select {
		case <-l.wake:
			woken = true
		case <-timer.C:
			return l.freeSlots()
		case <-l.ctx.Done():
			return free
		}
	}
}

// freeSlots is how many handlers of the topic are free.
func (l *topicLoop) freeSlots() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.s.cfg.Capacity - l.inflight
}

func (l *topicLoop) sleep(d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-l.wake:
	case <-t.C:
	case <-l.ctx.Done():
	}
}

// add registers entries as held and ready. addedAfter is the latest time known to be before
// they were added to the stream, or zero when unknown.
func (l *topicLoop) add(msgs []redis.XMessage, how string, deliveries map[string]int64, addedAfter time.Time) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := 0
	for _, m := range msgs {
		if l.held[m.ID] != nil {
			continue
		}
		d := deliveries[m.ID]
		if d == 0 {
			d = 1
		}
		e := &heldEntry{id: m.ID, values: m.Values, deliveries: d, how: how, addedAfter: addedAfter, index: -1}
		l.held[m.ID] = e
		l.ready = append(l.ready, e)
		n++
	}
	return n
}

// read reads up to n new entries, blocking up to block. A read that returns fewer than n
// entries found no more undelivered ones when Redis ran it. Every entry a later read returns
// was therefore added after this read was sent, whatever its id says, because ids only grow.
func (l *topicLoop) read(n int, block time.Duration) error {
	sent, after := time.Now(), l.drained
	res, err := l.s.cfg.Client.XReadGroup(l.ctx, &redis.XReadGroupArgs{Group: l.s.cfg.Group,
		Consumer: l.s.cfg.Consumer, Streams: []string{l.topic, ">"}, Count: int64(n), Block: block}).Result()
	if err == redis.Nil {
		l.drained = sent
		l.s.stat.drained.Add(1)
		return nil
	}
	if err != nil {
		l.recreateGroup(err)
		return err
	}
	got := 0
	for _, xs := range res {
		got += len(xs.Messages)
		l.s.stat.read.Add(int64(l.add(xs.Messages, "read", nil, after)))
	}
	if got < n {
		l.drained = sent
		l.s.stat.drained.Add(1)
	}
	return nil
}

// recover reads this consumer's own pending entries after a restart under the same name, n
// at a time, until there are none left.
func (l *topicLoop) recover(n int) error {
	res, err := l.s.cfg.Client.XReadGroup(l.ctx, &redis.XReadGroupArgs{Group: l.s.cfg.Group,
		Consumer: l.s.cfg.Consumer, Streams: []string{l.topic, l.recoverAt}, Count: int64(n), Block: -1}).Result()
	if err == redis.Nil {
		l.recovering = false
		return nil
	}
	if err != nil {
		l.recreateGroup(err)
		return err
	}
	got := 0
	for _, xs := range res {
		for _, m := range xs.Messages {
			l.recoverAt = m.ID
		}
		got += len(xs.Messages)
		if k := l.add(xs.Messages, "recovered", nil, time.Time{}); k > 0 {
			l.s.stat.recovered.Add(int64(k))
			l.s.log.Info().Str("stream", l.topic).Int("entries", k).Msg("picked up this consumer's own pending entries")
		}
	}
	if got < n {
		l.recovering = false
	}
	return nil
}

// recreateGroup creates the group again when Redis lost it, as after a restart without
// persistence.
func (l *topicLoop) recreateGroup(err error) {
	if err != nil && strings.Contains(err.Error(), "NOGROUP") {
		_ = l.s.cfg.Client.XGroupCreateMkStream(l.ctx, l.topic, l.s.cfg.Group, "0").Err()
	}
}

// emit hands e out as a new message and watches how its handler settles it.
func (l *topicLoop) emit(e *heldEntry) {
	msg, err := l.s.cfg.Unmarshaller.Unmarshal(e.values)
	if err != nil || msg == nil {
		msg = message.NewMessage(watermill.NewUUID(), nil)
		msg.Metadata.Set(MetaBadEntry, "bad_entry")
		if err != nil {
			msg.Metadata.Set(MetaBadDetail, err.Error())
		}
	}
	if msg.Metadata == nil {
		msg.Metadata = message.Metadata{}
	}
	delete(msg.Metadata, metaSettle)
	delete(msg.Metadata, metaNoteNext)
	if e.note == "" {
		delete(msg.Metadata, MetaNote)
	} else {
		msg.Metadata.Set(MetaNote, e.note)
	}
	msg.Metadata.Set(MetaEntry, e.id)
	msg.Metadata.Set(MetaStream, l.topic)
	msg.Metadata.Set(MetaDeliveries, strconv.FormatInt(e.deliveries, 10))
	msg.Metadata.Set(MetaHow, e.how)
	if e.addedAfter.IsZero() {
		delete(msg.Metadata, MetaAddedAfter)
	} else {
		msg.Metadata.Set(MetaAddedAfter, strconv.FormatInt(e.addedAfter.UnixMilli(), 10))
	}
	msg.SetContext(context.WithValue(msg.Context(), handleKey{}, &msgHandle{l: l, e: e}))
	if l.handler != nil {
		j := job{e: e, msg: msg}
		select {
		case l.work <- j:
		default:
			l.workers.Add(1)
			go l.worker(j)
		}
		return
	}
	select {
	case l.out <- msg:
	case <-l.ctx.Done():
		l.mu.Lock()
		l.inflight--
		e.state = stateReady
		l.settled.Broadcast()
		l.mu.Unlock()
		return
	}
	go func() {
		select {
		case <-msg.Acked():
			l.settle(e, msg)
		case <-msg.Nacked():
			l.redeliver(e, time.Now().Add(l.s.cfg.NackDelay), "redelivered")
		case <-l.ctx.Done():
		}
	}()
}

// runJob runs the handler on j and settles j's entry: as the handler left it, or, after an
// error, handed out again after NackDelay. A handler that never returns, as after
// runtime.Goexit, has its entry handed out again too, and its worker ends.
func (l *topicLoop) runJob(j job) {
	returned := false
	defer func() {
		if !returned {
			l.redeliver(j.e, time.Now().Add(l.s.cfg.NackDelay), "redelivered")
		}
	}()
	err := l.handler(j.msg)
	returned = true
	if err != nil {
		l.redeliver(j.e, time.Now().Add(l.s.cfg.NackDelay), "redelivered")
		return
	}
	l.settle(j.e, j.msg)
}

// job is one message a worker runs under Serve.
type job struct {
	e   *heldEntry
	msg *message.Message
}

// worker runs j, then the messages handed to it, until the topic stops. A worker keeps its
// goroutine and the stack it grew from one message to the next.
func (l *topicLoop) worker(j job) {
	defer l.workers.Done()
	for {
		l.runJob(j)
		select {
		case j = <-l.work:
		case <-l.ctx.Done():
			return
		}
	}
}

// settle acts on what the handler left on an acknowledged message.
func (l *topicLoop) settle(e *heldEntry, msg *message.Message) {
	kind, due := settleOf(msg)
	switch kind {
	case "delay":
		l.s.stat.delayed.Add(1)
		l.mu.Lock()
		e.note = msg.Metadata.Get(metaNoteNext)
		l.mu.Unlock()
		l.redeliver(e, due, "delayed")
		return
	case "release":
		l.s.stat.released.Add(1)
		// Until the entry is forgotten below, no touch pass may list it: a touch landing after
		// this hand-over would make it look fresh again.
		l.touchMu.Lock()
		defer l.touchMu.Unlock()
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		l.touch(ctx, []string{e.id}, l.s.cfg.ReleaseIdle)
		cancel()
	case "parked":
		l.s.stat.parked.Add(1)
	case "acked":
		l.s.stat.acked.Add(1)
	default:
		l.s.acker.add(l.topic, e.id)
	}
	l.mu.Lock()
	delete(l.held, e.id)
	l.unout(e)
	e.state = stateSettled
	l.settled.Broadcast()
	l.mu.Unlock()
	l.signal()
}

// redeliver keeps e held and hands it out again once due.
func (l *topicLoop) redeliver(e *heldEntry, due time.Time, how string) {
	l.mu.Lock()
	l.unout(e)
	e.state, e.due, e.how = stateDelayed, due, how
	e.deliveries++
	heap.Push(&l.delayed, e)
	l.settled.Broadcast()
	l.mu.Unlock()
	l.signal()
}

// unout accounts for a handed-out entry that is settled or taken back. Call with l.mu held.
func (l *topicLoop) unout(e *heldEntry) {
	if e.finishing {
		if e.waiting {
			e.waiting = false
			l.waiting--
		}
		e.finishing = false
		l.finishing--
		return
	}
	l.inflight--
}

// finish frees the slot of a handed-out entry whose handler called Finishing. The loop may
// read the next entry while the handler completes this one.
func (l *topicLoop) finish(e *heldEntry) { l.free(e, false) }

// wait frees the slot of a handed-out entry whose handler called Waiting, unless
// MaxWaitingPerSlot times Capacity entries wait already.
func (l *topicLoop) wait(e *heldEntry) { l.free(e, true) }

// resume takes a slot again for a handed-out entry whose handler was waiting, beyond Capacity
// when none is free.
func (l *topicLoop) resume(e *heldEntry) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if e.state != stateOut || !e.waiting {
		return
	}
	e.finishing, e.waiting = false, false
	l.finishing--
	l.waiting--
	l.inflight++
}

// free frees e's slot: its handler finishes, or waits for another handler when waiting.
func (l *topicLoop) free(e *heldEntry, waiting bool) {
	l.mu.Lock()
	if e.state != stateOut || e.finishing || (waiting && l.waiting >= MaxWaitingPerSlot*l.s.cfg.Capacity) {
		l.mu.Unlock()
		return
	}
	e.finishing, e.waiting = true, waiting
	l.inflight--
	l.finishing++
	if waiting {
		l.waiting++
	}
	l.mu.Unlock()
	l.signal()
}

// stillHeld reports whether id is still pending under this consumer, neither acknowledged
// nor claimed by another consumer.
func (l *topicLoop) stillHeld(ctx context.Context, id string) (bool, error) {
	p, err := l.s.cfg.Client.XPendingExt(ctx, &redis.XPendingExtArgs{Stream: l.topic, Group: l.s.cfg.Group,
		Start: id, End: id, Count: 1}).Result()
	if err != nil {
		return false, fmt.Errorf("stream: pending entry %s: %w", id, err)
	}
	return len(p) == 1 && p[0].Consumer == l.s.cfg.Consumer, nil
}

// drop forgets an entry this process no longer holds, unless a handler has it now, and
// reports whether it did. Such an entry was claimed by another consumer or acknowledged
// elsewhere. An entry gone from the stream is forgotten too, unless it waits with a note
// from DelayWith.
//
// A noted entry keeps waiting because its handler owes it an answer only this process can
// give: a spooled outcome's write-back, which writes nothing for an entry no longer
// pending. The stream cannot tell a loss of Redis's data, after which nobody else has the
// entry, from a trim once it was answered.
func (l *topicLoop) drop(id string, gone bool) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	e := l.held[id]
	if e == nil || e.state == stateOut || (gone && e.note != "") {
		return false
	}
	delete(l.held, id)
	switch e.state {
	case stateDelayed:
		if e.index >= 0 {
			heap.Remove(&l.delayed, e.index)
		}
	case stateReady:
		for i, r := range l.ready {
			if r == e {
				l.ready = append(l.ready[:i], l.ready[i+1:]...)
				break
			}
		}
	}
	return true
}

// waitSettled waits until no message of the topic is handed out, or until deadline.
func (l *topicLoop) waitSettled(deadline time.Time) {
	timer := time.AfterFunc(time.Until(deadline), func() {
		l.mu.Lock()
		l.settled.Broadcast()
		l.mu.Unlock()
	})
	defer timer.Stop()
	l.mu.Lock()
	defer l.mu.Unlock()
	for l.inflight+l.finishing > 0 && time.Now().Before(deadline) {
		l.settled.Wait()
	}
}
