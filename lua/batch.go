package lua

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// FCaller sends FCALLs: a client, or a Batcher.
type FCaller interface {
	FCall(ctx context.Context, function string, keys []string, args ...any) *redis.Cmd
}

// ErrBatcherClosed is the error of a call made on a closed Batcher.
var ErrBatcherClosed = errors.New("lua: batcher closed")

// maxBatch bounds the calls of one pipeline.
const maxBatch = 128

// Batcher sends the FCALLs of concurrent callers to a single Redis node in pipelines, one in
// flight at a time for plain calls and one for FCallReplicated calls. Calls made while a
// pipeline is out leave together in the next one, the flight library's as one FCALL of its
// batch function (docs/DESIGN.md section 5).
type Batcher struct {
	rdb  *redis.Client
	in   chan *call // plain calls
	rin  chan *call // replicated calls from FCallReplicated, a lane of their own
	stop chan struct{}
	done chan struct{}
	once sync.Once
}

// call is one FCALL waiting for its pipeline.
type call struct {
	ctx  context.Context
	fn   string
	keys []string
	args []any
	cmd  *redis.Cmd
	done chan struct{}
	// wait, when positive, asks for a WAIT 1 after the call, as FCallReplicated does. acked
	// and waitErr are its answer.
	wait    time.Duration
	acked   int64
	waitErr error
}

// NewBatcher returns a running batcher on rdb. The batcher never closes rdb.
func NewBatcher(rdb *redis.Client) *Batcher {
	b := &Batcher{rdb: rdb, in: make(chan *call, maxBatch), rin: make(chan *call, maxBatch),
		stop: make(chan struct{}), done: make(chan struct{})}
	var lanes sync.WaitGroup
	lanes.Add(2)
	go func() { defer lanes.Done(); b.loop(b.in) }()
	go func() { defer lanes.Done(); b.loop(b.rin) }()
	go func() { lanes.Wait(); close(b.done) }()
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

// queue hands c to the loop and waits for its reply or for its context. answered is true
// when c's fields hold the loop's answer.
func (b *Batcher) queue(c *call) (cmd *redis.Cmd, answered bool) {
	ctx := c.ctx
	select {
	case b.lane(c) <- c:
	case <-ctx.Done():
		return failed(ctx, ctx.Err()), false
	case <-b.stop:
		return failed(ctx, ErrBatcherClosed), false
	}
	select {
	case <-c.done:
		return c.cmd, true
	case <-ctx.Done():
		return failed(ctx, ctx.Err()), false
	case <-b.done:
		// Stopped: the call was answered or failed before, or never taken.
		select {
		case <-c.done:
			return c.cmd, true
		default:
			return failed(ctx, ErrBatcherClosed), false
		}
	}
}

// Close stops the batcher once the pipeline in flight has returned. Calls queued behind it
// fail with ErrBatcherClosed.
func (b *Batcher) Close() error {
	b.once.Do(func() { close(b.stop) })
	<-b.done
	return nil
}

// lane is the queue of c's kind.
func (b *Batcher) lane(c *call) chan *call {
	if c.wait > 0 {
		return b.rin
	}
	return b.in
}

// loop sends the calls of one lane, one pipeline in flight at a time.
func (b *Batcher) loop(in chan *call) {
	batch := make([]*call, 0, maxBatch)
	for {
		batch = batch[:0]
		select {
		case c := <-in:
			batch = append(batch, c)
		case <-b.stop:
			b.failQueued(in)
			return
		}
	drain:
		for len(batch) < maxBatch {
			select {
			case c := <-in:
				batch = append(batch, c)
			default:
				break drain
			}
		}
		b.send(batch)
	}
}

// send runs the calls whose callers still wait as one pipeline and hands each its reply.
func (b *Batcher) send(batch []*call) {
	live := batch[:0:0]
	for _, c := range batch {
		if err := c.ctx.Err(); err != nil {
			c.cmd = failed(c.ctx, err)
			close(c.done)
			continue
		}
		live = append(live, c)
	}
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
// hands each call its reply. Calls of the flight library leave as one FCALL of its batch
// function (merge). The client's timeouts bound the pipeline's I/O. A caller whose context
// ends first stops waiting, and the others still get their replies.
func (b *Batcher) pipeline(calls []*call, wait time.Duration) {
	var w *redis.Cmd
	merged := mergeable(calls)
	var batch *redis.Cmd
	_, _ = b.rdb.Pipelined(context.Background(), func(p redis.Pipeliner) error {
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
			w = p.Do(context.Background(), "WAIT", 1, waitMillis(wait))
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
		close(c.done)
	}
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

// failQueued fails the calls still queued in a lane when the batcher stops.
func (b *Batcher) failQueued(in chan *call) {
	for {
		select {
		case c := <-in:
			c.cmd = failed(c.ctx, ErrBatcherClosed)
			close(c.done)
		default:
			return
		}
	}
}

// failed returns a command that failed with err.
func failed(ctx context.Context, err error) *redis.Cmd {
	cmd := redis.NewCmd(ctx)
	cmd.SetErr(err)
	return cmd
}
