package handlers_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/flightdeck-ai/flightdeck/client"
	"github.com/flightdeck-ai/flightdeck/handlers"
	"github.com/flightdeck-ai/flightdeck/handlers/model"
	"github.com/flightdeck-ai/flightdeck/internal/testkit/redistest"
	"github.com/flightdeck-ai/flightdeck/topics"
)

// TestNotBefore: a task whose notBefore lies ahead starts no sooner: a near one waits in the
// subscriber, a far one in the stage's scheduled set (its entry acknowledged meanwhile, no
// handler held); both run once and are answered.
func TestNotBefore(t *testing.T) {
	r := redistest.New(t)
	ks := topics.Keyspace{Prefix: r.Prefix}
	started := map[string]*atomic.Int64{"near": {}, "far": {}}
	mux := handlers.NewMux()
	mux.HandleFunc("later", func(ctx context.Context, task model.Request, _ model.ProgressFunc) (json.RawMessage, error) {
		var in string
		_ = json.Unmarshal(task.Input, &in)
		started[in].Store(time.Now().UnixMilli())
		return json.RawMessage(`"done"`), nil
	})
	runMux(t, r, mux, testLog(t))
	cl, err := client.New(client.Config{Client: r.Client, Keyspace: ks})
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	at := map[string]time.Time{"near": now.Add(800 * time.Millisecond), "far": now.Add(10 * time.Second)}
	var tasks []topics.Task
	for _, name := range []string{"near", "far"} {
		tasks = append(tasks, topics.Task{TaskID: name, Stage: "later", Tenant: "acme", Input: json.RawMessage(`"` + name + `"`),
			NotBefore: at[name].UTC().Format(time.RFC3339Nano)})
	}
	ctx, cancel := context.WithTimeout(context.Background(), 40*time.Second)
	defer cancel()
	rs, err := cl.EnqueueBatch(ctx, tasks)
	if err != nil {
		t.Fatal(err)
	}
	// While the far task waits, it is in the scheduled set and its entry is not pending (once
	// the near one ran; the far one is due 10 s after the enqueue).
	for deadline := time.Now().Add(8 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		n, _ := r.Client.ZCard(ctx, ks.Scheduled("later")).Result()
		p, _ := r.Client.XPending(ctx, ks.Tasks("later"), topics.ConsumerGroup).Result()
		if n == 1 && p != nil && p.Count == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("scheduled set holds %d tasks, %v entries pending; want the far task in the set and no entry pending", n, p)
		}
	}
	evs := map[string]topics.Event{}
	if err := cl.Collect(ctx, rs, func(ev topics.Event) { evs[ev.TaskID] = ev }); err != nil {
		t.Fatal(err)
	}
	for name, when := range at {
		if evs[name].Status != topics.StatusSucceeded {
			t.Errorf("%s: %+v", name, evs[name])
		}
		if got := started[name].Load(); got < when.UnixMilli()-5 {
			t.Errorf("%s started %d ms before its notBefore", name, when.UnixMilli()-got)
		}
	}
	if n, _ := r.Client.ZCard(ctx, ks.Scheduled("later")).Result(); n != 0 {
		t.Errorf("scheduled set still holds %d tasks", n)
	}
}

// TestRetryAfterHoldsTheKey: a provider's Retry-After longer than a subscriber wait puts the
// task in the scheduled set; a duplicate arriving meanwhile does not retry early but waits
// for the retry, and both get its result: two model calls in all, the second after the delay.
func TestRetryAfterHoldsTheKey(t *testing.T) {
	r := redistest.New(t)
	ks := topics.Keyspace{Prefix: r.Prefix}
	var calls, first, second atomic.Int64
	mux := handlers.NewMux()
	mux.HandleFunc("busy", func(ctx context.Context, task model.Request, _ model.ProgressFunc) (json.RawMessage, error) {
		if calls.Add(1) == 1 {
			first.Store(time.Now().UnixMilli())
			return nil, model.RetryLater(3*time.Second, errors.New("429"))
		}
		second.Store(time.Now().UnixMilli())
		return json.RawMessage(fmt.Sprintf(`{"attempt":%d}`, task.Attempt)), nil
	})
	runMux(t, r, mux, testLog(t))
	cl, err := client.New(client.Config{Client: r.Client, Keyspace: ks})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	task := func(id string) topics.Task {
		return topics.Task{TaskID: id, Stage: "busy", Tenant: "acme", Input: json.RawMessage(`1`)}
	}
	r1, err := cl.Enqueue(ctx, task("a"))
	if err != nil {
		t.Fatal(err)
	}
	for first.Load() == 0 {
		time.Sleep(10 * time.Millisecond)
	}
	time.Sleep(500 * time.Millisecond)
	r2, err := cl.Enqueue(ctx, task("b"))
	if err != nil {
		t.Fatal(err)
	}
	evs := map[string]topics.Event{}
	if err := cl.Collect(ctx, []client.Receipt{r1, r2}, func(ev topics.Event) { evs[ev.TaskID] = ev }); err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{"a", "b"} {
		if ev := evs[id]; ev.Status != topics.StatusSucceeded || string(ev.Result) != `{"attempt":2}` {
			t.Errorf("%s: %s %s", id, ev.Status, ev.Result)
		}
	}
	if n := calls.Load(); n != 2 {
		t.Errorf("%d model calls, want 2", n)
	}
	if d := second.Load() - first.Load(); d < 3000 {
		t.Errorf("retried after %d ms, want at least the 3000 ms Retry-After", d)
	}
}

// TestScheduledTaskLeftMoving: a scheduled task that a consumer of a version without the
// index took for appending and then died with (still in its moving set) is appended again and
// answered.
func TestScheduledTaskLeftMoving(t *testing.T) {
	r := redistest.New(t)
	ks := topics.Keyspace{Prefix: r.Prefix}
	mux := handlers.NewMux()
	mux.HandleFunc("later", func(context.Context, model.Request, model.ProgressFunc) (json.RawMessage, error) {
		return json.RawMessage(`"ok"`), nil
	})
	payload, err := topics.Task{TaskID: "stuck", Stage: "later", Tenant: "acme", Input: json.RawMessage(`1`)}.Encode()
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	taken := time.Now().Add(-time.Minute).UnixMilli()
	if err := r.Client.ZAdd(ctx, ks.ScheduledLegacyMoving("later"), redis.Z{Score: float64(taken), Member: string(payload)}).Err(); err != nil {
		t.Fatal(err)
	}
	runMux(t, r, mux, testLog(t))
	evs := (&bundle{t: t, ctx: ctx, r: r, ks: ks}).eventsFor([]string{"later"}, []string{"stuck"}, 10*time.Second)
	if len(evs["stuck"]) == 0 || evs["stuck"][0].Status != topics.StatusSucceeded {
		t.Fatalf("the task left in the moving set was not answered: %+v", evs)
	}
}

// TestRetryPolicyDelay: the backoff grows by the multiplier up to the cap, within the jitter,
// and a longer Retry-After wins.
func TestRetryPolicyDelay(t *testing.T) {
	p := handlers.RetryPolicy{Initial: 100 * time.Millisecond, Max: time.Second, Multiplier: 3, Jitter: 0.1}
	for attempt, want := range map[int]time.Duration{1: 100 * time.Millisecond, 2: 300 * time.Millisecond, 3: 900 * time.Millisecond, 5: time.Second} {
		for range 20 {
			got := p.Delay(attempt, 0)
			if got < want*9/10 || got > want*11/10 {
				t.Fatalf("attempt %d: %v, want %v ±10%%", attempt, got, want)
			}
		}
	}
	if got := p.Delay(1, time.Minute); got != time.Minute {
		t.Errorf("with Retry-After 1m: %v", got)
	}
}
