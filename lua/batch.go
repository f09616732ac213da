package lua

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/flightdeck-ai/flightdeck/internal/guard"
	"github.com/flightdeck-ai/flightdeck/internal/redisconn"
)

// FCaller sends FCALLs: a client, or a Batcher.
type FCaller interface {
	FCall(ctx context.Context, function string, keys []string, args ...any) *redis.Cmd
}

// ErrBatcherClosed is the error of a call made on a closed Batcher.
var ErrBatcherClosed = errors.New("lua: batcher closed")

// ErrPipelinePanicked is the error of the calls whose pipeline's sender panicked while sending
// it; the panic goes on up the sender's own stack.
var ErrPipelinePanicked = errors.New("lua: sending the pipeline panicked")

// maxBatch bounds the calls of one pipeline.
const maxBatch = 128

// Batcher sends the FCALLs of concurrent callers to a single Redis node in pipelines, one in
// flight at a time for plain calls and one for FCallReplicated calls. Calls made while a
// pipeline is out leave together in the next one, the flight library's as one FCALL of its
// batch function (docs/DESIGN.md section 5).
type Batcher struct {
	rdb   *redis.Client
	plain lane // plain calls
	repl  lane // replicated calls from FCallReplicated, a lane of their own
}

// lane queues the calls of one kind. It has no goroutine: the caller that finds no pipeline
// of the lane in flight sends it, and hands the lane on to the first call queued behind it.
type lane struct {
	mu     sync.Mutex
	idle   sync.Cond // signalled when busy turns false
	queue  []*call   // calls not yet taken into a pipeline, oldest first
	spare  []*call   // the backing array of the last pipeline's calls, reused
	busy   bool      // a caller is sending, or has been handed the lane
	closed bool
}

// call is one FCALL waiting for its pipeline.
type call struct {
	ctx  context.Context
	fn   string
	keys []string
	args []any
	cmd  *redis.Cmd
	// done is closed when cmd holds the reply, or when the call is handed the lane (lead).
	done chan struct{}
	lead bool // set under the lane's lock: the caller sends the next pipeline
	// wait, when positive, asks for a WAIT 1 after the call, as FCallReplicated does. acked
	// and waitErr are its answer.
	wait    time.Duration
	acked   int64
	waitErr error
}

// NewBatcher returns a batcher on rdb. The batcher never closes rdb and runs no goroutine of
// its own: callers send the pipelines.
func NewBatcher(rdb *redis.Client) *Batcher {
	b := &Batcher{rdb: rdb}
	b.plain.idle.L = &b.plain.mu
	b.repl.idle.L = &b.repl.mu
	return b
}

// FCall queues the call and waits for its reply.
func (b *Batcher) FCall(ctx context.Context, function string, keys []string, args ...any) *redis.Cmd {
	cmd, _ := b.queue(&call{ctx: ctx, fn: function, keys: keys, args: args, done: make(chan struct{})})
	return cmd
}

// FCallReplicated queues the call in the lane of replicated calls and waits for its reply and
// the WAIT's. Each pipeline of that lane ends with one WAIT 1 that uses the longest timeout
// of its calls.
func (b *Batcher) FCallReplicated(ctx context.Context, timeout time.Duration, function string, keys []string, args ...any) (*redis.Cmd, int64, error) {
	c := &call{ctx: ctx, fn: function, keys: keys, args: args, done: make(chan struct{}), wait: max(timeout, time.Millisecond)}
	cmd, answered := b.queue(c)
	if !answered {
		return cmd, 0, cmd.Err()
	}
	return cmd, c.acked, c.waitErr
}

// queue adds c to its lane and waits for its reply or for its context. When no pipeline of
// the lane is out, or when the lane is handed to c, the caller sends the pipeline itself.
// answered is true when c's fields hold the reply.
func (b *Batcher) queue(c *call) (cmd *redis.Cmd, answered bool) {
	ctx := c.ctx
	if err := ctx.Err(); err != nil {
		return failed(ctx, err), false
	}
	l := b.lane(c)
	l.mu.Lock()
	if l.closed {
		l.mu.Unlock()
		return failed(ctx, ErrBatcherClosed), false
	}
	l.queue = append(l.queue, c)
	if !l.busy {
		// The lane is this caller's. It yields once before it takes the queue, so that the
		// goroutines ready to run, as the handlers of one read batch are, queue their calls
		// behind it and leave in this pipeline rather than in the next. Marked as handed the
		// lane, its call stays queued should Close run meanwhile, and lead fails it.
		l.busy, c.lead = true, true
		l.mu.Unlock()
		runtime.Gosched()
		l.mu.Lock()
		return b.lead(l, c)
	}
	l.mu.Unlock()
	select {
	case <-c.done:
		if !c.lead {
			return reply(c)
		}
		l.mu.Lock()
		return b.lead(l, c)
	case <-ctx.Done():
	}
	// The caller stops waiting. A call still queued is not sent; a call handed the lane hands
	// it on; a call already taken is answered to no one.
	l.mu.Lock()
	l.remove(c)
	next := (*call)(nil)
	if c.lead {
		next = l.handOn()
	}
	l.mu.Unlock()
	if next != nil {
		close(next.done)
	}
	return failed(ctx, ctx.Err()), false
}

// lead sends the pipeline of the calls queued first, c's among them, then hands the lane on.
// It is called with l.mu held, l.busy set and c first in l.queue (a lane is busy whenever
// calls are queued, and the lane is handed to the first), and returns with l.mu released. The
// next sender is woken before the callers of this pipeline, so that it sends while they are
// being woken.
func (b *Batcher) lead(l *lane, c *call) (*redis.Cmd, bool) {
	if l.closed {
		l.remove(c)
		b.failQueued(l)
		l.busy = false
		l.idle.Broadcast()
		l.mu.Unlock()
		return failed(c.ctx, ErrBatcherClosed), false
	}
	batch := l.take()
	l.mu.Unlock()
	b.sendOrRelease(l, batch, c)
	var buf [32]*call
	answered := append(buf[:0], batch...)
	l.mu.Lock()
	clear(batch)
	l.spare = batch[:0]
	next := l.handOn()
	l.mu.Unlock()
	if next != nil {
		close(next.done)
	}
	wake(answered, c)
	return reply(c)
}

// sendOrRelease sends batch. Should sending panic, or call runtime.Goexit, it fails the calls
// of batch with ErrPipelinePanicked, hands the lane on and wakes them before the panic goes on
// up the sender's stack, so that a recovered panic leaves no lane busy without a sender. The
// panic goes on as the *guard.PanicError that guard.Run made of it.
func (b *Batcher) sendOrRelease(l *lane, batch []*call, self *call) {
	release := func(p *guard.PanicError) {
		for _, q := range batch {
			q.cmd = failed(q.ctx, fmt.Errorf("%w: %v", ErrPipelinePanicked, p.Value))
		}
		l.mu.Lock()
		next := l.handOn()
		l.mu.Unlock()
		if next != nil {
			close(next.done)
		}
		wake(batch, self)
	}
	if p, _ := guard.Run(func() error { b.send(batch); return nil }, release); p != nil {
		release(p)
		panic(p)
	}
}

// reply is what the caller of c, answered, gets: its reply, or its context's error when the
// pipeline was cut short at its deadline or c was not sent.
func reply(c *call) (*redis.Cmd, bool) {
	err := c.cmd.Err()
	if err == nil {
		return c.cmd, true
	}
	if cerr := cutShort(c.ctx, err); cerr != nil {
		return failed(c.ctx, cerr), false
	}
	if errors.Is(err, ErrBatcherClosed) || errors.Is(err, ErrPipelinePanicked) {
		return c.cmd, false // not answered by Redis: failed by Close, or by a panicked sender
	}
	return c.cmd, true
}

// cutShort is redisconn.ContextErr(ctx) when err, a call's error, is not an answer of Redis
// (an error reply or a nil reply), and nil otherwise: a reply read after the caller's deadline
// is still its reply.
func cutShort(ctx context.Context, err error) error {
	if errors.Is(err, redis.Nil) {
		return nil
	}
	if _, ok := errors.AsType[redis.Error](err); ok {
		return nil
	}
	return redisconn.ContextErr(ctx)
}

// wake tells the callers of calls but self that their replies are in.
func wake(calls []*call, self *call) {
	for _, c := range calls {
		if c != self {
			close(c.done)
		}
	}
}

// handOn hands the lane to the first queued call, which the caller then wakes by closing its
// done, or leaves the lane idle when none is queued (or the lane is closed). l.mu is held.
func (l *lane) handOn() *call {
	if len(l.queue) == 0 || l.closed {
		l.busy = false
		l.idle.Broadcast()
		return nil
	}
	next := l.queue[0]
	next.lead = true
	return next
}

// remove takes c out of l.queue if it is there. l.mu is held.
func (l *lane) remove(c *call) {
	if i := slices.Index(l.queue, c); i >= 0 {
		l.queue = slices.Delete(l.queue, i, i+1)
	}
}

// take removes the first maxBatch calls of l.queue and returns them. l.mu is held.
func (l *lane) take() []*call {
	batch := l.spare[:0]
	l.spare = nil
	if len(l.queue) <= maxBatch {
		batch, l.queue = l.queue, batch
		return batch
	}
	batch = append(batch, l.queue[:maxBatch]...)
	n := copy(l.queue, l.queue[maxBatch:])
	clear(l.queue[n:])
	l.queue = l.queue[:n]
	return batch
}

// Close fails the calls queued in both lanes with ErrBatcherClosed, and returns once the
// pipelines in flight have returned. Calls made after it fail the same way.
func (b *Batcher) Close() error {
	lanes := []*lane{&b.plain, &b.repl}
	for _, l := range lanes {
		l.mu.Lock()
		l.closed = true
		b.failQueued(l)
		l.mu.Unlock()
	}
	for _, l := range lanes {
		l.mu.Lock()
		for l.busy {
			l.idle.Wait()
		}
		l.mu.Unlock()
	}
	return nil
}

// lane is the queue of c's kind.
func (b *Batcher) lane(c *call) *lane {
	if c.wait > 0 {
		return &b.repl
	}
	return &b.plain
}

// send runs the calls of batch whose contexts have not ended as one pipeline and sets each
// call's reply; a call whose context has ended is failed and not sent. The sender wakes them.
func (b *Batcher) send(batch []*call) {
	n := 0 // the live calls move to the front of batch, in their order
	for i, c := range batch {
		if err := c.ctx.Err(); err != nil {
			c.cmd = failed(c.ctx, err)
			continue
		}
		batch[n], batch[i] = batch[i], batch[n]
		n++
	}
	live := batch[:n]
	if len(live) == 0 {
		return
	}
	var wait time.Duration // the lane of replicated calls: the longest timeout of the batch
	for _, c := range live {
		wait = max(wait, c.wait)
	}
	b.pipeline(live, wait)
}

// pipeline sends calls as one pipeline, followed by WAIT 1 wait when wait is positive, and
// sets each call's reply. Calls of the flight library leave as one FCALL of its batch
// function (merge). The pipeline is bounded by the client's timeouts and by the latest
// deadline of its calls (none if one has none), so the caller that sends it waits no longer
// than the last caller it answers would.
func (b *Batcher) pipeline(calls []*call, wait time.Duration) {
	ctx, cancel := batchContext(calls)
	defer cancel()
	var w *redis.Cmd
	merged := mergeable(calls)
	var batch *redis.Cmd
	_, _ = b.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		for _, c := range calls {
			if merged[c] {
				continue
			}
			c.cmd = p.FCall(c.ctx, c.fn, c.keys, c.args...)
		}
		if len(merged) > 0 {
			batch = batchCall(p, calls, merged)
		}
		if wait > 0 {
			w = p.Do(ctx, "WAIT", 1, waitMillis(wait))
		}
		return nil
	})
	if batch != nil {
		splitBatch(batch, calls, merged)
	}
	var acked int64
	var werr error
	if w != nil {
		acked, werr = w.Int64()
	}
	for _, c := range calls {
		c.acked, c.waitErr = acked, werr
	}
}

// batchContext returns a context with the latest deadline of calls, or with none when one of
// them has none. Cancelling one caller's context never cuts the others' replies short.
func batchContext(calls []*call) (context.Context, context.CancelFunc) {
	var last time.Time
	for _, c := range calls {
		d, ok := c.ctx.Deadline()
		if !ok {
			return context.Background(), func() {}
		}
		if d.After(last) {
			last = d
		}
	}
	return context.WithDeadline(context.Background(), last)
}

// maxMergedArgBytes bounds the argument bytes of one merged FCALL: a call with a large result
// leaves on its own, so one script never carries many large values at once.
const maxMergedArgBytes = 1 << 20

// mergeable picks the calls of the flight library that leave as one FCALL of its batch
// function: all of them while their arguments stay under maxMergedArgBytes, when there are
// at least two.
func mergeable(calls []*call) map[*call]bool {
	var picked []*call
	size := 0
	for _, c := range calls {
		if !strings.HasPrefix(c.fn, flightLib.prefix) {
			continue
		}
		n := argBytes(c)
		if size+n > maxMergedArgBytes {
			continue
		}
		size += n
		picked = append(picked, c)
	}
	if len(picked) < 2 {
		return nil
	}
	m := make(map[*call]bool, len(picked))
	for _, c := range picked {
		m[c] = true
	}
	return m
}

// argBytes estimates the bytes of c's keys and arguments.
func argBytes(c *call) int {
	n := 0
	for _, k := range c.keys {
		n += len(k)
	}
	for _, a := range c.args {
		switch v := a.(type) {
		case string:
			n += len(v)
		case []byte:
			n += len(v)
		default:
			n += 8
		}
	}
	return n
}

// batchCall queues one FCALL of the library's batch function that runs the merged calls in
// their order.
func batchCall(p redis.Pipeliner, calls []*call, merged map[*call]bool) *redis.Cmd {
	var keys []string
	args := make([]any, 1, 1+3*len(merged))
	args[0] = len(merged)
	nargs := 0
	for _, c := range calls {
		if merged[c] {
			args = append(args, c.fn[len(flightLib.prefix):], len(c.keys), len(c.args))
			keys = append(keys, c.keys...)
			nargs += len(c.args)
		}
	}
	args = slices.Grow(args, nargs)
	for _, c := range calls {
		if merged[c] {
			args = append(args, c.args...)
		}
	}
	return p.FCall(context.Background(), flightLib.prefix+"batch", keys, args...)
}

// splitBatch hands each merged call its reply of the batch: its element of the reply array,
// or the batch's error.
func splitBatch(batch *redis.Cmd, calls []*call, merged map[*call]bool) {
	replies, err := batch.Slice()
	i := 0
	for _, c := range calls {
		if !merged[c] {
			continue
		}
		cmd := redis.NewCmd(c.ctx, "fcall", c.fn)
		switch {
		case err != nil:
			cmd.SetErr(err)
		case i >= len(replies):
			cmd.SetErr(fmt.Errorf("lua: batch answered %d replies for %d calls", len(replies), len(merged)))
		case replies[i] == nil:
			cmd.SetErr(redis.Nil)
		default:
			if e, ok := replies[i].(error); ok {
				cmd.SetErr(e)
			} else {
				cmd.SetVal(replies[i])
			}
		}
		c.cmd = cmd
		i++
	}
}

// failQueued fails the calls still queued in l when the batcher closes, but for one handed
// the lane: its caller wakes, finds the lane closed and fails its own. l.mu is held.
func (b *Batcher) failQueued(l *lane) {
	kept := l.queue[:0]
	for _, c := range l.queue {
		if c.lead {
			kept = append(kept, c)
			continue
		}
		c.cmd = failed(c.ctx, ErrBatcherClosed)
		close(c.done)
	}
	clear(l.queue[len(kept):])
	l.queue = kept
}

// failed returns a command that failed with err.
func failed(ctx context.Context, err error) *redis.Cmd {
	cmd := redis.NewCmd(ctx)
	cmd.SetErr(err)
	return cmd
}
