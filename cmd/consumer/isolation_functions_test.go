package main_test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/flightdeck-ai/flightdeck/internal/testkit/redistest"
	"github.com/flightdeck-ai/flightdeck/lua"
	"github.com/flightdeck-ai/flightdeck/topics"
)

// operatorACL returns the operator's ACL line documented in docs/SECURITY.md (the one line of
// its "acl-operator" code block) with this test's password.
func operatorACL(t *testing.T, password string) string {
	t.Helper()
	block := documentedACL(t, "acl-operator")
	if !strings.Contains(block, " >CHANGE-ME ") {
		t.Fatalf("docs/SECURITY.md has no one-line acl-operator block with >CHANGE-ME: %q", block)
	}
	return strings.Replace(block, " >CHANGE-ME ", " >"+password+" ", 1)
}

// loadFunctions runs `consumer --load-functions` as the operator would, and fails the test
// unless it exits 0.
func loadFunctions(t *testing.T, url string) {
	t.Helper()
	cmd := exec.Command(binary, "--load-functions", "--redis-wait", "5s")
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "REDIS_") && !strings.HasPrefix(kv, "FLIGHTDECK_") {
			cmd.Env = append(cmd.Env, kv)
		}
	}
	cmd.Env = append(cmd.Env, "REDIS_URL="+url)
	out, err := cmd.CombinedOutput()
	if err != nil || !strings.Contains(string(out), "flight function library loaded") {
		t.Fatalf("consumer --load-functions: %v\n%s", err, out)
	}
}

// loadLibrary loads the flight library as the server's default user: the operator's step for
// tests whose consumers run under the documented consumer line.
func loadLibrary(t *testing.T, srv *redistest.Server) {
	t.Helper()
	rdb := srv.Client()
	defer rdb.Close()
	if err := lua.LoadLibrary(context.Background(), rdb, false); err != nil {
		t.Fatal(err)
	}
}

// exited waits for a consumer that must refuse to start, and returns its exit code and log.
func exited(t *testing.T, p *proc) (int, string) {
	t.Helper()
	select {
	case <-p.done:
	case <-time.After(30 * time.Second):
		t.Fatalf("%s is still running; it should have refused to start", p.name)
	}
	b, _ := os.ReadFile(p.logPath)
	return p.cmd.ProcessState.ExitCode(), string(b)
}

// TestFunctionLibraryUnderTenantCredentials: Redis Functions are global to a server, so on a
// Redis shared by tenants no tenant's consumer credential (the documented consumer line) may
// load or replace the flight library; loading it is the operator's `consumer
// --load-functions` under the documented operator line. A consumer refuses to start when the
// library is missing (naming that step) or holds other code than its build's.
func TestFunctionLibraryUnderTenantCredentials(t *testing.T) {
	prefix := redistest.Prefix()
	pw, opsPW := secret(t, "pw-"), secret(t, "ops-")
	e, srv := newSecureE2E(t, prefix, &redistest.Options{ACL: []string{leastACL(t, pw, prefix), operatorACL(t, opsPW)}})
	tenantURL := fmt.Sprintf("redis://flightdeck:%s@%s/0", pw, srv.Addr())
	opsURL := fmt.Sprintf("redis://flightdeck-ops:%s@%s/0", opsPW, srv.Addr())
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	name, src := lua.Library()
	// What a hostile tenant would load: the same library name, code that forges results.
	patched := strings.Replace(src, "redis.register_function", "redis.log(redis.LOG_WARNING, 'forged')\nredis.register_function", 1)

	tenant := redis.NewClient(&redis.Options{Addr: srv.Addr(), Username: "flightdeck", Password: pw})
	defer tenant.Close()
	for _, load := range []func() error{
		func() error { return tenant.FunctionLoadReplace(ctx, patched).Err() },
		func() error { return tenant.FunctionLoad(ctx, patched).Err() },
		func() error { return tenant.Do(ctx, "function", "delete", name).Err() },
		func() error { return tenant.Do(ctx, "function", "flush").Err() },
	} {
		if err := load(); err == nil || !strings.HasPrefix(err.Error(), "NOPERM") {
			t.Fatalf("loading or removing functions under the tenant's consumer credential: %v, want NOPERM", err)
		}
	}

	// No library yet: the consumer cannot load it, and says who can.
	code, log := exited(t, e.startWith("no-library", []string{"REDIS_URL=" + tenantURL}, false))
	if code != 1 || !strings.Contains(log, "--load-functions") || !strings.Contains(log, name) {
		t.Fatalf("a consumer on a Redis without the library: exit %d, log:\n%s\nwant exit 1 naming %s and --load-functions", code, log, name)
	}

	// The operator's step, then the tenant's consumer runs.
	loadFunctions(t, opsURL)
	p := e.startWith("c1", []string{"REDIS_URL=" + tenantURL}, true)
	tk := task("f1", "interview-evaluation", 1, 0)
	if _, err := e.w.EnqueueTask(ctx, tk); err != nil {
		t.Fatal(err)
	}
	got := e.collect([]string{"interview-evaluation"}, map[string]bool{"f1": true}, 20*time.Second)
	if evs := got["f1"]; len(evs) != 1 || evs[0].Status != topics.StatusSucceeded {
		t.Fatalf("the task under the tenant's credentials: %+v", evs)
	}
	p.stop(t)
	if d := aclDenials(t, e.rdb, "flightdeck-ops"); len(d) > 0 {
		t.Errorf("Redis refused the documented operator user (fix docs/SECURITY.md):\n%s", strings.Join(d, "\n"))
	}

	// Someone with a loading credential replaced the library: no consumer runs its code.
	if err := srv.Client().FunctionLoadReplace(ctx, patched).Err(); err != nil {
		t.Fatal(err)
	}
	code, log = exited(t, e.startWith("tampered", []string{"REDIS_URL=" + tenantURL}, false))
	if code != 1 || !strings.Contains(log, "not this build's code") {
		t.Fatalf("a consumer on a replaced library: exit %d, log:\n%s\nwant exit 1, the library refused", code, log)
	}
	loadFunctions(t, opsURL) // the operator restores it
	e.startWith("c2", []string{"REDIS_URL=" + tenantURL}, true)
}
