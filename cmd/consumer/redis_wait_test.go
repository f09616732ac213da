package main_test

import (
	"net/http"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/flightdeck-ai/flightdeck/internal/testkit/redistest"
)

// TestWaitsForRedisAtStart: a consumer started while its Redis is down logs one clear line
// per try (no raw client lines), and becomes ready by itself once Redis is up; with a short
// --redis-wait it gives up with exit 1 and the reason, the password redacted.
func TestWaitsForRedisAtStart(t *testing.T) {
	srv := redistest.Start(t, nil)
	srv.Stop()
	e := newE2EOn(t, srv.Client(), srv.URL(), redistest.Prefix())
	p := e.startWith("late", []string{"REDIS_URL=" + srv.URL()}, false, "--redis-wait", "30s")
	time.Sleep(3 * time.Second)
	srv.Restart()
	ready := false
	for deadline := time.Now().Add(20 * time.Second); time.Now().Before(deadline) && !ready; time.Sleep(100 * time.Millisecond) {
		ready = p.ready()
	}
	log, _ := os.ReadFile(p.logPath)
	if !ready {
		t.Fatalf("the consumer did not become ready after Redis came up:\n%s", log)
	}
	if !strings.Contains(string(log), `"message":"waiting for Redis"`) || !strings.Contains(string(log), `"message":"Redis answers"`) {
		t.Errorf("log lacks the wait lines:\n%s", log)
	}
	if strings.Contains(string(log), "pool.go") {
		t.Errorf("raw client lines in the log:\n%s", log)
	}

	cmd := exec.Command(binary, "--redis-wait", "1s", "--spool-dir", t.TempDir())
	cmd.Env = append(os.Environ(), "REDIS_URL=redis://flightdeck:hunter2-secret@"+freeAddr(t)+"/0")
	start := time.Now()
	out, err := cmd.CombinedOutput()
	ee, ok := err.(*exec.ExitError)
	if !ok || ee.ExitCode() != 1 {
		t.Fatalf("with Redis down for good: %v, want exit 1\n%s", err, out)
	}
	if d := time.Since(start); d > 10*time.Second {
		t.Errorf("gave up after %v with --redis-wait 1s", d)
	}
	if !strings.Contains(string(out), "did not answer within 1s (--redis-wait)") || !strings.Contains(string(out), "connection refused") ||
		strings.Contains(string(out), "hunter2") {
		t.Errorf("output: want the reason (connection refused), without the password:\n%s", out)
	}
}

// ready reports whether the process answers /readyz with 200.
func (p *proc) ready() bool {
	resp, err := http.Get("http://" + p.http + "/readyz")
	if err != nil {
		return false
	}
	resp.Body.Close()
	return resp.StatusCode == http.StatusOK
}

// TestWrongPasswordFailsAtOnce: credentials Redis refuses are not retried for --redis-wait.
func TestWrongPasswordFailsAtOnce(t *testing.T) {
	srv := redistest.Start(t, &redistest.Options{ACL: []string{"user app on >right-secret ~* &* +@all"}})
	cmd := exec.Command(binary, "--redis-wait", "1m", "--spool-dir", t.TempDir())
	cmd.Env = append(os.Environ(), "REDIS_URL=redis://app:wrong-secret@"+srv.Addr()+"/0")
	start := time.Now()
	out, err := cmd.CombinedOutput()
	if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != 1 {
		t.Fatalf("wrong password: %v, want exit 1\n%s", err, out)
	}
	if d := time.Since(start); d > 10*time.Second {
		t.Errorf("gave up after %v: a refused password was retried", d)
	}
	if !strings.Contains(string(out), "refused the consumer") || strings.Contains(string(out), "wrong-secret") {
		t.Errorf("output:\n%s", out)
	}
}
