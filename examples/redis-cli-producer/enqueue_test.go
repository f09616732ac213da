package redisclidemo

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/flightdeck-ai/flightdeck/handlers"
	"github.com/flightdeck-ai/flightdeck/internal/testkit/redistest"
	"github.com/flightdeck-ai/flightdeck/topics"
)

// TestEnqueueScript runs enqueue.sh against a consumer of the built-in stage on a private
// Redis and checks the event it prints; then with no consumer, that it gives up with exit 1.
func TestEnqueueScript(t *testing.T) {
	if _, err := exec.LookPath("redis-cli"); err != nil {
		t.Fatal("redis-cli not found: install it (make deps installs redis-server, which brings it)")
	}
	r := redistest.New(t)
	ks := topics.Keyspace{Prefix: r.Prefix}
	stages, err := handlers.LoadStages("", []string{"interview-evaluation"})
	if err != nil {
		t.Fatal(err)
	}
	log := zerolog.New(zerolog.NewTestWriter(t)).Level(zerolog.ErrorLevel)
	c, err := handlers.NewConsumer(handlers.Config{RedisURL: r.URL, Keyspace: ks, Stages: stages, Logger: &log,
		SpoolDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	ctx, stop := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- c.Run(ctx) }()
	defer func() { stop(); <-done }()
	<-c.Started()

	script := func(stage, timeout string, input ...string) (string, string, error) {
		if len(input) == 0 {
			input = []string{`{"answer":"I led the migration"}`}
		}
		cmd := exec.Command("./enqueue.sh", input...)
		cmd.Env = append(os.Environ(), "REDIS_URL="+r.URL, "PREFIX="+ks.Prefix, "STAGE="+stage, "TIMEOUT="+timeout)
		var out, errOut bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &errOut
		err := cmd.Run()
		return out.String(), errOut.String(), err
	}
	start := time.Now()
	out, stderr, err := script("interview-evaluation", "20")
	if err != nil {
		t.Fatalf("enqueue.sh: %v\nstdout %s\nstderr %s", err, out, stderr)
	}
	var ev topics.Event
	if err := json.Unmarshal([]byte(out), &ev); err != nil {
		t.Fatalf("output %q is not one event: %v", out, err)
	}
	if ev.Status != topics.StatusSucceeded || ev.Stage != "interview-evaluation" || ev.Tenant != "acme" ||
		ev.RequestKey == "" || len(ev.Result) == 0 {
		t.Errorf("event %+v: want SUCCEEDED with a result and a request key", ev)
	}
	t.Logf("answered in %v: %s", time.Since(start), out)

	// Input that is not JSON: the consumer dead-letters the entry, and the script says so at
	// once instead of waiting out its timeout.
	start = time.Now()
	_, stderr, err = script("interview-evaluation", "20", "not json")
	if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != 2 || !bytes.Contains([]byte(stderr), []byte("dead-lettered): bad_json")) {
		t.Errorf("bad input: %v, stderr %q; want exit 2 naming bad_json", err, stderr)
	}
	if d := time.Since(start); d > 10*time.Second {
		t.Errorf("bad input reported after %v", d)
	}

	_, stderr, err = script("nobody-reads-this", "1")
	if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != 1 {
		t.Errorf("with no consumer: %v, want exit 1", err)
	}
	if !bytes.Contains([]byte(stderr), []byte("is a consumer running for stage nobody-reads-this")) {
		t.Errorf("stderr %q: want the timeout hint", stderr)
	}
}
