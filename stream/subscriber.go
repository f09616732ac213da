// Package stream is Flightdeck's watermill message.Subscriber over a Redis Streams consumer
// group. It replaces watermill-redisstream's subscriber and keeps its wire format, so its
// publisher and any plain XADD still enqueue. The consumer needs four things that
// watermill-redisstream cannot give:
//
//   - No read-ahead. A topic reads with XREADGROUP COUNT n only as many entries as its
//     handlers can start now, so no task waits behind a busy handler while another is free.
//   - Custody. Every entry the process holds, running or waiting for a later attempt, has
//     its idle time reset while the process lives, and only then. An entry idle longer
//     than the lease has no live holder.
//   - A claim loop that finds such entries per consumer with XPENDING IDLE and a cursor per
//     consumer, never one window from "0", whether or not a handler is free. It asks the
//     caller's Check whether each may be claimed, and claims it when a handler is free.
//     Entries of the parking consumer are checked the same way, so any consumer answers a
//     parked task whose flight ended or vanished.
//   - A restart under the same name reads its own pending entries first.
//
// Handlers settle a message with Park, Acked, Delay or Release before returning. A plain
// Ack acknowledges the entry with a batched XACK. A Nack hands it out again after
// NackDelay. Serve runs a handler on the subscriber's own goroutines instead of handing
// messages to a router. See docs/DESIGN.md section 5.
package stream

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/redis/go-redis/v9"
	"github.com/rs/zerolog"

	"github.com/flightdeck-ai/flightdeck/topics"
)

// Unmarshaller turns a stream entry's fields into a message. It is the same interface as
// watermill-redisstream's. It should not fail: an entry it cannot read is better returned
// as a message the handler dead-letters.
type Unmarshaller interface {
	Unmarshal(values map[string]any) (*message.Message, error)
}

// Verdict is what Check decides about a claim candidate.
type Verdict int

const (
	// Skip leaves the entry where it is, untouched, so it stays idle and is listed again.
	Skip Verdict = iota
	// Claim takes the entry over when a handler is free. Its holder is gone, or its flight
	// ended, vanished or lapsed.
	Claim
	// Keep resets the idle time of a parked entry whose flight is alive, so it is checked
	// again only after ParkCheck.
	Keep
)

// Candidate is another consumer's pending entry, idle long enough to be looked at.
type Candidate struct {
	Stream, ID string
	// Consumer holds the entry now. Parked is true for the parking consumer.
	Consumer string
	Parked   bool
	// Idle is how long nobody touched it when it was listed, at Listed (this process's
	// clock). Deliveries counts its deliveries so far.
	Idle       time.Duration
	Listed     time.Time
	Deliveries int64
	// Values are the entry's fields, or nil when the entry is gone from the stream.
	Values map[string]any
}

// Config configures a Subscriber. Zero fields take the defaults named.
type Config struct {
	// Client reads, claims and acknowledges. Required. The subscriber does not close it.
	// Give it a pool of at least one connection per topic beyond what the handlers use,
	// because each topic's XREADGROUP blocks one while idle.
	Client redis.UniversalClient
	// Group is the consumer group. Defaults to topics.ConsumerGroup.
	Group string
	// Consumer is this process's consumer name in the group. Required. It may not start
	// with '~', which is reserved for the parking consumer. A process restarted under the
	// same name picks up its own pending entries first.
	Consumer string
	// Parking is the parking consumer's name. Defaults to topics.ParkingConsumer.
	Parking string
	// Capacity is how many messages of one topic may be handed out and not yet settled, the
	// number of handlers of the topic. Defaults to 4.
	Capacity int
	// BlockTime bounds one XREADGROUP BLOCK. Defaults to 250 ms.
	BlockTime time.Duration
	// ReadWait bounds how long a topic, when a slot frees while other handlers are
	// finishing, waits for their slots too, so that one XREADGROUP reads for all of them.
	// See Finishing. Defaults to 200 µs. Negative means read at once.
	ReadWait time.Duration
	// TouchInterval is how often the entries this process holds are touched. Keep it well
	// below ClaimIdle. Defaults to 1 s.
	TouchInterval time.Duration
	// ClaimInterval is how often other consumers' entries are looked at. Defaults to 1 s.
	ClaimInterval time.Duration
	// ClaimIdle is how long another consumer's entry must go untouched by its holder to be
	// a claim candidate. Set it to the stage's lease. Defaults to 5 s.
	ClaimIdle time.Duration
	// ParkCheck is how long a parked entry must be idle to be a candidate whose flight is
	// checked. Defaults to 5 s.
	ParkCheck time.Duration
	// ClaimBatch bounds the candidates looked at per consumer and pass. Defaults to 100.
	ClaimBatch int
	// Check decides about candidates, one verdict each, in order. Defaults to claiming every
	// candidate of a non-parking consumer and skipping parked ones.
	Check func(ctx context.Context, cands []Candidate) []Verdict
	// Unmarshaller reads entries. Required.
	Unmarshaller Unmarshaller
	// NackDelay is how long a nacked message waits before it is handed out again.
	// Defaults to 500 ms.
	NackDelay time.Duration
	// ReleaseIdle is the idle time given to entries handed over on Close. Defaults to 24 h.
	ReleaseIdle time.Duration
	// CloseTimeout bounds how long Close waits for handed-out messages to be settled.
	// Defaults to 10 s.
	CloseTimeout time.Duration
	// Logger receives the subscriber's logs. Defaults to a disabled logger.
	Logger *zerolog.Logger
	// Paused, when set, tells whether the topics' stage is paused. A paused subscriber reads
	// no new entries and claims no other consumer's entries except parked ones, so parked
	// tasks are still answered. It still hands out, touches and settles what it holds.
	// Paused is asked at most once per PauseCheck per subscriber, and the answer is cached.
	// On an error the last answer stands. Defaults to nil: never paused.
	Paused func(ctx context.Context) (bool, error)
	// PauseCheck is how long an answer of Paused is used. Defaults to 1 s.
	PauseCheck time.Duration
}

func (c *Config) setDefaults() {
	if c.Group == "" {
		c.Group = topics.ConsumerGroup
	}
	if c.Parking == "" {
		c.Parking = topics.ParkingConsumer
	}
	if c.Capacity == 0 {
		c.Capacity = 4
	}
	if c.BlockTime == 0 {
		c.BlockTime = 250 * time.Millisecond
	}
	if c.ReadWait == 0 {
		c.ReadWait = 200 * time.Microsecond
	}
	if c.TouchInterval == 0 {
		c.TouchInterval = time.Second
	}
	if c.ClaimInterval == 0 {
		c.ClaimInterval = time.Second
	}
	if c.ClaimIdle == 0 {
		c.ClaimIdle = 5 * time.Second
	}
	if c.ParkCheck == 0 {
		c.ParkCheck = 5 * time.Second
	}
	if c.ClaimBatch == 0 {
		c.ClaimBatch = 100
	}
	if c.NackDelay == 0 {
		c.NackDelay = 500 * time.Millisecond
	}
	if c.ReleaseIdle == 0 {
		c.ReleaseIdle = 24 * time.Hour
	}
	if c.CloseTimeout == 0 {
		c.CloseTimeout = 10 * time.Second
	}
	if c.PauseCheck == 0 {
		c.PauseCheck = time.Second
	}
	if c.Logger == nil {
		l := zerolog.Nop()
		c.Logger = &l
	}
	if c.Check == nil {
		c.Check = func(_ context.Context, cands []Candidate) []Verdict {
			out := make([]Verdict, len(cands))
			for i, cd := range cands {
				if !cd.Parked {
					out[i] = Claim
				}
			}
			return out
		}
	}
}

func (c *Config) validate() error {
	var errs []error
	if c.Client == nil {
		errs = append(errs, errors.New("Client is required"))
	}
	if c.Unmarshaller == nil {
		errs = append(errs, errors.New("Unmarshaller is required"))
	}
	if c.Consumer == "" || strings.HasPrefix(c.Consumer, "~") || c.Consumer == c.Parking {
		errs = append(errs, fmt.Errorf("consumer name %q: required, and not starting with '~'", c.Consumer))
	}
	if c.Capacity < 1 {
		errs = append(errs, fmt.Errorf("capacity %d: want at least 1", c.Capacity))
	}
	if c.TouchInterval*2 > c.ClaimIdle {
		errs = append(errs, fmt.Errorf("touchInterval %v must be at most half of claimIdle %v", c.TouchInterval, c.ClaimIdle))
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("stream: invalid subscriber config: %w", err)
	}
	return nil
}

// Stats counts what a subscriber did since it started. Values only grow.
type Stats struct {
	// Read counts entries read as new. Recovered counts the own pending entries picked up
	// at start. Claimed counts the entries taken over from other consumers, and Unparked
	// those of them that were parked. Acked counts the entries acknowledged. Parked,
	// Delayed and Released count those settlements.
	Read, Recovered, Claimed, Unparked, Acked, Parked, Delayed, Released int64
	// Kept counts parked entries checked and left parked. Lost counts the held entries
	// found taken by another consumer, acknowledged elsewhere, or gone from the stream
	// without a note.
	Kept, Lost int64
	// Passes counts the claim loops' completed passes over the group, one per topic and
	// ClaimInterval while reading. A pass that failed does not count.
	Passes int64
	// Drained counts the reads of new entries that found no more than they returned.
	Drained int64
	// Touches counts the touch passes over the held entries, one per topic and
	// TouchInterval while any are held, whatever Redis answered.
	Touches int64
}

type counters struct {
	read, recovered, claimed, unparked, acked, parked, delayed, released, kept, lost, passes, drained, touches atomic.Int64
}

// Subscriber is a watermill message.Subscriber over one consumer group. Subscribe once per
// topic, which is a task stream. It is safe for concurrent use.
type Subscriber struct {
	cfg  Config
	log  zerolog.Logger
	stat counters

	mu      sync.Mutex
	loops   map[string]*topicLoop
	closed  bool
	stopped chan struct{} // closed by StopReading
	done    chan struct{} // closed by Close
	wg      sync.WaitGroup
	acker   *acker
	pause   pauseCache
}

// NewSubscriber validates cfg and returns a subscriber. Nothing is read until Subscribe.
func NewSubscriber(cfg Config) (*Subscriber, error) {
	cfg.setDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	s := &Subscriber{cfg: cfg, log: cfg.Logger.With().Str("consumer", cfg.Consumer).Logger(),
		loops: map[string]*topicLoop{}, stopped: make(chan struct{}), done: make(chan struct{})}
	s.acker = newAcker(cfg.Client, cfg.Group, s.log, &s.stat)
	s.wg.Add(1)
	go func() { defer s.wg.Done(); s.acker.run(s.done) }()
	return s, nil
}

// Subscribe starts consuming the task stream topic in the group, creating both when
// missing. Close closes the channel. Each topic takes one subscription.
func (s *Subscriber) Subscribe(ctx context.Context, topic string) (<-chan *message.Message, error) {
	l, err := s.start(ctx, topic, nil)
	if err != nil {
		return nil, err
	}
	return l.out, nil
}

// Handler handles one message that Serve hands out. Before it returns nil it settles the
// message with Park, Acked, Delay, DelayWith or Release, or leaves it to be acknowledged. An
// error hands the message out again after NackDelay, as a Nack does.
type Handler func(msg *message.Message) error

// Serve starts consuming the task stream topic as Subscribe does, but runs h itself, on
// goroutines of its own that it keeps from one message to the next: no router, no channel and
// no goroutine per message. A message is settled as soon as h returns. Close stops the
// workers once their messages are settled. Each topic takes one subscription.
func (s *Subscriber) Serve(ctx context.Context, topic string, h Handler) error {
	if h == nil {
		return errors.New("stream: Serve needs a handler")
	}
	_, err := s.start(ctx, topic, h)
	return err
}

// start creates topic's group and loop, and runs the loop.
func (s *Subscriber) start(ctx context.Context, topic string, h Handler) (*topicLoop, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil, errors.New("stream: subscriber closed")
	}
	if s.loops[topic] != nil {
		return nil, fmt.Errorf("stream: %s is subscribed already", topic)
	}
	if err := s.cfg.Client.XGroupCreateMkStream(ctx, topic, s.cfg.Group, "0").Err(); err != nil &&
		!strings.Contains(err.Error(), "BUSYGROUP") {
		return nil, fmt.Errorf("stream: create group %s on %s: %w", s.cfg.Group, topic, err)
	}
	l := newTopicLoop(s, topic, h)
	s.loops[topic] = l
	s.wg.Add(3)
	go func() { defer s.wg.Done(); l.run() }()
	go func() { defer s.wg.Done(); l.claimLoop() }()
	go func() { defer s.wg.Done(); l.touchLoop() }()
	return l, nil
}

// StopReading stops taking new work: no more reads or claims. Messages handed out are still
// settled, and held entries stay touched until Close.
func (s *Subscriber) StopReading() {
	s.mu.Lock()
	defer s.mu.Unlock()
	select {
	case <-s.stopped:
	default:
		close(s.stopped)
	}
}

// Close stops every topic. It stops reading, waits up to Config.CloseTimeout for the
// messages handed out to be settled, and acknowledges what was acknowledged. It hands the
// entries it still holds over by making them look idle for ReleaseIdle, so other consumers
// claim them at once. Then it closes the channels. It does not close the client. Closing
// twice is a no-op.
func (s *Subscriber) Close() error { return s.CloseTimeout(s.cfg.CloseTimeout) }

// CloseTimeout is Close with its own wait for handed-out messages.
func (s *Subscriber) CloseTimeout(timeout time.Duration) error {
	s.StopReading()
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil
	}
	s.closed = true
	loops := make([]*topicLoop, 0, len(s.loops))
	for _, l := range s.loops {
		loops = append(loops, l)
	}
	s.mu.Unlock()
	deadline := time.Now().Add(timeout)
	for _, l := range loops {
		l.waitSettled(deadline)
	}
	s.acker.flush()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	for _, l := range loops {
		l.releaseAll(ctx)
	}
	close(s.done)
	s.wg.Wait()
	for _, l := range loops {
		if l.out != nil {
			close(l.out)
		}
	}
	return nil
}

// Stats returns what the subscriber did so far.
func (s *Subscriber) Stats() Stats {
	c := &s.stat
	return Stats{Read: c.read.Load(), Recovered: c.recovered.Load(), Claimed: c.claimed.Load(),
		Unparked: c.unparked.Load(), Acked: c.acked.Load(), Parked: c.parked.Load(), Delayed: c.delayed.Load(),
		Released: c.released.Load(), Kept: c.kept.Load(), Lost: c.lost.Load(), Passes: c.passes.Load(),
		Drained: c.drained.Load(), Touches: c.touches.Load()}
}

// Held returns how many entries of topic the subscriber holds: handed out, ready or delayed.
func (s *Subscriber) Held(topic string) int {
	s.mu.Lock()
	l := s.loops[topic]
	s.mu.Unlock()
	if l == nil {
		return 0
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.held)
}

func (s *Subscriber) reading() bool {
	select {
	case <-s.stopped:
		return false
	default:
		return true
	}
}
