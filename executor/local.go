package executor

import (
	"container/list"
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/flightdeck-ai/flightdeck/internal/guard"
	"golang.org/x/sync/singleflight"
)

// ErrGoexit is the Value of the PanicError that Local.Do raises when fn called runtime.Goexit.
var ErrGoexit = guard.ErrGoexit

// PanicError is the value Local.Do panics with, in the goroutine of every caller of a flight
// whose fn panicked or called runtime.Goexit, with the stack of fn's goroutine at the panic.
type PanicError = guard.PanicError

// LocalConfig configures a Local.
type LocalConfig struct {
	// Replay is how long a successful result is replayed to later callers of the same key
	// without running fn, counted from the moment fn returned. Errors and panics are never
	// replayed. 0 turns replay off, and negative is invalid. Defaults to 0.
	Replay time.Duration
	// MaxReplay bounds the number of replayed results kept. Storing one more evicts the oldest.
	// Negative is invalid. Defaults to 10000.
	MaxReplay int
	// Now reads the clock for replay expiry. Defaults to time.Now.
	Now func() time.Time
}

const defaultLocalMaxReplay = 10000

func (c *LocalConfig) setDefaults() {
	if c.MaxReplay == 0 {
		c.MaxReplay = defaultLocalMaxReplay
	}
	if c.Now == nil {
		c.Now = time.Now
	}
}

func (c *LocalConfig) validate() error {
	if c.Replay < 0 {
		return fmt.Errorf("executor: LocalConfig.Replay %v is negative", c.Replay)
	}
	if c.MaxReplay < 0 {
		return fmt.Errorf("executor: LocalConfig.MaxReplay %d is negative", c.MaxReplay)
	}
	return nil
}

// LocalResult says what a Do call got and how.
type LocalResult[V any] struct {
	// Value is fn's value. Every caller of a flight, and every replay of it, gets the same
	// V: treat pointers, slices and maps in it as read-only.
	Value V
	// Leader: this call started the flight, and fn ran with this call's context values.
	Leader bool
	// Shared: the flight's outcome went to more than one caller, like x/sync's Result.Shared.
	// False for replays.
	Shared bool
	// Replayed: the value is a stored result of an earlier successful flight. fn did not run.
	Replayed bool
}

// Local is level 1 of Flightdeck: in-process single-flight per key, built on
// golang.org/x/sync/singleflight's DoChan, with optional replay of successful results.
//
// Unlike singleflight.Group, a caller can give up through its ctx without cancelling the work
// the others wait for. A panic or runtime.Goexit in fn is re-raised in every caller's
// goroutine instead of crashing the process.
//
// A Local is safe for concurrent use and must not be copied after first use. The zero value is
// ready to use and does not replay. NewLocal builds one with replay.
type Local[V any] struct {
	g       singleflight.Group
	waiting atomic.Int64 // Do calls waiting for a flight, see Waiting

	// Set by NewLocal, read-only afterwards. replay == 0 means no replay: then Do and lead
	// never take mu.
	replay    time.Duration
	maxReplay int
	now       func() time.Time

	mu sync.Mutex // protects the fields below, taken before g's own mutex, never after
	// forgets counts Forget calls. A Do call reads it before joining a flight; a leader whose
	// count changed before its fn started does not store its result for replay, since a
	// Forget of its key may have come before it could register in running.
	forgets uint64
	// running maps a key to the leading call of its flight in progress, when the flight may
	// store its result. Forget removes the entry, so that the flight's result is not stored.
	running map[string]*localCall[V]
	entries map[string]*list.Element // key -> element of order
	order   list.List                // of *localEntry[V], oldest first
}

type localEntry[V any] struct {
	key     string
	val     V
	expires time.Time
}

// localCall is one Do call that may lead a flight. When its lead method is the function
// singleflight runs, the call runs fn and becomes the outcome that every caller of the flight
// receives in Result.Val: a caller leads iff it receives its own call. The outcome fields are
// written by the flight's goroutines before singleflight sends the result, and read only after.
type localCall[V any] struct {
	l       *Local[V]
	ctx     context.Context
	key     string
	forgets uint64 // l.forgets when the call began
	fn      func(context.Context) (V, error)

	done sync.WaitGroup // run has set the outcome
	val  V
	err  error
	pan  *PanicError // fn panicked or called runtime.Goexit
}

// NewLocal returns a Local configured by cfg, whose zero fields take their defaults. It panics
// if cfg is invalid with a negative Replay or MaxReplay: that is a programming error.
func NewLocal[V any](cfg LocalConfig) *Local[V] {
	cfg.setDefaults()
	if err := cfg.validate(); err != nil {
		panic(err)
	}
	return &Local[V]{replay: cfg.Replay, maxReplay: cfg.MaxReplay, now: cfg.Now}
}

// Do runs fn once per key among concurrent callers and gives its outcome to all of them.
//
// With replay on, a result replayed for key is returned at once, with Replayed set, without
// running fn. Otherwise the call joins the key's flight, or starts one as Leader. The leader's
// fn runs in a goroutine of its own with context.WithoutCancel(ctx). It keeps the leader's
// values but not its cancellation, so that no single caller leaving cancels the work the
// others wait for. fn is expected to bound its own run time.
//
// Every caller, the leader's included, returns ctx.Err() as soon as its own ctx is done. The
// flight goes on for the others, and its result is still stored for replay. A ctx done before
// the call returns ctx.Err() without starting or joining a flight.
//
// fn's error goes to every caller of the flight and is not replayed. If fn panics or calls
// runtime.Goexit, every caller still waiting panics in its own goroutine with a *PanicError
// holding the original value and stack, with ErrGoexit for Goexit. If all have left, the
// panic is dropped. The process never crashes from a goroutine of Local's.
func (l *Local[V]) Do(ctx context.Context, key string, fn func(ctx context.Context) (V, error)) (LocalResult[V], error) {
	if err := ctx.Err(); err != nil {
		return LocalResult[V]{}, err
	}
	var forgets uint64
	if l.replay > 0 {
		l.mu.Lock()
		v, ok := l.lookup(key)
		forgets = l.forgets
		l.mu.Unlock()
		if ok {
			return LocalResult[V]{Value: v, Replayed: true}, nil
		}
	}

	c := &localCall[V]{l: l, ctx: ctx, key: key, forgets: forgets, fn: fn}
	ch := l.g.DoChan(key, c.lead)
	l.waiting.Add(1)
	defer l.waiting.Add(-1)

	select {
	case res := <-ch:
		o := res.Val.(*localCall[V])
		if o.pan != nil {
			panic(o.pan)
		}
		return LocalResult[V]{Value: o.val, Leader: o == c, Shared: res.Shared}, o.err
	case <-ctx.Done():
		return LocalResult[V]{}, ctx.Err()
	}
}

// Forget drops key's replayed result and detaches key's flight in progress, if any: the next
// Do for key runs fn. Callers already waiting on the detached flight still get its outcome,
// but its result is not stored for replay.
func (l *Local[V]) Forget(key string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.forgets++
	delete(l.running, key)
	if el, ok := l.entries[key]; ok {
		l.order.Remove(el)
		delete(l.entries, key)
	}
	// Under mu, so that no Do can read the new forgets count and still join the old flight.
	l.g.Forget(key)
}

// Waiting reports how many Do calls are waiting for a flight right now, over all keys, the
// leaders' callers included. Replays are not counted. For metrics and tests.
func (l *Local[V]) Waiting() int { return int(l.waiting.Load()) }

// lead runs in singleflight's goroutine of a new flight. It runs fn in one more goroutine,
// because singleflight never delivers to DoChan callers when fn calls runtime.Goexit, and
// stores a success for replay. It returns c, the flight's outcome.
func (c *localCall[V]) lead() (any, error) {
	l := c.l
	registered := false
	if l.replay > 0 {
		l.mu.Lock()
		if l.forgets == c.forgets {
			if l.running == nil {
				l.running = make(map[string]*localCall[V])
			}
			l.running[c.key] = c
			registered = true
		}
		l.mu.Unlock()
	}

	c.done.Add(1)
	go c.run()
	c.done.Wait()

	if registered {
		l.mu.Lock()
		if l.running[c.key] == c {
			delete(l.running, c.key)
			if c.err == nil && c.pan == nil {
				l.store(c.key, c.val)
			}
		}
		l.mu.Unlock()
	}
	return c, nil
}

// run calls fn with the leader's values but not its cancellation, and sets the outcome
// whether fn returns, panics or calls runtime.Goexit.
func (c *localCall[V]) run() {
	defer c.done.Done()
	c.pan, c.err = guard.Run(func() (err error) {
		c.val, err = c.fn(context.WithoutCancel(c.ctx))
		return err
	}, func(p *PanicError) { c.pan = p })
}

// lookup returns key's replayed value if it has not expired. l.mu must be held.
func (l *Local[V]) lookup(key string) (V, bool) {
	el, ok := l.entries[key]
	if !ok {
		var zero V
		return zero, false
	}
	e := el.Value.(*localEntry[V])
	if l.now().Before(e.expires) {
		return e.val, true
	}
	l.order.Remove(el)
	delete(l.entries, key)
	var zero V
	return zero, false
}

// store keeps v for replay under key, dropping expired entries and then the oldest ones
// beyond maxReplay. l.mu must be held.
func (l *Local[V]) store(key string, v V) {
	now := l.now()
	if l.entries == nil {
		l.entries = make(map[string]*list.Element)
	}
	if el, ok := l.entries[key]; ok {
		l.order.Remove(el)
		delete(l.entries, key)
	}
	// Entries share one lifetime, so the oldest expire first.
	for el := l.order.Front(); el != nil; el = l.order.Front() {
		e := el.Value.(*localEntry[V])
		if l.order.Len() < l.maxReplay && now.Before(e.expires) {
			break
		}
		l.order.Remove(el)
		delete(l.entries, e.key)
	}
	l.entries[key] = l.order.PushBack(&localEntry[V]{key: key, val: v, expires: now.Add(l.replay)})
}
