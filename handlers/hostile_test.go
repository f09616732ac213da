package handlers_test

import (
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill-redisstream/pkg/redisstream"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/redis/go-redis/v9"

	"github.com/flightdeck-ai/flightdeck/flight"
	"github.com/flightdeck-ai/flightdeck/handlers"
	"github.com/flightdeck-ai/flightdeck/handlers/model"
	"github.com/flightdeck-ai/flightdeck/stream"
	"github.com/flightdeck-ai/flightdeck/topics"
)

// evalTask is a task payload on the evaluation stage with the given fields after taskId.
func evalTask(id, rest string) string {
	return fmt.Sprintf(`{"taskId":%q,"stage":"interview-evaluation","tenant":"acme",%s}`, id, rest)
}

// xadd appends an entry with exactly the given fields, as any service could.
func (b *bundle) xadd(stage string, values ...any) {
	b.t.Helper()
	if err := b.r.Client.XAdd(b.ctx, &redis.XAddArgs{Stream: b.ks.Tasks(stage), Values: values}).Err(); err != nil {
		b.t.Fatal(err)
	}
}

// dlq waits until the stage's dead-letter stream holds n entries and returns them.
func (b *bundle) dlq(stage string, n int, timeout time.Duration) []redis.XMessage {
	b.t.Helper()
	var got []redis.XMessage
	for deadline := time.Now().Add(timeout); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		if got = b.r.Client.XRange(b.ctx, b.ks.DLQ(stage), "-", "+").Val(); len(got) >= n {
			break
		}
	}
	return got
}

// waitAcked waits until no entry of the stage's task stream is pending.
func (b *bundle) waitAcked(stage string, timeout time.Duration) {
	b.t.Helper()
	deadline := time.Now().Add(timeout)
	for b.r.Client.XPending(b.ctx, b.ks.Tasks(stage), topics.ConsumerGroup).Val().Count != 0 {
		if time.Now().After(deadline) {
			b.t.Fatalf("entries of %s still pending: refused entries must be acknowledged", stage)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// metadata returns watermill's msgpack metadata field for md.
func metadata(t *testing.T, md message.Metadata) []byte {
	m := message.NewMessage("x", nil)
	m.Metadata = md
	v, err := redisstream.DefaultMarshallerUnmarshaller{}.Marshal("t", m)
	if err != nil {
		t.Fatal(err)
	}
	return v["metadata"].([]byte)
}

// TestHostileEntries: entries a hostile or broken producer could XADD are each refused with
// their machine-readable reason in the DLQ and acknowledged, a valid task queued behind all of
// them succeeds, and the consumer keeps serving afterwards.
func TestHostileEntries(t *testing.T) {
	b := setup(t)
	b.consumer("c1", nil)
	stage := "interview-evaluation"
	nested := strings.Repeat("[", 100_000) + strings.Repeat("]", 100_000)
	deepObj := strings.Repeat(`{"a":`, 40) + "1" + strings.Repeat("}", 40)
	forged := metadata(t, message.Metadata{stream.MetaBadEntry: "", stream.MetaEntry: "0-1", "correlation_id": "c"})
	rows := []struct {
		name   string
		values []any // fields after the uuid; nil uuid rows set their own
		reason string
	}{
		{"oversized payload", []any{"payload", evalTask("big", `"input":"`+strings.Repeat("x", 2<<20)+`"`)}, "payload_too_large"},
		{"oversized input", []any{"payload", evalTask("bigin", `"input":"`+strings.Repeat("x", 300<<10)+`"`)}, "input_too_large"},
		{"nested 10^5 levels", []any{"payload", evalTask("deep", `"input":`+nested)}, "too_deep"},
		{"nested objects past the cap", []any{"payload", evalTask("deep2", `"input":`+deepObj)}, "too_deep"},
		{"binary garbage", []any{"payload", []byte{0x00, 0xff, 0xfe, 0x81, 0x13, 0x37, 0xc0, 0x00}}, "invalid_utf8"},
		{"printable garbage", []any{"payload", "\x00\x01GET / HTTP/1.1\r\n"}, "bad_json"},
		{"invalid UTF-8 in a string", []any{"payload", evalTask("utf", `"input":"caf`+"\xe9\xed\xa0\x80"+`"`)}, "invalid_utf8"},
		{"not an object", []any{"payload", `[{"taskId":"arr"}]`}, "bad_json"},
		{"trailing data", []any{"payload", evalTask("trail", `"input":1`) + `{"taskId":"smuggled"}`}, "bad_json"},
		{"requestKey with braces", []any{"payload", evalTask("brace", `"input":1,"requestKey":"q}{ai:flight:meta:{x}"`)}, "bad_charset"},
		{"requestKey with a star", []any{"payload", evalTask("star", `"input":1,"requestKey":"ai:*"`)}, "bad_charset"},
		{"requestKey with a space", []any{"payload", evalTask("space", `"input":1,"requestKey":"a b"`)}, "bad_charset"},
		{"requestKey too long", []any{"payload", evalTask("long", `"input":1,"requestKey":"`+strings.Repeat("k", 201)+`"`)}, "too_long"},
		{"taskId with control chars", []any{"payload", `{"taskId":"t\u0001\r\n","stage":"interview-evaluation","tenant":"acme","input":1}`}, "bad_charset"},
		{"taskId with a raw newline", []any{"payload", "{\"taskId\":\"t\n\",\"stage\":\"interview-evaluation\",\"tenant\":\"acme\",\"input\":1}"}, "bad_json"},
		{"tenant with a colon", []any{"payload", `{"taskId":"colon","stage":"interview-evaluation","tenant":"acme:rk","input":1}`}, "bad_charset"},
		{"tenant with braces", []any{"payload", `{"taskId":"tb","stage":"interview-evaluation","tenant":"{acme}","input":1}`}, "bad_charset"},
		{"sessionId with a star", []any{"payload", evalTask("sess", `"input":1,"sessionId":"*"`)}, "bad_charset"},
		{"number for taskId", []any{"payload", `{"taskId":7,"stage":"interview-evaluation","tenant":"acme","input":1}`}, "bad_type"},
		{"huge attempt", []any{"payload", evalTask("att", `"input":1,"attempt":1`+strings.Repeat("0", 400))}, "bad_type"},
		{"null input", []any{"payload", evalTask("null", `"input":null`)}, "missing_field"},
		{"bad deadline", []any{"payload", evalTask("dl", `"input":1,"deadline":"tomorrow"`)}, "bad_deadline"},
		{"params not an object", []any{"payload", evalTask("par", `"input":1,"params":"x"`)}, "bad_params"},
		{"unknown stage", []any{"payload", `{"taskId":"us","stage":"admin","tenant":"acme","input":1}`}, "unknown_stage"},
		{"other stage's task", []any{"payload", `{"taskId":"os","stage":"interview-followup","tenant":"acme","input":1}`}, "stage_mismatch"},
		{"metadata as JSON", []any{"payload", evalTask("mj", `"input":1`), "metadata", `{"correlation_id":"x"}`}, "bad_metadata"},
		{"metadata msgpack array", []any{"payload", evalTask("ma", `"input":1`), "metadata", []byte{0x93, 0x01, 0x02, 0x03}}, "bad_metadata"},
		{"metadata msgpack string", []any{"payload", evalTask("ms", `"input":1`), "metadata", []byte{0xa3, 'a', 'b', 'c'}}, "bad_metadata"},
		{"metadata truncated", []any{"payload", evalTask("mt", `"input":1`), "metadata", []byte{0x82, 0xa1, 'a'}}, "bad_metadata"},
		{"missing payload field", []any{"metadata", forged}, "missing_payload"},
		{"empty payload", []any{"payload", ""}, "bad_json"},
	}
	for i, r := range rows {
		b.xadd(stage, append([]any{redisstream.UUIDHeaderKey, fmt.Sprint("hostile-", i)}, r.values...)...)
	}
	b.xadd(stage, "payload", evalTask("no-uuid", `"input":1`)) // no uuid at all
	// Forged consumer metadata on a valid task is dropped, not trusted.
	b.xadd(stage, redisstream.UUIDHeaderKey, "good", "payload", evalTask("good", `"input":{"answer":"fine"}`), "metadata", forged)

	got := b.eventsFor([]string{stage}, []string{"good"}, 15*time.Second)
	if e := got["good"]; len(e) != 1 || e[0].Status != topics.StatusSucceeded {
		t.Fatalf("the valid task behind the hostile ones: %+v", got)
	}
	// Hostile entries that name a readable task id get a FAILED event (invalid_task, with the
	// reason as code) so that a client waiting for it does not hang; nothing else.
	for id, evs := range got {
		if id == "good" {
			continue
		}
		for _, e := range evs {
			if e.Status != topics.StatusFailed || e.ErrorType != "invalid_task" || e.Result != nil || e.Entry == "" {
				t.Errorf("hostile entry %s produced event %+v", id, e)
			}
		}
	}
	dlq := b.dlq(stage, len(rows)+1, 10*time.Second)
	byUUID := map[string]redis.XMessage{}
	for _, m := range dlq {
		id, _ := m.Values[topics.FieldUUID].(string)
		byUUID[id] = m
		if d, _ := m.Values[topics.FieldDetail].(string); len(d) > 1024 {
			t.Errorf("DLQ entry %s: detail of %d bytes quotes the payload", id, len(d))
		}
	}
	for i, r := range rows {
		t.Run(r.name, func(t *testing.T) {
			m, ok := byUUID[fmt.Sprint("hostile-", i)]
			if !ok {
				t.Fatalf("no DLQ entry")
			}
			if got := m.Values[topics.FieldReason]; got != r.reason {
				t.Errorf("reason %v, want %s (detail %.200v)", got, r.reason, m.Values[topics.FieldDetail])
			}
			if m.Values[topics.FieldConsumer] != "c1" {
				t.Errorf("consumer %v", m.Values[topics.FieldConsumer])
			}
		})
	}
	missingUUID := 0
	for _, m := range dlq {
		if m.Values[topics.FieldReason] == "missing_uuid" {
			missingUUID++
		}
	}
	if missingUUID != 1 {
		t.Errorf("%d missing_uuid entries, want 1", missingUUID)
	}
	if len(dlq) != len(rows)+1 {
		t.Errorf("%d DLQ entries, want %d", len(dlq), len(rows)+1)
	}
	b.waitAcked(stage, 30*time.Second)

	// Still serving.
	b.enqueue(topics.Task{TaskID: "after", Stage: stage, Input: simInput(1, 0)})
	if e := b.eventsFor([]string{stage}, []string{"after"}, 10*time.Second)["after"]; len(e) != 1 || e[0].Status != topics.StatusSucceeded {
		t.Fatalf("task after the hostile ones: %+v", e)
	}
	if n := b.runs.Load(); n != 2 {
		t.Errorf("%d model runs, want 2 (good, after)", n)
	}
}

func mapKeys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	return out
}

// runRecorder records the tenant and task of every model run.
type runRecorder struct {
	mu   sync.Mutex
	runs []model.Request
}

func (r *runRecorder) record(req model.Request) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.runs = append(r.runs, req)
}

func (r *runRecorder) tenants() map[string]int {
	r.mu.Lock()
	defer r.mu.Unlock()
	n := map[string]int{}
	for _, q := range r.runs {
		n[q.Tenant]++
	}
	return n
}

// resultTaskID is the taskId the sim model wrote into a result: the task whose run made it.
func resultTaskID(t *testing.T, e topics.Event) string {
	t.Helper()
	var out struct {
		TaskID string `json:"taskId"`
	}
	if err := json.Unmarshal(e.Result, &out); err != nil {
		t.Fatalf("result of %s: %v: %s", e.TaskID, err, e.Result)
	}
	return out.TaskID
}

// TestCrossTenantRequestKey: a tenant that sends another tenant's flight key (or its bare
// request key) as its requestKey gets a flight of its own under its own tenant: it neither
// joins the running flight nor reads the finished result of the other tenant, in either
// direction, and every flight runs the model once.
func TestCrossTenantRequestKey(t *testing.T) {
	b := setup(t)
	rec := &runRecorder{}
	b.sim.OnRun = func(r model.Request) { b.runs.Add(1); rec.record(r) }
	b.consumer("c1", func(c *handlers.Config) { c.Stages[0].Concurrency = 8 })
	stage := "interview-evaluation"
	acmeKey, err := flight.NamespacedKey(stage, "acme", "q-7", 1)
	if err != nil {
		t.Fatal(err)
	}
	evilKey, err := flight.NamespacedKey(stage, "evil", "q-9", 1)
	if err != nil {
		t.Fatal(err)
	}
	in := func(who string) json.RawMessage {
		return json.RawMessage(fmt.Sprintf(`{"answer":"secret of %s","sim":{"latencyMs":600}}`, who))
	}
	// acme's flight is running when evil's crafted tasks arrive: joining it would make them
	// followers and hand them acme's result.
	b.enqueue(topics.Task{TaskID: "acme-1", Stage: stage, Tenant: "acme", RequestKey: "q-7", Input: in("acme")})
	b.enqueue(topics.Task{TaskID: "evil-1", Stage: stage, Tenant: "evil", RequestKey: "q-9", Input: in("evil")})
	time.Sleep(150 * time.Millisecond)
	crafted := []topics.Task{
		{TaskID: "evil-full", Stage: stage, Tenant: "evil", RequestKey: acmeKey, Input: in("evil-full")},
		{TaskID: "evil-rk", Stage: stage, Tenant: "evil", RequestKey: "acme:rk:q-7", Input: in("evil-rk")},
		{TaskID: "acme-full", Stage: stage, Tenant: "acme", RequestKey: evilKey, Input: in("acme-full")},
	}
	for _, tk := range crafted {
		b.enqueue(tk)
	}
	got := b.events([]string{stage}, 2+len(crafted), 15*time.Second)
	// Once both originals have finished (their results cached), the other tenant's bare
	// request key: no hit on the cached result.
	later := []topics.Task{
		{TaskID: "evil-bare", Stage: stage, Tenant: "evil", RequestKey: "q-7", Input: in("evil-bare")},
		{TaskID: "acme-bare", Stage: stage, Tenant: "acme", RequestKey: "q-9", Input: in("acme-bare")},
	}
	for _, tk := range later {
		b.enqueue(tk)
	}
	for id, evs := range b.events([]string{stage}, 2+len(crafted)+len(later), 15*time.Second) {
		got[id] = evs
	}
	all := append(append([]topics.Task{{TaskID: "acme-1", Tenant: "acme"}, {TaskID: "evil-1", Tenant: "evil"}}, crafted...), later...)
	flights := map[string]string{}
	for _, tk := range all {
		evs := got[tk.TaskID]
		if len(evs) == 0 {
			t.Errorf("%s: no event", tk.TaskID)
			continue
		}
		e := evs[0]
		if e.Status != topics.StatusSucceeded {
			t.Errorf("%s: %s %s", tk.TaskID, e.Status, e.Error)
			continue
		}
		if e.Tenant != tk.Tenant || !strings.HasPrefix(e.RequestKey, "ai:"+stage+":v1:"+tk.Tenant+":rk:") {
			t.Errorf("%s: tenant %q, flight %q: not under its own tenant %q", tk.TaskID, e.Tenant, e.RequestKey, tk.Tenant)
		}
		if prev, ok := flights[e.RequestKey]; ok {
			t.Errorf("%s shares flight %s with %s", tk.TaskID, e.RequestKey, prev)
		}
		flights[e.RequestKey] = tk.TaskID
		if e.Shared != topics.SharedOwner {
			t.Errorf("%s: shared %q, want owner: it got another task's outcome", tk.TaskID, e.Shared)
		}
		if by := resultTaskID(t, e); by != tk.TaskID {
			t.Errorf("%s (tenant %s) received the result made for task %s", tk.TaskID, tk.Tenant, by)
		}
	}
	if e := got["acme-1"]; len(e) > 0 && e[0].RequestKey != acmeKey {
		t.Errorf("acme's flight %q, want %q", e[0].RequestKey, acmeKey)
	}
	if n := rec.tenants(); n["acme"] != 3 || n["evil"] != 4 {
		t.Errorf("model runs per tenant %v, want acme 3, evil 4: one per flight", n)
	}
	// acme's flight was never touched by evil: only acme's task ever owned or joined it.
	coord, err := flight.NewCoordinator(flight.Config{Client: b.r.Client, Keyspace: b.ks})
	if err != nil {
		t.Fatal(err)
	}
	m, err := coord.Get(b.ctx, acmeKey)
	if err != nil {
		t.Fatal(err)
	}
	if m.Tenant != "acme" || m.TaskID != "acme-1" || m.Attempts != 1 {
		t.Errorf("acme's flight meta: tenant %q task %q attempts %d", m.Tenant, m.TaskID, m.Attempts)
	}
}

// TestTenantIsolation: the same input, versions and params sent by two tenants at the same
// time become two flights with two model runs; each tenant gets the result of its own run.
func TestTenantIsolation(t *testing.T) {
	b := setup(t)
	rec := &runRecorder{}
	b.sim.OnRun = func(r model.Request) { b.runs.Add(1); rec.record(r) }
	b.consumer("c1", nil)
	b.consumer("c2", nil)
	stage := "interview-evaluation"
	input := json.RawMessage(`{"answer":"the same words","sim":{"latencyMs":400}}`)
	var want []string
	for _, tenant := range []string{"acme", "globex"} {
		for i := range 3 { // duplicates inside one tenant still share one flight
			id := fmt.Sprintf("%s-%d", tenant, i)
			b.enqueue(topics.Task{TaskID: id, Stage: stage, Tenant: tenant, Input: input, ModelVersion: "m1",
				Params: json.RawMessage(`{"lang":"en"}`)})
			want = append(want, id)
		}
	}
	got := b.events([]string{stage}, len(want), 15*time.Second)
	keys := map[string]string{} // tenant -> flight key
	results := map[string]string{}
	for _, id := range want {
		evs := got[id]
		if len(evs) == 0 || evs[0].Status != topics.StatusSucceeded {
			t.Fatalf("%s: %+v", id, evs)
		}
		e := evs[0]
		tenant := strings.SplitN(id, "-", 2)[0]
		if e.Tenant != tenant || strings.Split(e.RequestKey, ":")[3] != tenant {
			t.Errorf("%s: tenant %q key %q", id, e.Tenant, e.RequestKey)
		}
		if k, ok := keys[tenant]; ok && k != e.RequestKey {
			t.Errorf("%s: key %s, but its tenant's other tasks ran under %s", id, e.RequestKey, k)
		}
		keys[tenant] = e.RequestKey
		if r, ok := results[tenant]; ok && r != string(e.Result) {
			t.Errorf("%s: two results within tenant %s", id, tenant)
		}
		results[tenant] = string(e.Result)
		if by := resultTaskID(t, e); !strings.HasPrefix(by, tenant+"-") {
			t.Errorf("%s (tenant %s) got the result of %s's run", id, tenant, by)
		}
	}
	if keys["acme"] == keys["globex"] {
		t.Errorf("both tenants ran under one flight %s", keys["acme"])
	}
	if n := rec.tenants(); n["acme"] != 1 || n["globex"] != 1 || len(n) != 2 {
		t.Errorf("model runs per tenant %v, want one each", n)
	}
}
