package main

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/flightdeck-ai/flightdeck/internal/broker"
	"github.com/flightdeck-ai/flightdeck/topics"
)

// syncBuffer is a bytes.Buffer safe for a writing process and a polling test.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// tail runs 'producer tail' with args until its stdout has n lines, then stops it with
// SIGINT, as a person does.
func (c *cli) tail(n int, args ...string) result {
	c.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, c.bin, append([]string{"--redis", c.r.URL, "--prefix", c.prefix, "tail"}, args...)...)
	var out, errOut syncBuffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	if err := cmd.Start(); err != nil {
		c.t.Fatal(err)
	}
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		if strings.Count(out.String(), "\n") >= n {
			break
		}
	}
	_ = cmd.Process.Signal(os.Interrupt)
	return c.result(cmd.Wait(), out.String(), errOut.String(), args)
}

// testFormats (TestCLI/Formats): --format json and table for tail and --wait, the progress
// bar of the events with --progress and its absence in a pipe without it.
func testFormats(t *testing.T, c *cli) {
	ctx := context.Background()
	c.register(stage)
	key := "ai:" + stage + ":v1:acme:" + strings.Repeat("0123456789abcdef", 4)
	long := `{"score": 9, "why": "` + strings.Repeat("because ", 20) + `"}`
	w := broker.Writer{Client: c.r.Client, Keyspace: c.ks}
	if err := w.PublishEvents(ctx,
		topics.Event{TaskID: "t-ok", RequestKey: key, Stage: stage, Tenant: "acme", Status: topics.StatusSucceeded,
			Shared: topics.SharedOwner, Result: json.RawMessage(long), QueuedMs: 12, RunMs: 30, FinishedAt: time.Now()},
		topics.Event{TaskID: "t-bad", RequestKey: key, Stage: stage, Tenant: "acme", Status: topics.StatusFailed,
			Shared: topics.SharedFollower, ErrorCode: "model_error", Error: "the model\nsaid no", RunMs: 1234, FinishedAt: time.Now()},
	); err != nil {
		t.Fatal(err)
	}

	// json is the default in a pipe: one event per line.
	res := c.tail(2, "--stages", stage, "--from", "0")
	out := lines(res.stdout)
	if res.code != 0 || len(out) != 2 {
		t.Fatalf("tail: exit %d, stdout %q, stderr %q", res.code, res.stdout, res.stderr)
	}
	if e, err := topics.DecodeEvent([]byte(out[0])); err != nil || e.TaskID != "t-ok" || string(e.Result) != `{"score":9,"why":"`+strings.Repeat("because ", 20)+`"}` {
		t.Errorf("tail json line %q: %+v, %v", out[0], e, err)
	}

	// Without --stages, tail follows every registered stage, custom ones too.
	c.register(stage, "resume-summary")
	if err := w.PublishEvents(ctx, topics.Event{TaskID: "t-custom", RequestKey: "ai:resume-summary:v1:acme:" + strings.Repeat("0123456789abcdef", 4),
		Stage: "resume-summary", Tenant: "acme", Status: topics.StatusSucceeded, Shared: topics.SharedOwner,
		Result: json.RawMessage(`1`), FinishedAt: time.Now()}); err != nil {
		t.Fatal(err)
	}
	res = c.tail(3, "--from", "0")
	if res.code != 0 || !strings.Contains(res.stdout, `"taskId":"t-custom"`) || !strings.Contains(res.stdout, `"taskId":"t-ok"`) {
		t.Errorf("tail without --stages: exit %d, stdout %q, stderr %q", res.code, res.stdout, res.stderr)
	}

	res = c.tail(3, "--stages", stage, "--from", "0", "--format", "table")
	wantRows := []string{
		"TASK                                  STAGE                   STATUS     SHARED         MS  KEY                             RESULT OR ERROR",
		"t-ok                                  interview-evaluation    SUCCEEDED  owner          42  ai:interview-ev…23456789abcdef  " +
			`{"score":9,"why":"because because because because because b…`,
		"t-bad                                 interview-evaluation    FAILED     follower     1234  ai:interview-ev…23456789abcdef  model_error: the model said no",
	}
	if res.code != 0 || res.stdout != strings.Join(wantRows, "\n")+"\n" {
		t.Errorf("tail --format table: exit %d, stderr %q, stdout\n%s\nwant\n%s", res.code, res.stderr, res.stdout, strings.Join(wantRows, "\n"))
	}

	// --wait --format table: a row per event, then the summary table on stdout; --progress
	// draws the bar of the events on stderr.
	cctx, cancel := context.WithCancel(ctx)
	defer cancel()
	c.consume(cctx, stage)
	res = c.run("", "load", "--n", "5", "--keys", "5", "--stages", stage, "--latency-ms", "0", "--wait", "--timeout", "5s",
		"--format", "table", "--progress")
	out = lines(res.stdout)
	if res.code != 0 || len(out) < 7 || !strings.HasPrefix(out[0], "TASK ") || !strings.HasPrefix(out[6], "----") {
		t.Fatalf("load --wait --format table: exit %d, stdout %q, stderr %q", res.code, res.stdout, res.stderr)
	}
	for _, row := range out[1:6] {
		if f := strings.Fields(row); len(f) != 6 || f[1] != stage || f[2] != "SUCCEEDED" || f[3] != "owner" || f[4] != "0" ||
			!strings.Contains(f[5], "…") {
			t.Errorf("event row %q", row)
		}
	}
	if !strings.Contains(res.stdout, "\nowner runs     5\n") || strings.Contains(res.stdout, `"summary"`) {
		t.Errorf("load --wait --format table: stdout %q, want the summary table and no JSON", res.stdout)
	}
	if !strings.Contains(res.stderr, "] 5/5 events") || !strings.Contains(res.stderr, "enqueued 5 of 5 tasks") ||
		strings.Contains(res.stderr, "owner runs") {
		t.Errorf("load --wait --progress: stderr %q, want the bar of the events and the count line, not the summary", res.stderr)
	}

	// Without --progress a pipe gets no bar; json stays the default.
	res = c.run("", "load", "--n", "3", "--keys", "3", "--stages", stage, "--latency-ms", "0", "--wait", "--timeout", "5s")
	out = lines(res.stdout)
	if res.code != 0 || len(out) != 4 || !strings.HasPrefix(out[3], `{"summary":{"tasks":3,"events":3,`) ||
		strings.Contains(res.stderr, "/3 events") || strings.Contains(res.stderr, "\r") {
		t.Errorf("load --wait in a pipe: exit %d, stdout %q, stderr %q", res.code, res.stdout, res.stderr)
	}
	res = c.run("", "enqueue", "--stage", stage, "--tenant", "acme", "--input", `{"q":3}`, "--wait", "--timeout", "5s", "--format", "json")
	if out = lines(res.stdout); res.code != 0 || len(out) != 2 || !strings.HasPrefix(out[1], `{"summary":`) {
		t.Errorf("enqueue --wait --format json: exit %d, stdout %q, stderr %q", res.code, res.stdout, res.stderr)
	}
	cancel()

	// Missing events are MISSING rows in a table.
	res = c.run("", "load", "--n", "2", "--keys", "1", "--stages", "interview-followup", "--any-stage", "--wait",
		"--timeout", "300ms", "--format", "table")
	out = lines(res.stdout)
	if res.code != 1 || len(out) < 3 || !strings.HasPrefix(out[0], "TASK ") ||
		!strings.Contains(out[1], " interview-followup      MISSING    -") ||
		!strings.HasSuffix(out[2], "no event before the timeout") {
		t.Errorf("load --wait --format table, no consumer: exit %d, stdout %q", res.code, res.stdout)
	}

	want(t, c.run("", "tail", "--format", "yaml"), 2, "", `producer tail: --format "yaml": want table or json (see 'producer tail -h')`+"\n")
	want(t, c.run("", "enqueue", "--stage", stage, "--tenant", "acme", "--input", "1", "--format", "table"), 2, "",
		"producer enqueue: --format sets how --wait prints the events: it needs --wait (see 'producer enqueue -h')\n")
}

// TestShorten: ids and keys keep their head and tail, results their head.
func TestShorten(t *testing.T) {
	for _, tc := range []struct{ in, mid, end string }{
		{"abcdef", "abcdef", "abcdef"},
		{"abcdefgh", "abc…gh", "abcde…"},
		{"äöüäöüäö", "äöü…äö", "äöüäö…"},
	} {
		if got := shortMiddle(tc.in, 6); got != tc.mid {
			t.Errorf("shortMiddle(%q, 6) = %q, want %q", tc.in, got, tc.mid)
		}
		if got := shortEnd(tc.in, 6); got != tc.end {
			t.Errorf("shortEnd(%q, 6) = %q, want %q", tc.in, got, tc.end)
		}
	}
	if got := outcome(topics.Event{Status: topics.StatusSucceeded, ResultRef: "ai:flight:result:{k}"}); got != "(stored in ai:flight:result:{k})" {
		t.Errorf("outcome of a stored result: %q", got)
	}
	if got := outcome(topics.Event{Status: topics.StatusCancelled, Error: "interview\tclosed"}); got != "interview closed" {
		t.Errorf("outcome of a cancel: %q", got)
	}
}
