package gateway

import (
	"context"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/flightdeck-ai/flightdeck/client"
	"github.com/flightdeck-ai/flightdeck/flight"
)

// TestAuthentication: no token is 401 token_required, a wrong one 401 token_refused; after
// FailuresPerMinute wrong ones every token of that network is 429 with Retry-After until the
// budget refills, then the right one passes again. The log never holds a token.
func TestAuthentication(t *testing.T) {
	var (
		mu  sync.Mutex
		now = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	)
	b := newBundle(t, func(c *Config) {
		c.FailuresPerMinute = 3
		c.Now = func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
	})
	if r := b.do("GET", "/v1/tasks/x", "", nil); r.status != http.StatusUnauthorized || r.code() != codeTokenRequired ||
		r.header.Get("WWW-Authenticate") == "" {
		t.Errorf("no token: %d %s", r.status, r.body)
	}
	for i := range 3 {
		if r := b.do("GET", "/v1/tasks/x", "wrong-secret-"+strings.Repeat("x", i), nil); r.status != http.StatusUnauthorized ||
			r.code() != codeTokenRefused {
			t.Errorf("wrong token %d: %d %s", i, r.status, r.body)
		}
	}
	if r := b.do("GET", "/v1/tasks/x", acmeSecret, nil); r.status != http.StatusTooManyRequests || r.code() != codeRateLimited ||
		r.header.Get("Retry-After") == "" {
		t.Errorf("right token past the budget: %d %s", r.status, r.body)
	}
	mu.Lock()
	now = now.Add(21 * time.Second) // one failure a 20 s refills
	mu.Unlock()
	if r := b.do("GET", "/v1/tasks/x", acmeSecret, nil); r.status != http.StatusNotFound {
		t.Errorf("right token after the refill: %d %s", r.status, r.body)
	}
	if r := b.do("GET", "/healthz", "", nil); r.status != http.StatusOK {
		t.Errorf("healthz: %d", r.status)
	}
	for _, s := range []string{acmeSecret, "wrong-secret-"} {
		if strings.Contains(b.logs.String(), s) {
			t.Errorf("the log holds a token %q", s)
		}
	}
}

// TestDrain: Drain answers a wait in progress 202 with its receipt at once, and /readyz 503
// shutting_down from then on, while it answered 200 before.
func TestDrain(t *testing.T) {
	b := newBundle(t, nil)
	if r := b.do("GET", "/readyz", "", nil); r.status != http.StatusOK {
		t.Fatalf("readyz: %d %s", r.status, r.body)
	}
	waited := make(chan resp, 1)
	go func() {
		waited <- b.do("POST", "/v1/stages/nobody-serves-this/tasks?wait=60s", acmeSecret, `{"input":1}`)
	}()
	for deadline := time.Now().Add(30 * time.Second); b.xlen(b.shared, "nobody-serves-this") == 0; {
		if time.Now().After(deadline) {
			t.Fatal("the task was not enqueued")
		}
		time.Sleep(10 * time.Millisecond)
	}
	start := time.Now()
	b.gw.Drain()
	r := <-waited
	var rc client.Receipt
	r.json(t, &rc)
	if r.status != http.StatusAccepted || rc.TaskID == "" || time.Since(start) > 10*time.Second {
		t.Errorf("the wait after Drain: %d %s after %v", r.status, r.body, time.Since(start))
	}
	if r := b.do("GET", "/readyz", "", nil); r.status != http.StatusServiceUnavailable || r.code() != codeShuttingDown {
		t.Errorf("readyz after Drain: %d %s", r.status, r.body)
	}
}

// TestKeys: a task scheduled for later shows its key as SCHEDULED, and cancelling the key
// cancels it; a key whose flight succeeded is 200 SUCCEEDED and its cancel 409
// already_final.
func TestKeys(t *testing.T) {
	b := newBundle(t, nil)
	b.consumer(b.shared)
	later := time.Now().Add(time.Hour).UTC().Format(time.RFC3339)
	r := b.do("POST", "/v1/stages/"+stage+"/tasks", acmeSecret, `{"input":{"q":"later"},"notBefore":"`+later+`"}`)
	var rc client.Receipt
	r.json(t, &rc)
	if r.status != http.StatusAccepted || rc.RequestKey == "" {
		t.Fatalf("POST: %d %s", r.status, r.body)
	}
	var st keyState
	// The key is scheduled once the consumer has read its task; until then it answers 404.
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		r = b.do("GET", "/v1/keys/"+rc.RequestKey, acmeSecret, nil)
		if r.status != http.StatusNotFound || time.Now().After(deadline) {
			break
		}
	}
	r.json(t, &st)
	if r.status != http.StatusOK || st.Status != "SCHEDULED" || len(st.Scheduled) != 1 || st.Tenant != "acme" {
		t.Errorf("GET scheduled key: %d %s", r.status, r.body)
	}
	var cr cancelResult
	r = b.do("POST", "/v1/keys/"+rc.RequestKey+"/cancel", acmeSecret, `{"reason":"not needed"}`)
	r.json(t, &cr)
	if r.status != http.StatusOK || cr.Scheduled != 1 || cr.Reason != "not needed" {
		t.Errorf("cancel: %d %s", r.status, r.body)
	}
	if r := b.do("GET", "/v1/keys/"+rc.RequestKey, acmeSecret, nil); r.status == http.StatusOK && strings.Contains(string(r.body), "SCHEDULED") {
		t.Errorf("after the cancel: %d %s", r.status, r.body)
	}

	var d done
	b.do("POST", "/v1/stages/"+stage+"/tasks?wait=30s", acmeSecret, `{"input":{"q":"now"}}`).json(t, &d)
	r = b.do("GET", "/v1/keys/"+d.Receipt.RequestKey, acmeSecret, nil)
	r.json(t, &st)
	if r.status != http.StatusOK || st.Status != "SUCCEEDED" || st.OwnerTaskID != d.Receipt.TaskID {
		t.Errorf("GET finished key: %d %s", r.status, r.body)
	}
	r = b.do("POST", "/v1/keys/"+d.Receipt.RequestKey+"/cancel", acmeSecret, nil)
	var e errorBody
	r.json(t, &e)
	if r.status != http.StatusConflict || e.Code != codeAlreadyFinal || e.Status != "SUCCEEDED" {
		t.Errorf("cancel of a finished key: %d %s", r.status, r.body)
	}
	if r := b.do("POST", "/v1/keys/"+d.Receipt.RequestKey+"/cancel", acmeSecret, `{"why":1}`); r.status != http.StatusBadRequest {
		t.Errorf("cancel with an unknown field: %d %s", r.status, r.body)
	}
}

// TestTracerProvider: with a TracerProvider, a POST carrying a traceparent enqueues a task
// whose traceparent has the request's trace id and names the gateway's producer span, a
// child of the request's span.
func TestTracerProvider(t *testing.T) {
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	b := newBundle(t, func(c *Config) { c.TracerProvider = tp })
	const traceID, parent = "4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7"
	r := b.do("POST", "/v1/stages/"+stage+"/tasks", acmeSecret, `{"input":1}`, "traceparent", "00-"+traceID+"-"+parent+"-01")
	var rc client.Receipt
	r.json(t, &rc)
	task := b.taskOf(t, rc)
	spans := rec.Ended()
	if len(spans) != 1 {
		t.Fatalf("%d spans ended, want the producer span", len(spans))
	}
	sp := spans[0]
	if !strings.HasPrefix(task.Traceparent, "00-"+traceID+"-") || sp.SpanContext().TraceID().String() != traceID ||
		sp.Parent().SpanID().String() != parent || !strings.Contains(task.Traceparent, sp.SpanContext().SpanID().String()) {
		t.Errorf("task traceparent %q; span %s parent %s", task.Traceparent, sp.SpanContext().SpanID(), sp.Parent().SpanID())
	}
}

// TestKeysOfAStageNotServed: the tenant's key of a stage the gateway does not serve answers
// 403 stage_not_allowed, for inspect and cancel; another tenant's key of that stage answers
// 404, as an unknown key does.
func TestKeysOfAStageNotServed(t *testing.T) {
	b := newBundle(t, func(c *Config) { c.Stages = []string{stage} })
	own, err := flight.NamespacedKey("other-stage", "acme", "rk-1", 1)
	if err != nil {
		t.Fatal(err)
	}
	others, err := flight.NamespacedKey("other-stage", "beta", "rk-1", 1)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		method, path string
		status       int
		code         string
	}{
		{"GET", "/v1/keys/" + own, 403, codeStageNotAllowed},
		{"POST", "/v1/keys/" + own + "/cancel", 403, codeStageNotAllowed},
		{"GET", "/v1/keys/" + others, 404, codeNotFound},
		{"POST", "/v1/keys/" + others + "/cancel", 404, codeNotFound},
	} {
		if r := b.do(tc.method, tc.path, acmeSecret, nil); r.status != tc.status || r.code() != tc.code {
			t.Errorf("%s %s: %d %s, want %d %s", tc.method, tc.path, r.status, r.body, tc.status, tc.code)
		}
	}
}
