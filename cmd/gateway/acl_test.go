package main_test

import (
	"context"
	"fmt"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/flightdeck-ai/flightdeck/internal/testkit/configdoc"
	"github.com/flightdeck-ai/flightdeck/internal/testkit/redistest"
	"github.com/flightdeck-ai/flightdeck/topics"
)

// gatewayACL returns the gateway's ACL file line documented in docs/SECURITY.md (the one line
// of its "acl-gateway" code block) with password and the key prefix of this test.
func gatewayACL(t *testing.T, password, prefix string) string {
	t.Helper()
	block, err := configdoc.CodeBlock(filepath.Join("..", "..", "docs", "SECURITY.md"), "acl-gateway")
	if err != nil {
		t.Fatal(err)
	}
	if strings.Count(block, "\n") != 0 || !strings.HasPrefix(block, "user gateway ") || !strings.Contains(block, " >CHANGE-ME ") {
		t.Fatalf("docs/SECURITY.md has no one-line acl-gateway block for user gateway with >CHANGE-ME: %q", block)
	}
	block = strings.Replace(block, " >CHANGE-ME ", " >"+password+" ", 1)
	return strings.ReplaceAll(block, "~ai:", "~"+prefix+":")
}

// TestGatewayUnderLeastACL: the stock gateway under exactly the ACL line docs/SECURITY.md
// gives it, in front of a consumer: the Python example (enqueue and wait, an Idempotency-Key
// retry and mismatch, an event stream resumed with Last-Event-ID), a task's event by id, a
// key's state while scheduled, running and done, the cancel of a scheduled key and of a
// running flight, and /readyz all work, Redis refuses the gateway nothing (ACL LOG), and the
// user reaches nothing outside its prefix nor any server-wide command.
func TestGatewayUnderLeastACL(t *testing.T) {
	py := need(t, "python3")
	prefix := redistest.Prefix()
	pw := fmt.Sprintf("gw-%d", time.Now().UnixNano())
	srv := redistest.Start(t, &redistest.Options{ACL: []string{gatewayACL(t, pw, prefix)}})
	f := newFleetOn(t, srv.Client(), srv.URL(), prefix) // the consumer runs as the default user
	f.gwURL = fmt.Sprintf("redis://gateway:%s@%s/0", pw, srv.Addr())
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("ACL LOG of the gateway user: %v", redistest.ACLDenials(t, f.rdb, "gateway"))
		}
	})
	f.consumer()
	_, base := f.gateway()
	checkPythonExample(t, runExampleOn(t, f, base, py, pythonExample))

	if r := call(t, "GET", base+"/readyz", "", ""); r.status != http.StatusOK {
		t.Errorf("/readyz: %d %s", r.status, r.body)
	}
	tasks := base + "/v1/stages/" + stage + "/tasks"
	// Done: the task's event by id, and its key.
	var done struct{ Receipt receiptOf }
	r := call(t, "POST", tasks+"?wait=60s", acmeToken, `{"input":{"answer":"under the ACL"},"taskId":"acl-done"}`)
	r.decode(t, &done)
	if r.status != http.StatusOK {
		t.Fatalf("enqueue and wait: %d %s", r.status, r.body)
	}
	if r := call(t, "GET", base+"/v1/tasks/acl-done?wait=10s", acmeToken, ""); r.status != http.StatusOK {
		t.Errorf("GET the task: %d %s", r.status, r.body)
	}
	if r := call(t, "GET", base+"/v1/keys/"+done.Receipt.RequestKey, acmeToken, ""); r.status != http.StatusOK ||
		!strings.Contains(string(r.body), `"SUCCEEDED"`) {
		t.Errorf("GET the done key: %d %s", r.status, r.body)
	}
	// Scheduled: its key's state, then its cancel, with a task of another key in the set a
	// release before the scheduled index kept.
	ks := topics.Keyspace{Prefix: prefix}
	if err := f.rdb.ZAdd(context.Background(), ks.ScheduledLegacy(stage), redis.Z{Score: 1,
		Member: `{"taskId":"legacy-1","stage":"` + stage + `","tenant":"acme","input":{"answer":"old"}}`}).Err(); err != nil {
		t.Fatal(err)
	}
	var sched receiptOf
	later := time.Now().Add(time.Hour).UTC().Format(time.RFC3339)
	call(t, "POST", tasks, acmeToken, `{"input":{"answer":"later"},"notBefore":"`+later+`"}`).decode(t, &sched)
	// The key is scheduled once a consumer has read its task; until then it answers 404.
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		r := call(t, "GET", base+"/v1/keys/"+sched.RequestKey, acmeToken, "")
		if r.status == http.StatusOK && strings.Contains(string(r.body), `"SCHEDULED"`) {
			break
		}
		if r.status != http.StatusNotFound || time.Now().After(deadline) {
			t.Fatalf("GET the scheduled key: %d %s", r.status, r.body)
		}
	}
	if r := call(t, "POST", base+"/v1/keys/"+sched.RequestKey+"/cancel", acmeToken, ""); r.status != http.StatusOK ||
		!strings.Contains(string(r.body), `"scheduled":1`) {
		t.Errorf("cancel the scheduled key: %d %s", r.status, r.body)
	}
	// Running: its key's state, then its cancel, whose event the task's wait gets.
	var running receiptOf
	call(t, "POST", tasks, acmeToken, `{"input":{"answer":"slow","sim":{"latencyMs":20000}},"taskId":"acl-slow"}`).decode(t, &running)
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		r := call(t, "GET", base+"/v1/keys/"+running.RequestKey, acmeToken, "")
		if r.status == http.StatusOK && strings.Contains(string(r.body), `"RUNNING"`) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the slow task's key never ran: %d %s", r.status, r.body)
		}
	}
	if r := call(t, "POST", base+"/v1/keys/"+running.RequestKey+"/cancel", acmeToken, `{"reason":"no longer needed"}`); r.status != http.StatusOK {
		t.Errorf("cancel the running key: %d %s", r.status, r.body)
	}
	if r := call(t, "GET", base+"/v1/tasks/acl-slow?wait=30s", acmeToken, ""); r.status != http.StatusOK ||
		!strings.Contains(string(r.body), string(topics.StatusCancelled)) {
		t.Errorf("the cancelled task's event: %d %s", r.status, r.body)
	}

	var d []string
	for _, e := range redistest.ACLDenials(t, f.rdb, "gateway") {
		if !strings.Contains(e, "client|setinfo") { // Redis 7.2 and later: see SECURITY.md
			d = append(d, e)
		}
	}
	if len(d) > 0 {
		t.Errorf("Redis refused the documented gateway user (add the commands to docs/SECURITY.md):\n%s", strings.Join(d, "\n"))
	}
	c := redis.NewClient(&redis.Options{Addr: srv.Addr(), Username: "gateway", Password: pw})
	defer c.Close()
	ctx := context.Background()
	for _, cmd := range [][]any{{"get", "other:key"}, {"xadd", "other:stream", "*", "a", "b"}, {"xread", "streams", "other:results", "0"},
		{"flushall"}, {"config", "get", "*"}, {"keys", "*"}, {"scan", "0"}, {"acl", "list"}, {"publish", "ch", "x"},
		{"function", "load", "replace", "#!lua name=x\nredis.register_function('f', function() return 1 end)"}} {
		if err := c.Do(ctx, cmd...).Err(); err == nil || !strings.Contains(err.Error(), "NOPERM") {
			t.Errorf("%v under the gateway's ACL: %v, want NOPERM", cmd, err)
		}
	}
}
