package handlers_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/rs/zerolog"

	"github.com/flightdeck-ai/flightdeck/executor"
	"github.com/flightdeck-ai/flightdeck/handlers"
	"github.com/flightdeck-ai/flightdeck/handlers/model"
	"github.com/flightdeck-ai/flightdeck/internal/broker"
	"github.com/flightdeck-ai/flightdeck/internal/redisconn"
	"github.com/flightdeck-ai/flightdeck/internal/testkit/redistest"
	"github.com/flightdeck-ai/flightdeck/topics"
)

type bundle struct {
	t    *testing.T
	ctx  context.Context
	r    *redistest.Target
	ks   topics.Keyspace
	w    broker.Writer
	runs atomic.Int64
	sim  *model.Sim
}

func setup(t *testing.T) *bundle {
	r := redistest.New(t)
	b := &bundle{t: t, ctx: context.Background(), r: r, ks: topics.Keyspace{Prefix: r.Prefix}}
	b.w = broker.Writer{Client: r.Client, Keyspace: b.ks}
	b.sim = &model.Sim{OnRun: func(model.Request) { b.runs.Add(1) }}
	return b
}

// consumer starts a consumer on the bundle's Redis and stops it at the end of the test.
func (b *bundle) consumer(name string, mut func(*handlers.Config)) (cancel func()) {
	b.t.Helper()
	_, cancel = b.start(name, mut)
	return cancel
}

// start is consumer, and returns the consumer too.
func (b *bundle) start(name string, mut func(*handlers.Config)) (c *handlers.Consumer, cancel func()) {
	b.t.Helper()
	stages, err := handlers.LoadStages("", []string{"interview-evaluation", "interview-followup"})
	if err != nil {
		b.t.Fatal(err)
	}
	opt := b.r.Client.Options()
	log := zerolog.New(testLog(b.t)).Level(zerolog.WarnLevel)
	cfg := handlers.Config{
		NewClient: redisconn.Factory(opt),
		Keyspace:  b.ks, Name: name, Stages: stages, Models: map[string]model.Model{"sim": b.sim},
		Logger: &log, LivenessInterval: 200 * time.Millisecond, ClaimInterval: 200 * time.Millisecond,
		Grace: 2 * time.Second, SpoolDir: b.t.TempDir(),
	}
	if mut != nil {
		mut(&cfg)
	}
	c, err = handlers.NewConsumer(cfg)
	if err != nil {
		b.t.Fatal(err)
	}
	ctx, stop := context.WithCancel(b.ctx)
	done := make(chan error, 1)
	go func() { done <- c.Run(ctx) }()
	select {
	case <-c.Started():
	case err := <-done:
		b.t.Fatalf("consumer: %v", err)
	case <-time.After(10 * time.Second):
		b.t.Fatal("consumer did not start")
	}
	var once sync.Once
	cancel = func() {
		once.Do(func() {
			stop()
			if err := <-done; err != nil {
				b.t.Errorf("consumer %s: %v", name, err)
			}
		})
	}
	b.t.Cleanup(cancel)
	return c, cancel
}

func (b *bundle) enqueue(t topics.Task) {
	b.t.Helper()
	if t.Tenant == "" {
		t.Tenant = "acme"
	}
	if _, err := b.w.EnqueueTask(b.ctx, t); err != nil {
		b.t.Fatal(err)
	}
}

// eventsFor reads result streams until every listed task id has an event, or the timeout.
func (b *bundle) eventsFor(stages []string, ids []string, timeout time.Duration) map[string][]topics.Event {
	b.t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		got := b.events(stages, 1<<30, min(time.Until(deadline), 300*time.Millisecond))
		all := true
		for _, id := range ids {
			all = all && len(got[id]) > 0
		}
		if all || time.Now().After(deadline) {
			return got
		}
	}
}

// events reads result streams until want distinct task ids have an event or the timeout.
func (b *bundle) events(stages []string, want int, timeout time.Duration) map[string][]topics.Event {
	b.t.Helper()
	from := map[string]string{}
	for _, s := range stages {
		from[b.ks.Results(s)] = "0"
	}
	got := map[string][]topics.Event{}
	deadline := time.Now().Add(timeout)
	for len(got) < want && time.Now().Before(deadline) {
		evs, bad, err := broker.ReadEvents(b.ctx, b.r.Client, from, 1000, 200*time.Millisecond)
		if err != nil { // fault tests stop Redis: keep reading until the deadline
			time.Sleep(100 * time.Millisecond)
			continue
		}
		if bad > 0 {
			b.t.Fatalf("%d undecodable events", bad)
		}
		for _, e := range evs {
			from[e.Stream] = e.ID
			got[e.Event.TaskID] = append(got[e.Event.TaskID], e.Event)
		}
	}
	return got
}

func simInput(k int, latencyMs int) json.RawMessage {
	return json.RawMessage(fmt.Sprintf(`{"question":"q%d","answer":"a%d","sim":{"latencyMs":%d}}`, k, k, latencyMs))
}

// TestDuplicatesRunOnce: 40 tasks over 4 keys on two consumers: every task gets one event,
// each key's tasks share one result, and the model runs once per key.
func TestDuplicatesRunOnce(t *testing.T) {
	b := setup(t)
	b.consumer("c1", nil)
	b.consumer("c2", nil)
	for i := range 40 {
		b.enqueue(topics.Task{TaskID: fmt.Sprintf("t%02d", i), Stage: "interview-evaluation", Input: simInput(i%4, 150)})
	}
	got := b.events([]string{"interview-evaluation"}, 40, 20*time.Second)
	if len(got) != 40 {
		t.Fatalf("%d of 40 tasks answered", len(got))
	}
	results := map[string]string{}
	shared := map[topics.Shared]int{}
	for id, evs := range got {
		e := evs[0]
		if e.Status != topics.StatusSucceeded {
			t.Errorf("%s: %+v", id, e)
		}
		shared[e.Shared]++
		if r, ok := results[e.RequestKey]; ok && r != string(e.Result) {
			t.Errorf("%s: result %s differs from %s", e.RequestKey, e.Result, r)
		}
		results[e.RequestKey] = string(e.Result)
	}
	if len(results) != 4 || b.runs.Load() != 4 || shared[topics.SharedOwner] != 4 {
		t.Errorf("keys %d, model runs %d, shared %v; want 4 keys, 4 runs, 4 owners", len(results), b.runs.Load(), shared)
	}
}

// TestDeadLetters: malformed entries go to the DLQ with their reasons, valid tasks behind
// them still finish, and the consumer keeps running.
func TestDeadLetters(t *testing.T) {
	b := setup(t)
	b.consumer("c1", nil)
	stream := b.ks.Tasks("interview-evaluation")
	valid := func(id string) string {
		return fmt.Sprintf(`{"taskId":%q,"stage":"interview-evaluation","tenant":"acme","input":{"a":%q}}`, id, id)
	}
	bad := []struct {
		values []any
		reason string
	}{
		{[]any{"payload", valid("no-uuid")}, "missing_uuid"},
		{[]any{"_watermill_message_uuid", "u1", "payload", `{"taskId":`}, "bad_json"},
		{[]any{"_watermill_message_uuid", "u2", "payload", `{"taskId":"x","stage":"nope","tenant":"acme","input":1}`}, "unknown_stage"},
		{[]any{"_watermill_message_uuid", "u3", "payload", `{"taskId":"x","stage":"interview-evaluation","tenant":"acme","input":"` + strings.Repeat("x", 2<<20) + `"}`}, "payload_too_large"},
		{[]any{"_watermill_message_uuid", "u6", "payload", `{"taskId":"x","stage":"interview-evaluation","tenant":"acme","input":"` + strings.Repeat("x", 300<<10) + `"}`}, "input_too_large"},
		{[]any{"_watermill_message_uuid", "u7", "payload", `{"taskId":"x","stage":"interview-evaluation","tenant":"acme","input":1,"requestKey":"a{b}"}`}, "bad_charset"},
		{[]any{"_watermill_message_uuid", "u4", "payload", valid("m"), "metadata", `{"json":"not msgpack"}`}, "bad_metadata"},
		{[]any{"_watermill_message_uuid", "u5", "payload", `{"taskId":"x","stage":"interview-followup","tenant":"acme","input":1}`}, "stage_mismatch"},
	}
	for _, e := range bad {
		b.r.Client.XAdd(b.ctx, &redis.XAddArgs{Stream: stream, Values: e.values})
	}
	b.r.Client.XAdd(b.ctx, &redis.XAddArgs{Stream: stream, Values: []any{"_watermill_message_uuid", "ok", "payload", valid("good")}})
	got := b.eventsFor([]string{"interview-evaluation"}, []string{"good", "x", "m"}, 10*time.Second)
	if e := got["good"]; len(e) != 1 || e[0].Status != topics.StatusSucceeded {
		t.Fatalf("the valid task behind the bad ones: %+v", got)
	}
	// Refused tasks that name a readable task id get a FAILED event, so no client hangs.
	for _, id := range []string{"x", "m"} {
		for _, e := range got[id] {
			if e.Status != topics.StatusFailed || e.ErrorType != "invalid_task" || e.ErrorCode == "" {
				t.Errorf("refused task %s: event %+v", id, e)
			}
		}
		if len(got[id]) == 0 {
			t.Errorf("refused task %s got no event", id)
		}
	}
	var dlq []redis.XMessage
	for deadline := time.Now().Add(5 * time.Second); len(dlq) < len(bad) && time.Now().Before(deadline); {
		time.Sleep(50 * time.Millisecond)
		dlq = b.r.Client.XRange(b.ctx, b.ks.DLQ("interview-evaluation"), "-", "+").Val()
	}
	reasons := map[string]bool{}
	for _, m := range dlq {
		reasons[m.Values["reason"].(string)] = true
	}
	for _, e := range bad {
		if !reasons[e.reason] {
			t.Errorf("no DLQ entry with reason %s (have %v)", e.reason, reasons)
		}
	}
	deadline := time.Now().Add(5 * time.Second)
	for b.r.Client.XPending(b.ctx, stream, topics.ConsumerGroup).Val().Count != 0 {
		if time.Now().After(deadline) {
			t.Fatalf("entries still pending: bad entries must be acked")
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// testLog writes log lines to t.Log until the test ends, and drops them after: goroutines of
// a stopped consumer may still log, and t.Log after the end of a test panics.
func testLog(t *testing.T) *safeLog {
	l := &safeLog{t: t}
	t.Cleanup(func() { l.mu.Lock(); l.done = true; l.mu.Unlock() })
	return l
}

type safeLog struct {
	mu   sync.Mutex
	t    *testing.T
	done bool
	text strings.Builder
}

// String returns every line written so far.
func (l *safeLog) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.text.String()
}

func (l *safeLog) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.text.Write(p)
	if !l.done {
		l.t.Log(strings.TrimSpace(string(p)))
	}
	return len(p), nil
}

// intervals records the [start, end] of every model run.
type intervals struct {
	mu  sync.Mutex
	got [][2]time.Time
	sim model.Sim
}

func (iv *intervals) Name() string { return "sim" }
func (iv *intervals) Call(ctx context.Context, req model.Request, progress model.ProgressFunc) (json.RawMessage, error) {
	start := time.Now()
	out, err := iv.sim.Call(ctx, req, progress)
	iv.mu.Lock()
	iv.got = append(iv.got, [2]time.Time{start, time.Now()})
	iv.mu.Unlock()
	return out, err
}

// TestSessionLockNoOverlap: heavy tasks of one session, spread over two consumers, never run
// at the same time; each still gets its own result.
func TestSessionLockNoOverlap(t *testing.T) {
	b := setup(t)
	iv := &intervals{}
	for _, name := range []string{"c1", "c2"} {
		b.consumer(name, func(c *handlers.Config) {
			stages, err := handlers.LoadStages("", []string{"interview-extraction"})
			if err != nil {
				t.Fatal(err)
			}
			stages[0].HeartbeatInterval, stages[0].Lease = 100*time.Millisecond, time.Second
			c.Stages, c.Models = stages, map[string]model.Model{"sim": iv}
			c.Limits = topics.Limits{}
		})
	}
	for i := range 4 {
		b.enqueue(topics.Task{TaskID: fmt.Sprintf("h%d", i), Stage: "interview-extraction", SessionID: "interview-1",
			Input: json.RawMessage(fmt.Sprintf(`{"resume":"r%d","sim":{"latencyMs":200}}`, i))})
	}
	got := b.events([]string{"interview-extraction"}, 4, 20*time.Second)
	if len(got) != 4 {
		t.Fatalf("%d of 4 tasks answered", len(got))
	}
	iv.mu.Lock()
	defer iv.mu.Unlock()
	if len(iv.got) != 4 {
		t.Fatalf("%d model runs, want 4", len(iv.got))
	}
	for i, a := range iv.got {
		for _, c := range iv.got[i+1:] {
			if a[0].Before(c[1]) && c[0].Before(a[1]) {
				t.Errorf("runs overlap: %v-%v and %v-%v", a[0].Format("05.000"), a[1].Format("05.000"),
					c[0].Format("05.000"), c[1].Format("05.000"))
			}
		}
	}
}

// TestUncoordinatedModes: LOCAL_ONLY runs a key once per consumer process, BYPASS once per
// task; every task still gets its event, marked shared "local".
func TestUncoordinatedModes(t *testing.T) {
	for _, tc := range []struct {
		mode     executor.Mode
		wantRuns int64
	}{{"LOCAL_ONLY", 1}, {"BYPASS", 6}} {
		t.Run(string(tc.mode), func(t *testing.T) {
			b := setup(t)
			b.consumer("c1", func(c *handlers.Config) {
				for i := range c.Stages {
					c.Stages[i].Mode = tc.mode
					c.Stages[i].Concurrency = 8
				}
			})
			for i := range 6 {
				b.enqueue(topics.Task{TaskID: fmt.Sprint("m", i), Stage: "interview-evaluation", Input: simInput(1, 300)})
			}
			got := b.events([]string{"interview-evaluation"}, 6, 10*time.Second)
			if len(got) != 6 {
				t.Fatalf("%d of 6 answered", len(got))
			}
			for id, evs := range got {
				if evs[0].Shared != topics.SharedLocal || evs[0].Status != topics.StatusSucceeded {
					t.Errorf("%s: %+v", id, evs[0])
				}
			}
			if b.runs.Load() != tc.wantRuns {
				t.Errorf("%d model runs, want %d", b.runs.Load(), tc.wantRuns)
			}
		})
	}
}
