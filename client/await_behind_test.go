package client_test

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/flightdeck-ai/flightdeck/client"
	"github.com/flightdeck-ai/flightdeck/internal/testkit/redistest"
	"github.com/flightdeck-ai/flightdeck/topics"
)

// entriesRead counts the stream entries XREAD and XRANGE replies carry.
type entriesRead struct{ n atomic.Int64 }

func (h *entriesRead) DialHook(next redis.DialHook) redis.DialHook { return next }
func (h *entriesRead) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}
func (h *entriesRead) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		err := next(ctx, cmd)
		switch c := cmd.(type) {
		case *redis.XStreamSliceCmd:
			for _, s := range c.Val() {
				h.n.Add(int64(len(s.Messages)))
			}
		case *redis.XMessageSliceCmd:
			h.n.Add(int64(len(c.Val())))
		}
		return err
	}
}

// TestAwaitReadsFromItsTask: with 3,000 other events in the seconds before a task, Await
// finds the task's event without reading them: an await costs Redis the events after its
// task, not the last 5 s of the stream.
func TestAwaitReadsFromItsTask(t *testing.T) {
	t.Parallel()
	b := setup(t, client.Config{})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	others := make([]topics.Event, 3000)
	for i := range others {
		others[i] = eventFor(fmt.Sprintf("other-%d", i), stageA, topics.SharedOwner)
	}
	if err := b.w.PublishEvents(ctx, others...); err != nil {
		t.Fatal(err)
	}
	// The others are older than the millisecond before the task's, from which Await reads.
	time.Sleep(5 * time.Millisecond)
	r, err := b.c.Enqueue(ctx, newTask(stageA, `{"q":"mine"}`))
	if err != nil {
		t.Fatal(err)
	}
	if err := b.w.PublishEvents(ctx, eventOf(r, topics.SharedOwner)); err != nil {
		t.Fatal(err)
	}
	h := &entriesRead{}
	rdb := redis.NewClient(b.r.Client.Options())
	defer rdb.Close()
	rdb.AddHook(h)
	c, err := client.New(client.Config{Client: rdb, Keyspace: b.ks})
	if err != nil {
		t.Fatal(err)
	}
	ev, err := c.Await(ctx, r)
	if err != nil || ev.TaskID != r.TaskID {
		t.Fatalf("Await = %+v, %v", ev, err)
	}
	if n := h.n.Load(); n > 10 {
		t.Errorf("Await read %d stream entries for one event behind 3,000 others", n)
	}
}

// TestAwaitEventBehindItsTask: an event whose id is earlier than its task's entry, as after
// a failover to a replica whose clock is behind, is still found, from the window Await reads
// behind its task once it has waited a second, behind 2,500 other events.
func TestAwaitEventBehindItsTask(t *testing.T) {
	t.Parallel()
	b := setup(t, client.Config{})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	r, own, publish := behindTask(t, ctx, b.c, b.r.Client, b.ks)
	// 2,500 other events first, so that the window behind takes more than one read.
	pipe := b.r.Client.Pipeline()
	for i := range 2500 {
		o, err := topics.EncodeEvent(eventFor(fmt.Sprintf("other-%d", i), stageA, topics.SharedOwner))
		if err != nil {
			t.Fatal(err)
		}
		pipe.XAdd(ctx, &redis.XAddArgs{Stream: b.ks.Results(stageA), ID: strconv.FormatInt(own-3000, 10) + "-" + strconv.Itoa(i+1),
			Values: []any{topics.FieldUUID, "other", topics.FieldPayload, o}})
	}
	if _, err := pipe.Exec(ctx); err != nil {
		t.Fatal(err)
	}
	publish(-2000, 0)
	ev, err := b.c.Await(ctx, r)
	if err != nil || ev.TaskID != r.TaskID {
		t.Fatalf("Await = %+v, %v; want the event 2 s behind the task's entry", ev, err)
	}
}

// TestAwaitEventInItsTaskMillisecond: an event with the id "<ms>-0" of the task's own entry's
// millisecond, as a fast owner's can get, is found at once.
func TestAwaitEventInItsTaskMillisecond(t *testing.T) {
	t.Parallel()
	b := setup(t, client.Config{})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	r, _, publish := behindTask(t, ctx, b.c, b.r.Client, b.ks)
	publish(0, 0)
	start := time.Now()
	ev, err := b.c.Await(ctx, r)
	if err != nil || ev.TaskID != r.TaskID {
		t.Fatalf("Await = %+v, %v", ev, err)
	}
	if d := time.Since(start); d >= 900*time.Millisecond { // the window behind is read after 1 s
		t.Errorf("Await took %v for an event already in its task's millisecond", d)
	}
}

// TestAwaitOnClusterAllowsSkew: on Redis Cluster, where the task stream and the result stream
// live on nodes with clocks of their own, an event stamped 100 ms before its task's entry is
// found at once, not after the window behind is read.
func TestAwaitOnClusterAllowsSkew(t *testing.T) {
	t.Parallel()
	cl := redistest.StartCluster(t, 3)
	rdb := cl.Client()
	ks := topics.Keyspace{Prefix: redistest.Prefix()}
	c, err := client.New(client.Config{Client: rdb, Keyspace: ks})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	r, _, publish := behindTask(t, ctx, c, rdb, ks)
	publish(-100, 0)
	start := time.Now()
	ev, err := c.Await(ctx, r)
	if err != nil || ev.TaskID != r.TaskID {
		t.Fatalf("Await = %+v, %v", ev, err)
	}
	if d := time.Since(start); d >= 900*time.Millisecond { // the window behind is read after 1 s
		t.Errorf("Await took %v for an event 100 ms before its task on a cluster", d)
	}
}

// behindTask enqueues a task through c and returns its receipt, its entry's millisecond, and
// a function that adds its event to the result stream under the id "<that ms + delta>-<seq>".
func behindTask(t *testing.T, ctx context.Context, c *client.Client, rdb redis.UniversalClient, ks topics.Keyspace) (client.Receipt, int64, func(delta int64, seq int)) {
	t.Helper()
	r, err := c.Enqueue(ctx, newTask(stageA, `{"q":"`+t.Name()+`"}`))
	if err != nil {
		t.Fatal(err)
	}
	ms, _, _ := strings.Cut(r.StreamID, "-")
	own, err := strconv.ParseInt(ms, 10, 64)
	if err != nil {
		t.Fatal(err)
	}
	p, err := topics.EncodeEvent(eventOf(r, topics.SharedOwner))
	if err != nil {
		t.Fatal(err)
	}
	return r, own, func(delta int64, seq int) {
		if err := rdb.XAdd(context.Background(), &redis.XAddArgs{Stream: ks.Results(stageA),
			ID:     strconv.FormatInt(own+delta, 10) + "-" + strconv.Itoa(seq),
			Values: []any{topics.FieldUUID, "behind", topics.FieldPayload, p}}).Err(); err != nil {
			t.Error(err)
		}
	}
}

// TestAwaitWindowBehind: events stamped behind their task's entry are found from the window
// Await reads behind it:
//   - landing later: on a quiet result stream, an event 2 s behind published after Await
//     first read the window (as a node whose clock is behind would publish it), since the
//     window is read again until the stream holds an entry past it;
//   - short wait: with a wait shorter than a second, such as the gateway's look for a task's
//     event, at once;
//   - at the cursor: with the id the forward read starts after (the millisecond before its
//     task's, sequence 0).
func TestAwaitWindowBehind(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name         string
		delta        int64
		publishAfter time.Duration // 0: before Await
		wait         time.Duration
	}{
		{"landing later", -2000, 1800 * time.Millisecond, 10 * time.Second},
		{"short wait", -2000, 0, 300 * time.Millisecond},
		{"at the cursor", -1, 0, 10 * time.Second},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			b := setup(t, client.Config{})
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			r, _, publish := behindTask(t, ctx, b.c, b.r.Client, b.ks)
			if tc.publishAfter > 0 {
				time.AfterFunc(tc.publishAfter, func() { publish(tc.delta, 0) })
			} else {
				publish(tc.delta, 0)
			}
			wctx, wcancel := context.WithTimeout(ctx, tc.wait)
			defer wcancel()
			ev, err := b.c.Await(wctx, r)
			if err != nil || ev.TaskID != r.TaskID {
				t.Fatalf("Await within %v = %+v, %v", tc.wait, ev, err)
			}
		})
	}
}
