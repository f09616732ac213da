package main_test

import (
	"context"
	"encoding/json"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/flightdeck-ai/flightdeck/client"
	"github.com/flightdeck-ai/flightdeck/topics"
)

// need returns the path of a command the examples run, failing the test when it is missing:
// `make deps` installs it.
func need(t *testing.T, name string) string {
	t.Helper()
	p, err := exec.LookPath(name)
	if err != nil {
		t.Fatalf("%s is not installed: the HTTP examples need it (`make deps` installs it with apt-get)", name)
	}
	return p
}

// runExample runs an example against a gateway and a consumer of a new fleet, with acme's
// token, and returns its output. It fails the test when the example exits non-zero.
func runExample(t *testing.T, name string, args ...string) string {
	t.Helper()
	f := newFleet(t)
	f.consumer()
	_, base := f.gateway()
	return runExampleOn(t, f, base, name, args...)
}

// runExampleOn runs an example against the gateway at base, in front of f's consumers.
func runExampleOn(t *testing.T, f *fleet, base, name string, args ...string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	// Another service answered the examples' first question already: their first request is
	// a hit, whose event carries the other task's result, and they must still report their own.
	cl, err := client.New(client.Config{Client: f.rdb, Keyspace: topics.Keyspace{Prefix: f.prefix}})
	if err != nil {
		t.Fatal(err)
	}
	r, err := cl.Enqueue(ctx, topics.Task{TaskID: "answered-before", Stage: stage, Tenant: "acme",
		Input: json.RawMessage(`{"question":"A migration?","answer":"I led it."}`)})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := cl.Await(ctx, r); err != nil {
		t.Fatal(err)
	}
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Env = []string{"PATH=" + lookPathEnv(), "FLIGHTDECK_URL=" + base, "FLIGHTDECK_TOKEN=" + acmeToken,
		"FLIGHTDECK_STAGE=" + stage, "FLIGHTDECK_TASKS=6", "HOME=" + t.TempDir()}
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("%s %s: %v\n%s", name, strings.Join(args, " "), err, out)
	}
	return string(out)
}

// lookPathEnv is this process's PATH, for the examples to find curl and python3 as a user's
// shell would.
func lookPathEnv() string {
	for _, kv := range exec.Command("true").Environ() {
		if v, ok := strings.CutPrefix(kv, "PATH="); ok {
			return v
		}
	}
	return "/usr/local/bin:/usr/bin:/bin"
}

// TestPythonExample: examples/http-python, standard library only, against the stock gateway
// and consumer: it enqueues and waits for a SUCCEEDED result, gets the first receipt on an
// Idempotency-Key retry and 422 idempotency_mismatch with another body, and after a
// disconnect part way through a batch resumes with Last-Event-ID and sees every terminal
// event of both batches exactly once.
func TestPythonExample(t *testing.T) {
	py := need(t, "python3")
	checkPythonExample(t, runExample(t, py, pythonExample))
}

// pythonExample is the path of the Python example.
var pythonExample = filepath.Join("..", "..", "examples", "http-python", "flightdeck_http.py")

// checkPythonExample checks the Python example's output as TestPythonExample describes.
func checkPythonExample(t *testing.T, out string) {
	t.Helper()
	steps := map[string]map[string]any{}
	for line := range strings.SplitSeq(strings.TrimSpace(out), "\n") {
		var m map[string]any
		if err := json.Unmarshal([]byte(line), &m); err != nil {
			t.Fatalf("output line %q is not JSON: %v\n%s", line, err, out)
		}
		steps[m["step"].(string)] = m
	}
	if s := steps["enqueue-and-wait"]; s == nil || s["status"] != "SUCCEEDED" || s["result"] == nil {
		t.Errorf("enqueue-and-wait: %v", s)
	}
	if s := steps["idempotency-mismatch"]; s == nil || s["status"] != float64(422) || s["code"] != "idempotency_mismatch" {
		t.Errorf("idempotency-mismatch: %v", s)
	}
	d, r := steps["disconnected"], steps["resumed"]
	if d == nil || r == nil || d["events"] == float64(0) || d["lastEventId"] == "" {
		t.Fatalf("disconnected %v, resumed %v", d, r)
	}
	if r["tasks"] != float64(12) || r["events"] != float64(12) || len(r["repeated"].([]any)) != 0 || len(r["missing"].([]any)) != 0 {
		t.Errorf("resumed: %v, want the 12 tasks' events once each", r)
	}
}

// TestCurlExample: examples/http-curl against the stock gateway and consumer: enqueue and
// wait, GET by task id, an Idempotency-Key retry, and an event stream resumed with
// Last-Event-ID that brings the task enqueued while disconnected and not the one before.
func TestCurlExample(t *testing.T) {
	need(t, "curl")
	bash := need(t, "bash")
	out := runExample(t, bash, filepath.Join("..", "..", "examples", "http-curl", "flightdeck.sh"))
	if strings.Contains(out, "answered-before") {
		t.Errorf("the example reported the task that answered its question first, not its own:\n%s", out)
	}
	for _, want := range []string{"enqueue-and-wait: task ", " status SUCCEEDED", "get-task: ", "idempotent-retry: ",
		"disconnected after task ", "resumed: task "} {
		if !strings.Contains(out, want) {
			t.Errorf("the output has no %q:\n%s", want, out)
		}
	}
}
