package gateway

import (
	"encoding/json"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/flightdeck-ai/flightdeck/client"
	"github.com/flightdeck-ai/flightdeck/flight"
	"github.com/flightdeck-ai/flightdeck/topics"
)

// TestEnqueueAndWait: a POST with wait answers 200 with the receipt and the terminal event;
// the receipt names the token's tenant, and GET of the task answers the same event. A POST
// without wait answers 202 with the receipt, and GET with wait then finds the event.
func TestEnqueueAndWait(t *testing.T) {
	b := newBundle(t, nil)
	b.consumer(b.shared)

	r := b.do("POST", "/v1/stages/"+stage+"/tasks?wait=20s", acmeSecret, map[string]any{"input": map[string]string{"answer": "I led it"}})
	if r.status != http.StatusOK {
		t.Fatalf("POST with wait: %d %s", r.status, r.body)
	}
	var got done
	r.json(t, &got)
	rc := got.Receipt
	if rc.Tenant != "acme" || rc.Stage != stage || rc.TaskID == "" || rc.StreamID == "" ||
		!strings.HasPrefix(rc.RequestKey, "ai:"+stage+":v1:acme:") {
		t.Errorf("receipt %+v: want tenant acme, the stage, an id, a stream id and acme's key", rc)
	}
	if got.Event.Status != topics.StatusSucceeded || got.Event.TaskID != rc.TaskID || len(got.Event.Result) == 0 {
		t.Errorf("event %+v: want SUCCEEDED with a result", got.Event)
	}
	if loc := r.header.Get("Location"); loc != "/v1/tasks/"+rc.TaskID {
		t.Errorf("Location %q", loc)
	}
	r = b.do("GET", "/v1/tasks/"+rc.TaskID, acmeSecret, nil)
	var again done
	r.json(t, &again)
	if r.status != http.StatusOK || again.Event.TaskID != rc.TaskID || string(again.Event.Result) != string(got.Event.Result) {
		t.Errorf("GET: %d %s", r.status, r.body)
	}

	r = b.do("POST", "/v1/stages/"+stage+"/tasks", acmeSecret, `{"input":{"answer":"later"},"taskId":"t-later"}`)
	var receipt client.Receipt
	r.json(t, &receipt)
	if r.status != http.StatusAccepted || receipt.TaskID != "t-later" {
		t.Fatalf("POST without wait: %d %s", r.status, r.body)
	}
	r = b.do("GET", "/v1/tasks/t-later?wait=20s", acmeSecret, nil)
	r.json(t, &got)
	if r.status != http.StatusOK || got.Event.Status != topics.StatusSucceeded || got.Receipt != receipt {
		t.Errorf("GET with wait: %d %s", r.status, r.body)
	}
}

// TestWaitTimesOut: with no consumer, a POST with wait answers 202 with the receipt once the
// wait ran out, and GET answers 202 pending, at once without wait and after its wait with one.
func TestWaitTimesOut(t *testing.T) {
	b := newBundle(t, nil)
	start := time.Now()
	r := b.do("POST", "/v1/stages/nobody-reads-this/tasks?wait=300ms", acmeSecret, `{"input":1}`)
	took := time.Since(start)
	var receipt client.Receipt
	r.json(t, &receipt)
	if r.status != http.StatusAccepted || receipt.TaskID == "" || receipt.StreamID == "" {
		t.Fatalf("POST: %d %s", r.status, r.body)
	}
	if took < 300*time.Millisecond || took > 5*time.Second {
		t.Errorf("the wait of 300ms answered after %v", took)
	}
	start = time.Now()
	r = b.do("GET", "/v1/tasks/"+receipt.TaskID, acmeSecret, nil)
	var p pending
	r.json(t, &p)
	if r.status != http.StatusAccepted || p.Status != "pending" || p.Receipt == nil || *p.Receipt != receipt {
		t.Errorf("GET: %d %s", r.status, r.body)
	}
	if d := time.Since(start); d > 3*time.Second {
		t.Errorf("GET without wait answered after %v", d)
	}
	start = time.Now()
	r = b.do("GET", "/v1/tasks/"+receipt.TaskID+"?wait=0.4", acmeSecret, nil)
	if r.status != http.StatusAccepted || time.Since(start) < 400*time.Millisecond {
		t.Errorf("GET with wait=0.4: %d after %v", r.status, time.Since(start))
	}
}

// TestBadRequests: every malformed or refused request gets its status and code, and nothing
// is enqueued for any of them.
func TestBadRequests(t *testing.T) {
	b := newBundle(t, func(c *Config) {
		c.Stages = []string{stage, "other-stage"}
		c.MaxWait = 10 * time.Second
	})
	big := `{"input":"` + strings.Repeat("x", 300<<10) + `"}`
	huge := `{"input":"` + strings.Repeat("x", 1<<20) + `"}`
	path := "/v1/stages/" + stage + "/tasks"
	for _, tc := range []struct {
		name, path, body string
		headers          []string
		status           int
		code, reason     string
	}{
		{"NotJSON", path, `garbage`, nil, 400, codeBadRequest, ""},
		{"Array", path, `[1]`, nil, 400, codeBadRequest, ""},
		{"Empty", path, ``, nil, 400, codeBadRequest, ""},
		{"Trailing", path, `{"input":1} {}`, nil, 400, codeBadRequest, ""},
		{"UnknownField", path, `{"input":1,"stage":"x"}`, nil, 400, codeBadRequest, ""},
		{"MisspeltField", path, `{"input":1,"TaskId":"x"}`, nil, 400, codeBadRequest, ""},
		{"DuplicateField", path, `{"input":1,"input":2}`, nil, 400, codeBadRequest, ""},
		{"EscapedDuplicate", path, `{"input":1,"\u0069nput":2}`, nil, 400, codeBadRequest, ""},
		{"WrongType", path, `{"input":1,"taskId":7}`, nil, 400, codeBadRequest, ""},
		{"NoInput", path, `{"taskId":"a"}`, nil, 400, codeInvalidTask, "missing_field"},
		{"NullInput", path, `{"input":null}`, nil, 400, codeInvalidTask, "missing_field"},
		{"BadTaskID", path, `{"input":1,"taskId":"a b"}`, nil, 400, codeInvalidTask, "bad_charset"},
		{"BadRequestKey", path, `{"input":1,"requestKey":"{x}"}`, nil, 400, codeInvalidTask, "bad_charset"},
		{"DuplicateMember", path, `{"input":{"answer":"a","answer":"b"}}`, nil, 400, codeInvalidTask, "duplicate_field"},
		{"InputTooLarge", path, big, nil, 400, codeInvalidTask, "input_too_large"},
		{"BadDeadline", path, `{"input":1,"deadline":"tomorrow"}`, nil, 400, codeInvalidTask, "bad_deadline"},
		{"NotBeforeTooFar", path, `{"input":1,"notBefore":"2999-01-01T00:00:00Z"}`, nil, 400, codeInvalidTask, "not_before_too_far"},
		{"BadParams", path, `{"input":1,"params":[1]}`, nil, 400, codeInvalidTask, "bad_params"},
		{"BadStage", "/v1/stages/Bad_Stage/tasks", `{"input":1}`, nil, 400, codeInvalidTask, "bad_charset"},
		{"StageNotAllowed", "/v1/stages/third-stage/tasks", `{"input":1}`, nil, 403, codeStageNotAllowed, ""},
		{"OtherTenant", path, `{"input":1,"tenant":"beta"}`, nil, 403, codeTenantMismatch, ""},
		{"BodyTooLarge", path, huge, nil, 413, codeBodyTooLarge, ""},
		{"MediaType", path, `{"input":1}`, []string{"Content-Type", "text/plain"}, 415, codeUnsupportedMediaType, ""},
		{"WaitTooLong", path + "?wait=11s", `{"input":1}`, nil, 400, codeBadRequest, ""},
		{"WaitNegative", path + "?wait=-1s", `{"input":1}`, nil, 400, codeBadRequest, ""},
		{"WaitGarbage", path + "?wait=soon", `{"input":1}`, nil, 400, codeBadRequest, ""},
		{"WaitNaN", path + "?wait=NaN", `{"input":1}`, nil, 400, codeBadRequest, ""},
		{"IdempotencyKeyTooLong", path, `{"input":1}`, []string{"Idempotency-Key", strings.Repeat("k", 256)}, 400, codeBadRequest, ""},
		{"IdempotencyKeyControl", path, `{"input":1}`, []string{"Idempotency-Key", "a\tb"}, 400, codeBadRequest, ""},
		{"IdempotencyKeyEmpty", path, `{"input":1}`, []string{"Idempotency-Key", ""}, 400, codeBadRequest, ""},
		{"IdempotencyKeyTwice", path, `{"input":1}`, []string{"Idempotency-Key", "a", "Idempotency-Key", "b"}, 400, codeBadRequest, ""},
		{"InvalidUTF8", path, "{\"input\":\"\xff\xfe\"}", nil, 400, codeBadRequest, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := b.do("POST", tc.path, acmeSecret, tc.body, tc.headers...)
			var e errorBody
			r.json(t, &e)
			if r.status != tc.status || e.Code != tc.code || e.Reason != tc.reason || e.Error == "" {
				t.Errorf("%d %s, want %d %s %s", r.status, r.body, tc.status, tc.code, tc.reason)
			}
			if ct := r.header.Get("Content-Type"); ct != "application/json" {
				t.Errorf("Content-Type %q", ct)
			}
		})
	}
	for _, s := range []string{stage, "other-stage", "third-stage"} {
		if n := b.xlen(b.shared, s); n != 0 {
			t.Errorf("%d tasks enqueued on %s by refused requests", n, s)
		}
	}
	// The body may name its own tenant.
	if r := b.do("POST", path, acmeSecret, `{"input":1,"tenant":"acme"}`); r.status != http.StatusAccepted {
		t.Errorf("naming its own tenant: %d %s", r.status, r.body)
	}
	if r := b.do("PUT", path, acmeSecret, `{}`); r.status != http.StatusMethodNotAllowed || r.code() != codeMethodNotAllowed ||
		r.header.Get("Allow") != "POST" {
		t.Errorf("PUT: %d %s (Allow %q)", r.status, r.body, r.header.Get("Allow"))
	}
	if r := b.do("GET", "/v2/whatever", acmeSecret, nil); r.status != http.StatusNotFound || r.code() != codeNotFound {
		t.Errorf("unknown route: %d %s", r.status, r.body)
	}
}

// TestTraceContext: a well-formed traceparent and tracestate go into the task; a malformed
// one is dropped, and the task enqueued all the same.
func TestTraceContext(t *testing.T) {
	b := newBundle(t, nil)
	const tp = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
	for _, tc := range []struct {
		name               string
		headers            []string
		wantParent, wantSt string
	}{
		{"Both", []string{"traceparent", tp, "tracestate", "rojo=00f067aa0ba902b7", "tracestate", "congo=t61rcWkgMzE"},
			tp, "rojo=00f067aa0ba902b7,congo=t61rcWkgMzE"},
		{"BadParent", []string{"traceparent", strings.ToUpper(tp), "tracestate", "rojo=1"}, "", ""},
		{"BadState", []string{"traceparent", tp, "tracestate", "no equals sign"}, tp, ""},
		{"None", nil, "", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := b.do("POST", "/v1/stages/"+stage+"/tasks", acmeSecret, `{"input":1}`, tc.headers...)
			var rc client.Receipt
			r.json(t, &rc)
			task := b.taskOf(t, rc)
			if task.Traceparent != tc.wantParent || task.Tracestate != tc.wantSt || task.Tenant != "acme" {
				t.Errorf("task traceparent %q tracestate %q tenant %q", task.Traceparent, task.Tracestate, task.Tenant)
			}
		})
	}
}

func TestValidTraceparent(t *testing.T) {
	for _, tc := range []struct {
		s  string
		ok bool
	}{
		{"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", true},
		{"01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-abcdef", true},
		{"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-abcdef", false}, // version 00 has four fields
		{"ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", false},
		{"00-00000000000000000000000000000000-00f067aa0ba902b7-01", false},
		{"00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01", false},
		{"00-4bf92f3577b34da6a3ce929d0e0e473-600f067aa0ba902b7-01", false},
		{"00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01", false},
		{"", false},
	} {
		if got := validTraceparent(tc.s); got != tc.ok {
			t.Errorf("validTraceparent(%q) = %v", tc.s, got)
		}
	}
}

// TestIdempotency: a retried POST with the same Idempotency-Key and body gets the first
// receipt and enqueues nothing; with wait it waits for that task. The same key with another
// body is refused 422. Eight concurrent requests of a new key enqueue once and all get the
// same receipt. Keys are per tenant.
func TestIdempotency(t *testing.T) {
	b := newBundle(t, nil)
	b.consumer(b.shared)
	path := "/v1/stages/" + stage + "/tasks"
	first := b.do("POST", path, acmeSecret, `{"input":{"q":1}}`, "Idempotency-Key", "order-1")
	var rc1 client.Receipt
	first.json(t, &rc1)
	if first.status != http.StatusAccepted || first.header.Get("Idempotent-Replayed") != "" {
		t.Fatalf("first: %d %s", first.status, first.body)
	}
	// The same body reformatted is the same request; with wait it gets the first task's event.
	again := b.do("POST", path+"?wait=20s", acmeSecret, "{ \"input\" : { \"q\" : 1 } }\n", "Idempotency-Key", "order-1")
	var d done
	again.json(t, &d)
	if again.status != http.StatusOK || d.Receipt != rc1 || d.Event.TaskID != rc1.TaskID || again.header.Get("Idempotent-Replayed") != "true" {
		t.Errorf("retry: %d %s", again.status, again.body)
	}
	if n := b.xlen(b.shared, stage); n != 1 {
		t.Errorf("%d tasks on the stream after a retry, want 1", n)
	}
	for _, body := range []string{`{"input":{"q":2}}`, `{"input":{"q":1},"taskId":"x"}`} {
		if r := b.do("POST", path, acmeSecret, body, "Idempotency-Key", "order-1"); r.status != http.StatusUnprocessableEntity ||
			r.code() != codeIdempotencyMismatch {
			t.Errorf("same key, body %s: %d %s", body, r.status, r.body)
		}
	}
	if r := b.do("POST", "/v1/stages/other-stage/tasks", acmeSecret, `{"input":{"q":1}}`, "Idempotency-Key", "order-1"); r.status != http.StatusUnprocessableEntity {
		t.Errorf("same key and body, another stage: %d %s", r.status, r.body)
	}
	// Another tenant's key of the same name is its own.
	if r := b.do("POST", path, betaSecret, `{"input":{"q":1}}`, "Idempotency-Key", "order-1"); r.status != http.StatusAccepted ||
		r.header.Get("Idempotent-Replayed") != "" {
		t.Errorf("beta, acme's key name: %d %s", r.status, r.body)
	}

	const n = 8
	var (
		wg       sync.WaitGroup
		receipts [n]client.Receipt
		statuses [n]int
	)
	for i := range n {
		wg.Go(func() {
			r := b.do("POST", path, acmeSecret, `{"input":{"q":"concurrent"}}`, "Idempotency-Key", "order-2")
			statuses[i] = r.status
			_ = json.Unmarshal(r.body, &receipts[i])
		})
	}
	wg.Wait()
	for i := range n {
		if statuses[i] != http.StatusAccepted || receipts[i] != receipts[0] || receipts[i].TaskID == "" {
			t.Errorf("concurrent request %d: %d %+v, want 202 and the receipt %+v", i, statuses[i], receipts[i], receipts[0])
		}
	}
	if n := b.xlen(b.shared, stage); n != 3 {
		t.Errorf("%d tasks on the stream, want 3: acme's two keys and beta's", n)
	}
}

// TestTaskIDPerTenant: a task id names one task of a tenant: a second POST under it is
// refused 409, while another tenant may use the same id, and GET finds each tenant's own.
func TestTaskIDPerTenant(t *testing.T) {
	b := newBundle(t, nil)
	path := "/v1/stages/" + stage + "/tasks"
	if r := b.do("POST", path, acmeSecret, `{"input":1,"taskId":"t-1"}`); r.status != http.StatusAccepted {
		t.Fatalf("first: %d %s", r.status, r.body)
	}
	if r := b.do("POST", path, acmeSecret, `{"input":2,"taskId":"t-1"}`); r.status != http.StatusConflict || r.code() != codeTaskIDTaken {
		t.Errorf("second: %d %s", r.status, r.body)
	}
	if r := b.do("POST", path, betaSecret, `{"input":3,"taskId":"t-1"}`); r.status != http.StatusAccepted {
		t.Errorf("beta: %d %s", r.status, r.body)
	}
	var a, c pending
	b.do("GET", "/v1/tasks/t-1", acmeSecret, nil).json(t, &a)
	b.do("GET", "/v1/tasks/t-1", betaSecret, nil).json(t, &c)
	if a.Receipt == nil || c.Receipt == nil || a.Receipt.Tenant != "acme" || c.Receipt.Tenant != "beta" || a.Receipt.StreamID == c.Receipt.StreamID {
		t.Errorf("acme's t-1 %+v, beta's %+v", a.Receipt, c.Receipt)
	}
	if n := b.xlen(b.shared, stage); n != 2 {
		t.Errorf("%d tasks, want 2", n)
	}
}

// TestTenantIsolation: a token is refused every other tenant's task and key, exactly as an
// unknown one, on a shared prefix and on another prefix.
func TestTenantIsolation(t *testing.T) {
	b := newBundle(t, nil)
	b.consumer(b.shared)
	var d done
	r := b.do("POST", "/v1/stages/"+stage+"/tasks?wait=20s", acmeSecret, `{"input":{"secret":"acme's"},"taskId":"acme-task"}`)
	r.json(t, &d)
	if r.status != http.StatusOK {
		t.Fatalf("acme: %d %s", r.status, r.body)
	}
	key := d.Receipt.RequestKey
	for sec, tenant := range map[string]string{betaSecret: "beta", gammaSecret: "gamma"} {
		unknown := "ai:" + stage + ":v1:" + tenant + ":rk:nothing-here"
		for _, tc := range []struct{ method, path, unknown string }{
			{"GET", "/v1/tasks/acme-task", "/v1/tasks/no-such-task"},
			{"GET", "/v1/keys/" + key, "/v1/keys/" + unknown},
			{"POST", "/v1/keys/" + key + "/cancel", "/v1/keys/" + unknown + "/cancel"},
		} {
			got := b.do(tc.method, tc.path, sec, nil)
			want := b.do(tc.method, tc.unknown, sec, nil)
			if got.status != http.StatusNotFound || got.code() != codeNotFound || got.status != want.status ||
				string(got.body) != string(want.body) {
				t.Errorf("%s %s with %s's token: %d %s; an unknown one: %d %s", tc.method, tc.path, tenant, got.status, got.body,
					want.status, want.body)
			}
		}
	}
	// Acme's own key answers.
	if r := b.do("GET", "/v1/keys/"+key, acmeSecret, nil); r.status != http.StatusOK {
		t.Errorf("acme's own key: %d %s", r.status, r.body)
	}
	if m, err := flight.ParseKey(key); !err || m.Tenant != "acme" {
		t.Errorf("key %q", key)
	}
}
