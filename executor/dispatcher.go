package executor

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/rs/zerolog"

	"github.com/flightdeck-ai/flightdeck/flight"
	"github.com/flightdeck-ai/flightdeck/internal/broker"
	"github.com/flightdeck-ai/flightdeck/topics"
)

// dispatcher is the one reader per process of the result streams: in-process followers
// register for a request key and are woken when any terminal event of that key appears. It
// reads only the streams somebody waits on, and nothing while the breaker is open.
type dispatcher struct {
	rdb     redis.UniversalClient
	max     int // most waiters at once
	log     zerolog.Logger
	blocked func() bool // true while no Redis call may be made, such as with the breaker open

	mu      sync.Mutex
	waiters map[string]map[chan struct{}]struct{} // request key -> wake channels
	streams map[string]*streamCursor              // result stream -> cursor
	waiting int                                   // registered waiters
	kick    chan struct{}
}

type streamCursor struct {
	id      string // last entry seen
	waiters int
}

func newDispatcher(rdb redis.UniversalClient, log zerolog.Logger, blocked func() bool, max int) *dispatcher {
	return &dispatcher{rdb: rdb, log: log, blocked: blocked, max: max,
		waiters: map[string]map[chan struct{}]struct{}{}, streams: map[string]*streamCursor{},
		kick: make(chan struct{}, 1)}
}

// register returns a channel that receives a value when an event of key appears on stream
// after this call, and a function that unregisters it. The caller re-reads the flight after
// registering: anything published before the registration is in Redis already.
func (d *dispatcher) register(ctx context.Context, stream, key string) (<-chan struct{}, func(), error) {
	d.mu.Lock()
	cur := d.streams[stream]
	n := d.waiting
	d.mu.Unlock()
	if n >= d.max {
		return nil, nil, fmt.Errorf("%w: %d followers already wait in this process", flight.ErrTooManyWaiters, n)
	}
	if cur == nil {
		// Fix the cursor before the caller re-reads the flight, so no event falls in between.
		id := "0-0"
		msgs, err := d.rdb.XRevRangeN(ctx, stream, "+", "-", 1).Result()
		if err != nil {
			return nil, nil, err
		}
		if len(msgs) > 0 {
			id = msgs[0].ID
		}
		d.mu.Lock()
		if d.streams[stream] == nil {
			d.streams[stream] = &streamCursor{id: id}
		}
		cur = d.streams[stream]
		d.mu.Unlock()
	}
	ch := make(chan struct{}, 1)
	d.mu.Lock()
	cur.waiters++
	d.waiting++
	if d.waiters[key] == nil {
		d.waiters[key] = map[chan struct{}]struct{}{}
	}
	d.waiters[key][ch] = struct{}{}
	d.mu.Unlock()
	select {
	case d.kick <- struct{}{}:
	default:
	}
	var once sync.Once
	return ch, func() {
		once.Do(func() {
			d.mu.Lock()
			defer d.mu.Unlock()
			delete(d.waiters[key], ch)
			d.waiting--
			if len(d.waiters[key]) == 0 {
				delete(d.waiters, key)
			}
			if cur.waiters--; cur.waiters == 0 {
				delete(d.streams, stream)
			}
		})
	}, nil
}

// run reads the registered streams until ctx ends.
func (d *dispatcher) run(ctx context.Context) {
	backoff := 50 * time.Millisecond
	for ctx.Err() == nil {
		d.mu.Lock()
		args := make([]string, 0, 2*len(d.streams))
		ids := make([]string, 0, len(d.streams))
		for s, c := range d.streams {
			args = append(args, s)
			ids = append(ids, c.id)
		}
		d.mu.Unlock()
		if len(ids) == 0 || d.blocked() {
			select {
			case <-ctx.Done():
				return
			case <-d.kick:
			case <-time.After(200 * time.Millisecond):
			}
			continue
		}
		res, err := broker.XRead(ctx, d.rdb, &redis.XReadArgs{Streams: append(args, ids...), Count: 1000,
			Block: 500 * time.Millisecond})
		if errors.Is(err, redis.Nil) {
			continue
		}
		if err != nil {
			if ctx.Err() == nil {
				d.log.Debug().Err(err).Msg("result dispatcher read failed")
				time.Sleep(backoff)
				backoff = min(2*backoff, 2*time.Second)
			}
			continue
		}
		backoff = 50 * time.Millisecond
		d.deliver(res)
	}
}

func (d *dispatcher) deliver(res []redis.XStream) {
	d.mu.Lock()
	defer d.mu.Unlock()
	for _, xs := range res {
		if len(xs.Messages) == 0 {
			continue
		}
		if c := d.streams[xs.Stream]; c != nil {
			c.id = xs.Messages[len(xs.Messages)-1].ID
		}
		for _, m := range xs.Messages {
			payload, _ := m.Values[topics.FieldPayload].(string)
			ev, err := topics.DecodeEvent([]byte(payload))
			if err != nil {
				continue
			}
			for ch := range d.waiters[ev.RequestKey] {
				select {
				case ch <- struct{}{}:
				default:
				}
			}
		}
	}
}
