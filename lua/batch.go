package lua

import (
	"context"
	"errors"
	"sync"

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

// Batcher sends the FCALLs of concurrent callers in pipelines, one pipeline in flight at a
// time: the calls made while a pipeline is out leave together in the next one (one write and
// one read for all of them, on the caller's side and on Redis's). A lone call leaves at once.
// A caller waits for its reply or for its own context, whichever comes first; a call whose
// context ended before its pipeline left is not sent. The pipeline itself is bounded by the
// client's read and write timeouts, not by any caller's context. Use it on a single Redis
// node; Close stops it.
type Batcher struct {
	rdb  *redis.Client
	in   chan *call
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
}

// NewBatcher returns a running batcher on rdb (which it does not close).
func NewBatcher(rdb *redis.Client) *Batcher {
	b := &Batcher{rdb: rdb, in: make(chan *call, maxBatch), stop: make(chan struct{}), done: make(chan struct{})}
	go b.loop()
	return b
}

// FCall queues the call and waits for its reply.
func (b *Batcher) FCall(ctx context.Context, function string, keys []string, args ...any) *redis.Cmd {
	c := &call{ctx: ctx, fn: function, keys: keys, args: args, done: make(chan struct{})}
	select {
	case b.in <- c:
	case <-ctx.Done():
		return failed(ctx, ctx.Err())
	case <-b.stop:
		return failed(ctx, ErrBatcherClosed)
	}
	select {
	case <-c.done:
		return c.cmd
	case <-ctx.Done():
		return failed(ctx, ctx.Err())
	case <-b.done:
		// Stopped: the call was answered or failed before, or never taken.
		select {
		case <-c.done:
			return c.cmd
		default:
			return failed(ctx, ErrBatcherClosed)
		}
	}
}

// Close stops the batcher once the pipeline in flight returned; calls queued behind it fail
// with ErrBatcherClosed.
func (b *Batcher) Close() error {
	b.once.Do(func() { close(b.stop) })
	<-b.done
	return nil
}

func (b *Batcher) loop() {
	defer close(b.done)
	batch := make([]*call, 0, maxBatch)
	for {
		batch = batch[:0]
		select {
		case c := <-b.in:
			batch = append(batch, c)
		case <-b.stop:
			b.failQueued()
			return
		}
	drain:
		for len(batch) < maxBatch {
			select {
			case c := <-b.in:
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
	// The pipeline's I/O is bounded by the client's timeouts; a caller whose context ends
	// first stops waiting, the others still get their replies.
	_, _ = b.rdb.Pipelined(context.Background(), func(p redis.Pipeliner) error {
		for _, c := range live {
			c.cmd = p.FCall(c.ctx, c.fn, c.keys, c.args...)
		}
		return nil
	})
	for _, c := range live {
		close(c.done)
	}
}

// failQueued fails the calls still queued when the batcher stops.
func (b *Batcher) failQueued() {
	for {
		select {
		case c := <-b.in:
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
