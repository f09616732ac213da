package client_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/redis/go-redis/v9"

	"github.com/flightdeck-ai/flightdeck/client"
	"github.com/flightdeck-ai/flightdeck/flight"
	"github.com/flightdeck-ai/flightdeck/internal/broker"
	"github.com/flightdeck-ai/flightdeck/internal/testkit/redistest"
	"github.com/flightdeck-ai/flightdeck/topics"
)

const (
	stageA = "interview-evaluation"
	stageB = "interview-followup"
)

// testBundle is what most tests need: a client on a private Redis and a writer that plays
// the consumer's part.
type testBundle struct {
	r  *redistest.Target
	ks topics.Keyspace
	c  *client.Client
	w  broker.Writer
}

func setup(t *testing.T, cfg client.Config) *testBundle {
	t.Helper()
	r := redistest.New(t)
	ks := topics.Keyspace{Prefix: r.Prefix}
	cfg.Client, cfg.Keyspace = r.Client, ks
	c, err := client.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return &testBundle{r: r, ks: ks, c: c, w: broker.Writer{Client: r.Client, Keyspace: ks}}
}

func newTask(stage, input string) topics.Task {
	return topics.Task{Stage: stage, Tenant: "acme", Input: json.RawMessage(input)}
}

func eventFor(taskID, stage string, shared topics.Shared) topics.Event {
	return topics.Event{
		TaskID: taskID, Stage: stage, Tenant: "acme", RequestKey: "k-" + taskID,
		Status: topics.StatusSucceeded, Shared: shared, Result: json.RawMessage(`{"ok":true}`),
		FinishedAt: time.Now(),
	}
}

// eventOf is eventFor the task of r, with its tenant and request key.
func eventOf(r client.Receipt, shared topics.Shared) topics.Event {
	e := eventFor(r.TaskID, r.Stage, shared)
	e.Tenant, e.RequestKey = r.Tenant, r.RequestKey
	return e
}

// consume plays a consumer: it reads stage's task stream from the start and publishes one
// SUCCEEDED event per task until ctx ends.
func (b *testBundle) consume(ctx context.Context, t *testing.T, stage string) {
	t.Helper()
	var wg sync.WaitGroup
	wg.Add(1)
	t.Cleanup(wg.Wait)
	go func() {
		defer wg.Done()
		last := "0"
		for ctx.Err() == nil {
			res, err := b.r.Client.XRead(ctx, &redis.XReadArgs{
				Streams: []string{b.ks.Tasks(stage), last}, Block: 100 * time.Millisecond,
			}).Result()
			if err != nil {
				continue
			}
			for _, m := range res[0].Messages {
				last = m.ID
				p, _ := m.Values[topics.FieldPayload].(string)
				task, err := topics.DecodeTask([]byte(p), topics.Limits{})
				if err != nil {
					t.Errorf("consumer: %v", err)
					continue
				}
				key, err := flight.TaskKey(task)
				if err != nil {
					t.Errorf("consumer: %v", err)
					continue
				}
				ev := eventFor(task.TaskID, task.Stage, topics.SharedOwner)
				ev.Tenant, ev.RequestKey = task.Tenant, key
				if err := b.w.PublishEvents(ctx, ev); err != nil && ctx.Err() == nil {
					t.Errorf("consumer: %v", err)
				}
			}
		}
	}()
}

func TestEnqueueAwait(t *testing.T) {
	t.Parallel()
	b := setup(t, client.Config{})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	b.consume(ctx, t, stageA)

	before := time.Now().Truncate(time.Millisecond)
	r, err := b.c.Enqueue(ctx, newTask(stageA, `{"q":1}`))
	if err != nil {
		t.Fatal(err)
	}
	if r.TaskID == "" || r.Stage != stageA || r.StreamID == "" || r.EnqueuedAt.Before(before) {
		t.Fatalf("receipt = %+v", r)
	}
	e, err := b.c.Await(ctx, r)
	if err != nil {
		t.Fatal(err)
	}
	if e.TaskID != r.TaskID || e.Status != topics.StatusSucceeded || string(e.Result) != `{"ok":true}` {
		t.Errorf("Await = %+v", e)
	}

	// The payload on the stream carries the generated id and enqueue time.
	msgs := b.r.Client.XRange(ctx, b.ks.Tasks(stageA), "-", "+").Val()
	if len(msgs) != 1 || msgs[0].ID != r.StreamID {
		t.Fatalf("task stream = %+v", msgs)
	}
	task, err := topics.DecodeTask([]byte(msgs[0].Values[topics.FieldPayload].(string)), topics.Limits{})
	if err != nil {
		t.Fatal(err)
	}
	if task.TaskID != r.TaskID || task.EnqueuedAt != topics.FormatTime(r.EnqueuedAt) {
		t.Errorf("stored task = %+v, receipt %+v", task, r)
	}
}

func TestAwaitEventPublishedBeforeAwait(t *testing.T) {
	t.Parallel()
	b := setup(t, client.Config{})
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	tk := newTask(stageA, `{"q":2}`)
	tk.TaskID = "given-id"
	r, err := b.c.Enqueue(ctx, tk)
	if err != nil {
		t.Fatal(err)
	}
	if r.TaskID != "given-id" {
		t.Fatalf("TaskID = %q, want the given one", r.TaskID)
	}
	// Another task's event, then ours, then ours again: all before Await.
	if err := b.w.PublishEvents(ctx, eventFor("other", stageA, topics.SharedOwner),
		eventOf(r, topics.SharedHit), eventOf(r, topics.SharedOwner)); err != nil {
		t.Fatal(err)
	}
	e, err := b.c.Await(ctx, r)
	if err != nil {
		t.Fatal(err)
	}
	if e.TaskID != r.TaskID || e.Shared != topics.SharedHit {
		t.Errorf("Await = %+v, want the first event of %s", e, r.TaskID)
	}
}

func TestAwaitContextEnds(t *testing.T) {
	t.Parallel()
	b := setup(t, client.Config{})
	r, err := b.c.Enqueue(context.Background(), newTask(stageA, `{"q":3}`))
	if err != nil {
		t.Fatal(err)
	}
	t.Run("Deadline", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
		defer cancel()
		start := time.Now()
		_, err := b.c.Await(ctx, r)
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("Await = %v, want DeadlineExceeded", err)
		}
		if d := time.Since(start); d > 1500*time.Millisecond {
			t.Errorf("Await took %v after a 300ms deadline", d)
		}
	})
	t.Run("NobodyServesTheStage", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
		defer cancel()
		_, err := b.c.Await(ctx, r)
		if !errors.Is(err, context.DeadlineExceeded) || !errors.Is(err, client.ErrUnknownStage) {
			t.Fatalf("Await = %v, want DeadlineExceeded and ErrUnknownStage", err)
		}
		if err := b.c.CheckStages(context.Background(), stageA); err == nil {
			t.Fatal("the stage is registered: the test proves nothing")
		}
	})
	t.Run("Cancel", func(t *testing.T) {
		ctx, cancel := context.WithCancel(context.Background())
		time.AfterFunc(100*time.Millisecond, cancel)
		start := time.Now()
		_, err := b.c.Await(ctx, r)
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("Await = %v, want Canceled", err)
		}
		if d := time.Since(start); d > 1500*time.Millisecond {
			t.Errorf("Await took %v after cancel", d)
		}
	})
}

func TestSubscribe(t *testing.T) {
	t.Parallel()
	b := setup(t, client.Config{})
	ctx := context.Background()
	old := eventFor("old", stageA, topics.SharedOwner)
	if err := b.w.PublishEvents(ctx, old); err != nil {
		t.Fatal(err)
	}

	t.Run("NewOnlyInOrderAndClosesOnCancel", func(t *testing.T) {
		sctx, cancel := context.WithCancel(ctx)
		defer cancel()
		ch, err := b.c.Subscribe(sctx, []string{stageA, stageB}, "$")
		if err != nil {
			t.Fatal(err)
		}
		var want []string
		for i := range 20 {
			id := fmt.Sprintf("n%02d", i)
			want = append(want, id)
			if err := b.w.PublishEvents(ctx, eventFor(id, stageA, topics.SharedOwner)); err != nil {
				t.Fatal(err)
			}
		}
		if err := b.w.PublishEvents(ctx, eventFor("b1", stageB, topics.SharedOwner)); err != nil {
			t.Fatal(err)
		}
		// A malformed entry is handed over with Err set.
		b.r.Client.XAdd(ctx, &redis.XAddArgs{Stream: b.ks.Results(stageA), Values: []any{topics.FieldUUID, "u", topics.FieldPayload, "{"}})

		var gotA []string
		var gotB, bad int
		timeout := time.After(5 * time.Second)
		for len(gotA) < 20 || gotB < 1 || bad < 1 {
			select {
			case se := <-ch:
				switch {
				case se.Err != nil:
					bad++
				case se.Stream == b.ks.Results(stageA):
					gotA = append(gotA, se.Event.TaskID)
				default:
					gotB++
				}
			case <-timeout:
				t.Fatalf("got %v, %d, %d so far", gotA, gotB, bad)
			}
		}
		if diff := cmp.Diff(want, gotA); diff != "" {
			t.Errorf("events of %s (-want +got):\n%s", stageA, diff)
		}
		cancel()
		select {
		case se, ok := <-ch:
			if ok {
				t.Fatalf("unexpected entry after cancel: %+v", se)
			}
		case <-time.After(2 * time.Second):
			t.Fatal("channel not closed within 2s of cancel")
		}
	})

	t.Run("FromZeroReadsHistory", func(t *testing.T) {
		sctx, cancel := context.WithCancel(ctx)
		defer cancel()
		ch, err := b.c.Subscribe(sctx, []string{stageA}, "0")
		if err != nil {
			t.Fatal(err)
		}
		select {
		case se := <-ch:
			if se.Event.TaskID != "old" {
				t.Errorf("first entry = %+v, want the old event", se)
			}
		case <-time.After(3 * time.Second):
			t.Fatal("no entry")
		}
	})

	t.Run("BadArguments", func(t *testing.T) {
		for _, tc := range []struct {
			stages []string
			from   string
		}{{nil, "$"}, {[]string{stageA}, "latest"}, {[]string{"a:b"}, "0"}, {[]string{stageA}, "1-x"}} {
			if _, err := b.c.Subscribe(ctx, tc.stages, tc.from); err == nil {
				t.Errorf("Subscribe(%v, %q) = nil error", tc.stages, tc.from)
			}
		}
	})
}

func TestSubscribeSurvivesRedisRestart(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	var errs []error
	b := setup(t, client.Config{})
	if b.r.Server == nil {
		t.Skip("REDIS_URL is set: no private server to restart")
	}
	// A client without go-redis's own retries, so that the outage reaches the read loop.
	rdb := redis.NewClient(&redis.Options{Addr: b.r.Server.Addr(), MaxRetries: -1})
	defer rdb.Close()
	c, err := client.New(client.Config{Client: rdb, Keyspace: b.ks,
		Errors: func(err error) { mu.Lock(); errs = append(errs, err); mu.Unlock() }})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	ch, err := c.Subscribe(ctx, []string{stageA}, "0")
	if err != nil {
		t.Fatal(err)
	}
	b.r.Server.Stop()
	// Stay down until the read loop has seen the outage (under load it may take a while to
	// come back to its XREAD).
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); {
		mu.Lock()
		n := len(errs)
		mu.Unlock()
		if n > 0 {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	b.r.Server.Restart()
	if err := b.w.PublishEvents(ctx, eventFor("after-restart", stageA, topics.SharedOwner)); err != nil {
		t.Fatal(err)
	}
	select {
	case se := <-ch:
		if se.Event.TaskID != "after-restart" {
			t.Errorf("entry = %+v", se)
		}
	case <-ctx.Done():
		t.Fatal("no entry after the restart")
	}
	mu.Lock()
	defer mu.Unlock()
	if len(errs) == 0 {
		t.Error("Config.Errors was not called while Redis was down")
	}
}

func TestCollect(t *testing.T) {
	t.Parallel()
	b := setup(t, client.Config{})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var tasks []topics.Task
	for i := range 100 {
		tasks = append(tasks, newTask([]string{stageA, stageB}[i%2], fmt.Sprintf(`{"i":%d}`, i)))
	}
	receipts, err := b.c.EnqueueBatch(ctx, tasks)
	if err != nil {
		t.Fatal(err)
	}
	// Half the events before Collect, each published twice, plus foreign ones.
	publish := func(rs []client.Receipt) {
		var evs []topics.Event
		for _, r := range rs {
			evs = append(evs, eventOf(r, topics.SharedOwner), eventFor("foreign-"+r.TaskID, r.Stage, topics.SharedOwner))
		}
		for _, r := range rs {
			evs = append(evs, eventOf(r, topics.SharedFollower))
		}
		if err := b.w.PublishEvents(ctx, evs...); err != nil {
			t.Error(err)
		}
	}
	publish(receipts[:50])
	time.AfterFunc(200*time.Millisecond, func() { publish(receipts[50:]) })

	calls := map[string]int{}
	err = b.c.Collect(ctx, receipts, func(e topics.Event) {
		calls[e.TaskID]++
		if e.Shared != topics.SharedOwner {
			t.Errorf("fn got %+v, want the first (owner) event", e)
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(calls) != len(receipts) {
		t.Errorf("fn called for %d tasks, want %d", len(calls), len(receipts))
	}
	for id, n := range calls {
		if n != 1 {
			t.Errorf("fn called %d times for %s", n, id)
		}
	}

	t.Run("TimeoutReportsMissing", func(t *testing.T) {
		r, err := b.c.Enqueue(ctx, newTask(stageA, `{"never":1}`))
		if err != nil {
			t.Fatal(err)
		}
		tctx, tcancel := context.WithTimeout(ctx, 300*time.Millisecond)
		defer tcancel()
		n := 0
		err = b.c.Collect(tctx, append(slices.Clone(receipts[:3]), r), func(topics.Event) { n++ })
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("Collect = %v, want DeadlineExceeded", err)
		}
		if n != 3 {
			t.Errorf("fn called %d times, want 3", n)
		}
	})
}

func TestEnqueueBatch(t *testing.T) {
	t.Parallel()
	b := setup(t, client.Config{})
	ctx := context.Background()
	const n = 2000
	tasks := make([]topics.Task, n)
	for i := range tasks {
		tasks[i] = newTask([]string{stageA, stageB}[i%2], fmt.Sprintf(`{"i":%d}`, i))
	}
	tasks[7].TaskID = "fixed-7"
	receipts, err := b.c.EnqueueBatch(ctx, tasks)
	if err != nil {
		t.Fatal(err)
	}
	if len(receipts) != n {
		t.Fatalf("%d receipts, want %d", len(receipts), n)
	}
	if receipts[7].TaskID != "fixed-7" {
		t.Errorf("receipt 7 = %+v", receipts[7])
	}
	ids := map[string]bool{}
	for i, r := range receipts {
		if r.Stage != tasks[i].Stage || r.StreamID == "" || ids[r.TaskID] {
			t.Fatalf("receipt %d = %+v", i, r)
		}
		ids[r.TaskID] = true
	}
	a, bb := b.r.Client.XLen(ctx, b.ks.Tasks(stageA)).Val(), b.r.Client.XLen(ctx, b.ks.Tasks(stageB)).Val()
	if a != n/2 || bb != n/2 {
		t.Errorf("stream lengths %d, %d; want %d each", a, bb, n/2)
	}
	// Entries are in task order and carry the receipts' ids.
	msgs := b.r.Client.XRange(ctx, b.ks.Tasks(stageB), "-", "+").Val()
	for j, m := range msgs {
		r := receipts[2*j+1]
		task, err := topics.DecodeTask([]byte(m.Values[topics.FieldPayload].(string)), topics.Limits{})
		if err != nil || m.ID != r.StreamID || task.TaskID != r.TaskID {
			t.Fatalf("entry %d = %s %+v (%v), receipt %+v", j, m.ID, task, err, r)
		}
	}
}

func TestEnqueueInvalid(t *testing.T) {
	t.Parallel()
	b := setup(t, client.Config{Limits: topics.Limits{Stages: []string{stageA}}})
	ctx := context.Background()
	for name, tk := range map[string]topics.Task{
		"MissingTenant": {Stage: stageA, Input: json.RawMessage(`1`)},
		"NullInput":     {Stage: stageA, Tenant: "acme", Input: json.RawMessage(`null`)},
		"UnknownStage":  newTask(stageB, `1`),
		"BadDeadline":   {Stage: stageA, Tenant: "acme", Input: json.RawMessage(`1`), Deadline: "tomorrow"},
		"NotBeforeTooFar": {Stage: stageA, Tenant: "acme", Input: json.RawMessage(`1`),
			NotBefore: topics.FormatTime(time.Now().Add(topics.DefaultScheduleHorizon + time.Hour))},
	} {
		if _, err := b.c.Enqueue(ctx, tk); !errors.Is(err, topics.ErrInvalidTask) {
			t.Errorf("%s: Enqueue = %v, want ErrInvalidTask", name, err)
		}
	}
	_, err := b.c.EnqueueBatch(ctx, []topics.Task{newTask(stageA, `1`), {Stage: stageA, Tenant: "ACME", Input: json.RawMessage(`1`)}})
	if !errors.Is(err, topics.ErrInvalidTask) {
		t.Errorf("EnqueueBatch = %v, want ErrInvalidTask", err)
	}
	// The horizon is the client's to set: a shorter one refuses a nearer notBefore, with the
	// reason a consumer would dead-letter it with.
	short := setup(t, client.Config{ScheduleHorizon: time.Hour})
	_, err = short.c.Enqueue(ctx, topics.Task{Stage: stageA, Tenant: "acme", Input: json.RawMessage(`1`),
		NotBefore: topics.FormatTime(time.Now().Add(2 * time.Hour))})
	if ite, ok := errors.AsType[*topics.InvalidTaskError](err); !ok || ite.Reason != topics.ReasonNotBeforeTooFar ||
		!strings.Contains(err.Error(), "1h0m0s") {
		t.Errorf("Enqueue 2h ahead with a 1h horizon = %v, want not_before_too_far naming 1h0m0s", err)
	}
	for _, bb := range []*testBundle{b, short} {
		if n := bb.r.Client.XLen(ctx, bb.ks.Tasks(stageA)).Val(); n != 0 {
			t.Errorf("%d entries written for invalid tasks", n)
		}
	}
	if _, err := client.New(client.Config{}); err == nil {
		t.Error("New without a Redis client succeeded")
	}
}

func TestCancel(t *testing.T) {
	t.Parallel()
	b := setup(t, client.Config{})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	coord, err := flight.NewCoordinator(flight.Config{Client: b.r.Client, Keyspace: b.ks})
	if err != nil {
		t.Fatal(err)
	}
	const key = "ai:interview-evaluation:v1:acme:abc123"
	stream := b.ks.Tasks(stageA)
	if err := b.r.Client.XGroupCreateMkStream(ctx, stream, topics.ConsumerGroup, "$").Err(); err != nil {
		t.Fatal(err)
	}
	// acq acquires for a task entry that consumer c1 read, as a consumer would.
	acq := func(owner, task string) flight.Decision {
		b.r.Client.XAdd(ctx, &redis.XAddArgs{Stream: stream, Values: []any{"task", task}})
		rd, err := b.r.Client.XReadGroup(ctx, &redis.XReadGroupArgs{Group: topics.ConsumerGroup, Consumer: "c1",
			Streams: []string{stream, ">"}, Count: 1, Block: -1}).Result()
		if err != nil {
			t.Fatal(err)
		}
		tk := flight.Task{ID: task, Stream: stream, Entry: rd[0].Messages[0].ID}
		d, err := coord.Acquire(ctx, flight.AcquireParams{Key: key, OwnerID: owner, Task: tk, Stage: stageA, Tenant: "acme"})
		if err != nil {
			t.Fatal(err)
		}
		return d
	}
	if d := acq("c1", "owner-task"); d.Action != flight.ActionOwner {
		t.Fatalf("first acquire = %+v", d)
	}
	for _, id := range []string{"p1", "p2"} {
		if d := acq("c2", id); d.Action != flight.ActionFollowerWait || d.Reason != flight.ReasonParked {
			t.Fatalf("acquire %s = %+v", id, d)
		}
	}
	m, err := b.c.Inspect(ctx, key)
	if err != nil || m.Status != flight.StatusPending || len(m.Parked) != 2 {
		t.Fatalf("Inspect = %+v, %v", m, err)
	}

	sub, err := b.c.Subscribe(ctx, []string{stageA}, "$")
	if err != nil {
		t.Fatal(err)
	}
	res, err := b.c.Cancel(ctx, key, "user left")
	if err != nil {
		t.Fatal(err)
	}
	want := client.CancelResult{RequestKey: key, Stage: stageA, Tenant: "acme", OwnerTaskID: "owner-task",
		Reason: "user left", Previous: flight.StatusPending, Answered: 2}
	if diff := cmp.Diff(want, res); diff != "" {
		t.Errorf("Cancel (-want +got):\n%s", diff)
	}
	got := map[string]topics.Event{}
	for len(got) < 2 {
		select {
		case se := <-sub:
			got[se.Event.TaskID] = se.Event
		case <-ctx.Done():
			t.Fatalf("got %d events", len(got))
		}
	}
	for _, id := range []string{"p1", "p2"} {
		e := got[id]
		if e.Status != topics.StatusCancelled || e.Shared != topics.SharedFollower || e.ErrorType != "cancelled" ||
			e.Error != "user left" || e.Stage != stageA || e.Tenant != "acme" || e.RequestKey != key {
			t.Errorf("event of %s = %+v", id, e)
		}
	}
	m, err = b.c.Inspect(ctx, key)
	if err != nil || m.Status != flight.StatusCancelled || len(m.Parked) != 0 || m.Error != "user left" {
		t.Errorf("after Cancel: Inspect = %+v, %v", m, err)
	}
	// A second cancel says so, keeps the first reason, and finds nothing left to answer.
	if res, err := b.c.Cancel(ctx, key, "again"); err != nil || res.Answered != 0 || !res.Already || res.Reason != "user left" {
		t.Errorf("second Cancel = %+v, %v", res, err)
	}
	if p, _ := b.r.Client.XPending(ctx, stream, topics.ConsumerGroup).Result(); p.Consumers[topics.ParkingConsumer] != 0 {
		t.Errorf("parked entries left pending: %v", p.Consumers)
	}
	if _, err := b.c.Cancel(ctx, "ai:nope:v1:acme:0", ""); !errors.Is(err, flight.ErrNotFound) {
		t.Errorf("Cancel of an unknown key = %v, want ErrNotFound", err)
	}
	if _, err := b.c.Inspect(ctx, "ai:nope:v1:acme:0"); !errors.Is(err, flight.ErrNotFound) {
		t.Errorf("Inspect of an unknown key = %v, want ErrNotFound", err)
	}
}
