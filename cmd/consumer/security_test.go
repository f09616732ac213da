package main_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/flightdeck-ai/flightdeck/internal/testkit/configdoc"
	"github.com/flightdeck-ai/flightdeck/internal/testkit/redistest"
	"github.com/flightdeck-ai/flightdeck/topics"
)

// securityYAML: the light stages with fast heartbeats, and a heavy stage with a session lock,
// so that a run reaches every kind of Redis access a consumer makes.
const securityYAML = `stages:
  interview-evaluation:
    heartbeatInterval: 250ms
    lease: 1500ms
    concurrency: 3
  interview-followup:
    heartbeatInterval: 250ms
    lease: 1500ms
    concurrency: 1
  interview-extraction:
    heartbeatInterval: 250ms
    lease: 1500ms
    concurrency: 2
`

const securityStages = "interview-evaluation,interview-followup,interview-extraction"

// documentedACL returns the one line of the code block of docs/SECURITY.md whose fence is
// tagged lang ("acl", "acl-producer").
func documentedACL(t *testing.T, lang string) string {
	t.Helper()
	block, err := configdoc.CodeBlock(filepath.Join("..", "..", "docs", "SECURITY.md"), lang)
	if err != nil || strings.Count(block, "\n") != 0 {
		t.Fatalf("docs/SECURITY.md has no one-line %s block: %q (%v)", lang, block, err)
	}
	return block
}

// leastACL returns the consumer's ACL file line documented in docs/SECURITY.md (the one line
// of its "acl" code block) with the password and key prefix of this test.
func leastACL(t *testing.T, password, prefix string) string {
	t.Helper()
	block := documentedACL(t, "acl")
	if !strings.HasPrefix(block, "user flightdeck ") {
		t.Fatalf("docs/SECURITY.md has no one-line acl block with the flightdeck user: %q", block)
	}
	if !strings.Contains(block, " >CHANGE-ME ") || !strings.Contains(block, " ~ai:* ") {
		t.Fatalf("the documented ACL line lost its >CHANGE-ME password or ~ai:* keys: %q", block)
	}
	block = strings.Replace(block, " >CHANGE-ME ", " >"+password+" ", 1)
	return strings.Replace(block, " ~ai:* ", " ~"+prefix+":* ", 1)
}

// secret returns a random string that appears nowhere unless leaked.
func secret(t *testing.T, prefix string) string {
	var b [12]byte
	if _, err := rand.Read(b[:]); err != nil {
		t.Fatal(err)
	}
	return prefix + hex.EncodeToString(b[:])
}

// newSecureE2E sets a test up with key prefix on a private server started with opts; the
// admin client is the default user.
func newSecureE2E(t *testing.T, prefix string, opts *redistest.Options) (*e2e, *redistest.Server) {
	srv := redistest.Start(t, opts)
	e := newE2EOn(t, srv.Client(), srv.URL(), prefix)
	e.config = filepath.Join(t.TempDir(), "security.yaml")
	if err := os.WriteFile(e.config, []byte(securityYAML), 0o600); err != nil {
		t.Fatal(err)
	}
	e.stages, e.grace = securityStages, "2s"
	return e, srv
}

// stop sends SIGTERM and waits for the process to exit 0.
func (p *proc) stop(t *testing.T) {
	t.Helper()
	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case <-p.done:
	case <-time.After(15 * time.Second):
		t.Fatalf("%s did not exit after SIGTERM", p.name)
	}
	if code := p.cmd.ProcessState.ExitCode(); code != 0 {
		t.Errorf("%s exited with %d", p.name, code)
	}
}

// aclDenials returns the ACL LOG entries of user.
func aclDenials(t *testing.T, admin redis.UniversalClient, user string) []string {
	return redistest.ACLDenials(t, admin, user)
}

// runPipeline sends a mix of work that reaches every Redis access of a consumer process (owners,
// followers, a retry, a final failure, session-locked tasks, a dead letter, and through the
// dashboard with uiToken: its reads, a cancel and a requeue) and checks each outcome.
func runPipeline(t *testing.T, e *e2e, p *proc, uiToken string) {
	t.Helper()
	want := map[string]topics.Status{}
	add := func(tk topics.Task, st topics.Status) {
		t.Helper()
		if _, err := e.w.EnqueueTask(e.ctx, tk); err != nil {
			t.Fatal(err)
		}
		want[tk.TaskID] = st
	}
	for i := range 8 {
		add(task(fmt.Sprintf("ev%d", i), "interview-evaluation", i%2, 300), topics.StatusSucceeded)
	}
	add(task("fu", "interview-followup", 1, 0), topics.StatusSucceeded)
	in := func(s string) json.RawMessage { return json.RawMessage(s) }
	add(topics.Task{TaskID: "retry", Stage: "interview-evaluation", Tenant: "acme",
		Input: in(`{"r":1,"sim":{"fail":"retryable","failAttempts":1}}`)}, topics.StatusSucceeded)
	add(topics.Task{TaskID: "final", Stage: "interview-evaluation", Tenant: "acme",
		Input: in(`{"f":1,"sim":{"fail":"final"}}`)}, topics.StatusFailed)
	// Due in a few seconds: it waits in the scheduled set (schedule_add, _due and _done).
	add(topics.Task{TaskID: "scheduled", Stage: "interview-evaluation", Tenant: "acme", Input: in(`{"later":1}`),
		NotBefore: topics.FormatTime(time.Now().Add(2500 * time.Millisecond))}, topics.StatusSucceeded)
	for i := range 2 {
		add(topics.Task{TaskID: fmt.Sprint("heavy", i), Stage: "interview-extraction", Tenant: "acme", SessionID: "s-1",
			Input: in(fmt.Sprintf(`{"resume":%d,"sim":{"latencyMs":200}}`, i))}, topics.StatusSucceeded)
	}
	slow := topics.Task{TaskID: "cancelled", Stage: "interview-evaluation", Tenant: "acme",
		RequestKey: "slow-1", Input: in(`{"sim":{"latencyMs":5000}}`)}
	add(slow, topics.StatusCancelled)
	e.rdb.XAdd(e.ctx, &redis.XAddArgs{Stream: e.ks.Tasks("interview-evaluation"),
		Values: []any{"_watermill_message_uuid", "bad", "payload", "{not json"}})
	key := keyOf(t, slow)
	e.waitOwned([]string{key}, p.name, 10*time.Second)
	p.ui(t, uiToken, "cancel", map[string]string{"key": key, "reason": "test"})
	ids := map[string]bool{}
	for id := range want {
		ids[id] = true
	}
	got := e.collect([]string{"interview-evaluation", "interview-followup", "interview-extraction"}, ids, 20*time.Second)
	for id, st := range want {
		if evs := got[id]; len(evs) == 0 || evs[0].Status != st {
			t.Errorf("%s: events %+v, want %s", id, evs, st)
		}
	}
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		n := e.rdb.XLen(e.ctx, e.ks.DLQ("interview-evaluation")).Val()
		if n == 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d dead letters, want 1", n)
		}
	}
	// The scrape-time gauges read Redis (XPENDING, XINFO GROUPS, XLEN, SCAN, HLEN); a gauge
	// whose read was refused would be missing.
	m := p.scrape(t)
	for _, g := range []string{"flightdeck_backlog_entries", "flightdeck_dlq_length", "flightdeck_parked_followers"} {
		if _, ok := m[g+`{stage="interview-evaluation"}`]; !ok {
			t.Errorf("/metrics under the ACL has no %s", g)
		}
	}
	scrapeText(t, p, uiToken, "/readyz", "/ui/api/overview", "/ui/api/node", "/ui/api/flights",
		"/ui/api/flight?key="+key, "/ui/api/events", "/ui/api/dlq")
	// Requeue the dead letter from the dashboard: it is still bad, so it comes back.
	dl := e.rdb.XRange(e.ctx, e.ks.DLQ("interview-evaluation"), "-", "+").Val()
	p.ui(t, uiToken, "requeue", map[string]string{"stage": "interview-evaluation", "id": dl[0].ID})
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		d := e.rdb.XRange(e.ctx, e.ks.DLQ("interview-evaluation"), "-", "+").Val()
		if len(d) == 1 && d[0].ID != dl[0].ID {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the requeued dead letter did not come back: %v", d)
		}
	}
}

// ui posts a dashboard action and fails the test unless it succeeds.
func (p *proc) ui(t *testing.T, token, action string, body map[string]string) {
	t.Helper()
	b, _ := json.Marshal(body)
	req, _ := http.NewRequest(http.MethodPost, "http://"+p.http+"/ui/api/"+action, strings.NewReader(string(b)))
	req.Header.Set("Authorization", "Bearer "+token)
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	out, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("dashboard %s: %d %s", action, resp.StatusCode, out)
	}
}

// TestPipelineUnderLeastACL: a consumer process whose Redis user has exactly the ACL written in
// docs/SECURITY.md runs every kind of task to its expected outcome, serves /metrics, /readyz
// and the dashboard (reads and actions), shuts down gracefully while it owns a task, and
// Redis refuses it nothing; the user reaches nothing outside its prefix.
func TestPipelineUnderLeastACL(t *testing.T) {
	prefix := redistest.Prefix()
	pw := secret(t, "pw-")
	opsPW := secret(t, "ops-")
	e, srv := newSecureE2E(t, prefix, &redistest.Options{ACL: []string{leastACL(t, pw, prefix), operatorACL(t, opsPW)}})
	url := fmt.Sprintf("redis://flightdeck:%s@%s/0", pw, srv.Addr())
	// The operator's step: the consumer line may not load functions.
	loadFunctions(t, fmt.Sprintf("redis://flightdeck-ops:%s@%s/0", opsPW, srv.Addr()))
	token := secret(t, "ui-")
	p := e.startWith("acl", []string{"REDIS_URL=" + url, "FLIGHTDECK_UI_TOKEN=" + token}, true)
	runPipeline(t, e, p, token)

	// Leave while owning a task: the owner fails it as retryable and removes its liveness.
	left := topics.Task{TaskID: "left", Stage: "interview-evaluation", Tenant: "acme", RequestKey: "left-1",
		Input: json.RawMessage(`{"sim":{"latencyMs":8000}}`)}
	if _, err := e.w.EnqueueTask(e.ctx, left); err != nil {
		t.Fatal(err)
	}
	e.waitOwned([]string{keyOf(t, left)}, p.name, 10*time.Second)
	p.stop(t)
	if d := aclDenials(t, e.rdb, "flightdeck"); len(d) > 0 {
		t.Errorf("Redis refused the documented ACL user (add the commands to docs/SECURITY.md):\n%s", strings.Join(d, "\n"))
	}
	// The user reaches nothing outside its prefix.
	c := redis.NewClient(&redis.Options{Addr: srv.Addr(), Username: "flightdeck", Password: pw})
	defer c.Close()
	for _, cmd := range [][]any{{"get", "other:key"}, {"xadd", "other:stream", "*", "a", "b"}, {"flushall"},
		{"config", "get", "*"}, {"keys", "*"}, {"scan", "0", "match", "beta:*"}, {"acl", "list"}, {"publish", "ch", "x"},
		{"function", "load", "replace", "#!lua name=x\nredis.register_function('f', function() return 1 end)"}} {
		if err := c.Do(e.ctx, cmd...).Err(); err == nil || !strings.Contains(err.Error(), "NOPERM") {
			t.Errorf("%v under the consumer's ACL: %v, want NOPERM", cmd, err)
		}
	}
}

// TestPipelineOverTLS: a consumer process reaches a TLS-only redis-server (test CA, client
// certificates required) through rediss:// with REDIS_TLS_CA_FILE, REDIS_TLS_CERT_FILE and
// REDIS_TLS_KEY_FILE, as the documented ACL user, and runs the pipeline.
func TestPipelineOverTLS(t *testing.T) {
	t.Cleanup(func() {
		if t.Failed() {
			t.Log("hint: the consumer reads REDIS_TLS_* only when main.go builds its clients with redisconn.UniversalFromEnv(url, os.Getenv)")
		}
	})
	prefix := redistest.Prefix()
	pw := secret(t, "pw-")
	e, srv := newSecureE2E(t, prefix, &redistest.Options{TLS: true, ACL: []string{leastACL(t, pw, prefix)},
		Args: []string{"--tls-auth-clients", "yes"}})
	loadLibrary(t, srv)
	f := srv.TLS()
	url := fmt.Sprintf("rediss://flightdeck:%s@%s/0", pw, srv.Addr())
	p := e.startWith("tls", []string{"REDIS_URL=" + url, "REDIS_TLS_CA_FILE=" + f.CAFile,
		"REDIS_TLS_CERT_FILE=" + f.ClientCertFile, "REDIS_TLS_KEY_FILE=" + f.ClientKeyFile}, true)
	want := map[string]bool{}
	for i := range 6 {
		tk := task(fmt.Sprintf("tls%d", i), "interview-evaluation", i%2, 100)
		if _, err := e.w.EnqueueTask(e.ctx, tk); err != nil {
			t.Fatal(err)
		}
		want[tk.TaskID] = true
	}
	got := e.collect([]string{"interview-evaluation"}, want, 20*time.Second)
	for id := range want {
		if evs := got[id]; len(evs) == 0 || evs[0].Status != topics.StatusSucceeded {
			t.Errorf("%s: %+v", id, evs)
		}
	}
	if n := p.modelCalls(t); n != 2 {
		t.Errorf("%d model calls over TLS, want 2", n)
	}
	p.stop(t)
}

// fakeOpenAI is an OpenAI-compatible endpoint that checks the API key. A prompt "echo" makes it
// answer an error whose message repeats the key, as some providers do.
func fakeOpenAI(t *testing.T, key string, calls *atomic.Int64) *httptest.Server {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		calls.Add(1)
		body, _ := io.ReadAll(r.Body)
		w.Header().Set("Content-Type", "application/json")
		if r.Header.Get("Authorization") != "Bearer "+key {
			w.WriteHeader(http.StatusUnauthorized)
			fmt.Fprint(w, `{"error":{"message":"missing or wrong API key"}}`)
			return
		}
		if strings.Contains(string(body), `"echo"`) {
			w.WriteHeader(http.StatusBadRequest)
			fmt.Fprintf(w, `{"error":{"message":"Incorrect API key provided: %s. Check it."}}`, key)
			return
		}
		fmt.Fprint(w, `{"model":"fake-1","choices":[{"message":{"role":"assistant","content":"a fine answer"},"finish_reason":"stop"}]}`)
	}))
	t.Cleanup(srv.Close)
	return srv
}

// TestSecretsStayOut: a consumer given a Redis password in REDIS_URL and an OpenAI key in
// OPENAI_API_KEY, logging at debug level, runs tasks against a fake OpenAI endpoint (one of
// whose errors echoes the key), then is started with a wrong password and with a malformed
// URL: no secret (nor the dashboard token) appears in any log line, event, dead letter,
// stored flight, /metrics, dashboard page or command line.
func TestSecretsStayOut(t *testing.T) {
	prefix := redistest.Prefix()
	pw := secret(t, "redispw-")
	apiKey := secret(t, "sk-test-")
	e, srv := newSecureE2E(t, prefix, &redistest.Options{ACL: []string{leastACL(t, pw, prefix)}})
	if err := os.WriteFile(e.config, []byte(securityYAML+"    model: openai\n"), 0o600); err != nil {
		t.Fatal(err) // the heavy stage (last in the file) calls the fake provider
	}
	loadLibrary(t, srv)
	var calls atomic.Int64
	ai := fakeOpenAI(t, apiKey, &calls)
	url := fmt.Sprintf("redis://flightdeck:%s@%s/0", pw, srv.Addr())
	uiToken := secret(t, "ui-")
	env := []string{"REDIS_URL=" + url, "OPENAI_API_KEY=" + apiKey, "OPENAI_BASE_URL=" + ai.URL, "OPENAI_MODEL=fake-1",
		"FLIGHTDECK_UI_TOKEN=" + uiToken}
	p := e.startWith("secrets", env, true, "--log-level", "debug")
	cmdline, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", p.cmd.Process.Pid))
	if err != nil {
		t.Fatal(err)
	}

	want := map[string]topics.Status{"ok": topics.StatusSucceeded, "echo": topics.StatusFailed, "sim": topics.StatusSucceeded}
	tasks := []topics.Task{
		{TaskID: "ok", Stage: "interview-extraction", Tenant: "acme", SessionID: "s", Input: json.RawMessage(`{"prompt":"hello"}`)},
		{TaskID: "echo", Stage: "interview-extraction", Tenant: "acme", SessionID: "s", Input: json.RawMessage(`{"prompt":"echo"}`)},
		task("sim", "interview-evaluation", 1, 0),
	}
	for _, tk := range tasks {
		if _, err := e.w.EnqueueTask(e.ctx, tk); err != nil {
			t.Fatal(err)
		}
	}
	e.rdb.XAdd(e.ctx, &redis.XAddArgs{Stream: e.ks.Tasks("interview-extraction"),
		Values: []any{"_watermill_message_uuid", "bad", "payload", `{"taskId":"x{}"}`}})
	got := e.collect([]string{"interview-evaluation", "interview-extraction"}, map[string]bool{"ok": true, "echo": true, "sim": true}, 20*time.Second)
	for id, st := range want {
		if evs := got[id]; len(evs) == 0 || evs[0].Status != st {
			t.Errorf("%s: %+v, want %s", id, evs, st)
		}
	}
	if evs := got["echo"]; len(evs) > 0 && !strings.Contains(evs[0].Error, "[REDACTED]") {
		t.Errorf("the provider's echo of the key is not marked redacted: %q", evs[0].Error)
	}
	if calls.Load() < 2 {
		t.Errorf("the fake provider saw %d calls: the key was never used", calls.Load())
	}
	pages := scrapeText(t, p, uiToken, "/metrics", "/readyz", "/ui/api/overview", "/ui/api/node", "/ui/api/flights",
		"/ui/api/flight?key="+keyOf(t, tasks[1]), "/ui/api/events", "/ui/api/dlq?stage="+"interview-extraction")
	p.stop(t)

	// A wrong password and a malformed URL: the errors name neither password.
	wrong := secret(t, "wrongpw-")
	bad := e.startWith("wrong-password", []string{"REDIS_URL=" + fmt.Sprintf("redis://flightdeck:%s@%s/0", wrong, srv.Addr()),
		"OPENAI_API_KEY=" + apiKey, "OPENAI_BASE_URL=" + ai.URL, "OPENAI_MODEL=fake-1"}, false, "--log-level", "debug")
	malformed := e.startWith("malformed-url", []string{"REDIS_URL=" + fmt.Sprintf("redis://flightdeck:%s%%zz@%s/0", pw, srv.Addr())},
		false, "--log-level", "debug")
	for _, q := range []*proc{bad, malformed} {
		select {
		case <-q.done:
		case <-time.After(10 * time.Second):
			_ = q.cmd.Process.Signal(syscall.SIGTERM)
			<-q.done
		}
	}

	// Everything the consumers wrote: logs, streams, flights, metrics, command line.
	var haystack strings.Builder
	for _, q := range []*proc{p, bad, malformed} {
		b, err := os.ReadFile(q.logPath)
		if err != nil {
			t.Fatal(err)
		}
		haystack.Write(b)
	}
	badLog, _ := os.ReadFile(bad.logPath)
	if !strings.Contains(strings.ToLower(string(badLog)), "wrongpass") {
		t.Errorf("the wrong password was not reported:\n%s", badLog)
	}
	haystack.WriteString(pages)
	haystack.Write(cmdline)
	haystack.WriteString(dumpKeys(t, e.rdb, prefix))
	logs := haystack.String()
	if !strings.Contains(logs, `"level":"debug"`) || !strings.Contains(logs, "a fine answer") {
		t.Fatalf("the haystack lacks debug lines or the result: the test looks at the wrong output")
	}
	for name, s := range map[string]string{"Redis password": pw, "wrong Redis password": wrong, "OpenAI API key": apiKey,
		"dashboard token": uiToken} {
		if i := strings.Index(logs, s); i >= 0 {
			t.Errorf("the %s leaked: ...%s...", name, logs[max(0, i-200):min(len(logs), i+len(s)+50)])
		}
	}
}

// scrapeText returns the bodies of a consumer's HTTP pages, failing the test unless each
// answers 200; the dashboard's API is read with token.
func scrapeText(t *testing.T, p *proc, token string, paths ...string) string {
	t.Helper()
	var out strings.Builder
	for _, path := range paths {
		req, _ := http.NewRequest(http.MethodGet, "http://"+p.http+path, nil)
		if strings.HasPrefix(path, "/ui/api/") {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Errorf("GET %s: %d %.300s", path, resp.StatusCode, b)
		}
		out.Write(b)
	}
	return out.String()
}

// dumpKeys returns every key under prefix with its value, stream entries and hash fields.
func dumpKeys(t *testing.T, rdb redis.UniversalClient, prefix string) string {
	t.Helper()
	ctx := context.Background()
	var b strings.Builder
	it := rdb.Scan(ctx, 0, prefix+":*", 1000).Iterator()
	n := 0
	for it.Next(ctx) {
		k := it.Val()
		n++
		fmt.Fprintf(&b, "%s: ", k)
		switch rdb.Type(ctx, k).Val() {
		case "string":
			b.WriteString(rdb.Get(ctx, k).Val())
		case "hash":
			fmt.Fprint(&b, rdb.HGetAll(ctx, k).Val())
		case "stream":
			for _, m := range rdb.XRange(ctx, k, "-", "+").Val() {
				fmt.Fprint(&b, m.Values, "\n")
			}
		case "set":
			fmt.Fprint(&b, rdb.SMembers(ctx, k).Val())
		case "zset":
			fmt.Fprint(&b, rdb.ZRange(ctx, k, 0, -1).Val())
		}
		b.WriteByte('\n')
	}
	if err := it.Err(); err != nil || n < 5 {
		t.Fatalf("dump of %s:*: %d keys, %v", prefix, n, err)
	}
	return b.String()
}
