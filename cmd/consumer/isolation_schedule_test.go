package main_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/flightdeck-ai/flightdeck/internal/testkit/redistest"
	"github.com/flightdeck-ai/flightdeck/topics"
)

// TestIsolationFarScheduleRefused: a hostile producer sends tasks of about 1 MB each whose
// notBefore is 9999-12-31, straight with XADD (no client check). The consumer refuses each:
// a dead letter not_before_too_far naming the 7-day horizon and a FAILED event; the stage's
// scheduled set and its payloads stay empty instead of holding the tasks until year 9999.
func TestIsolationFarScheduleRefused(t *testing.T) {
	e := newE2E(t)
	e.start("c1")
	stage := "interview-evaluation"
	// The reason and the scheduled keys are spelled out rather than named
	// (topics.ReasonNotBeforeTooFar, Keyspace.ScheduledTasks...), so that this file also builds
	// against a version without them and shows it failing.
	const reason = "not_before_too_far"
	pad := strings.Repeat("x", 900<<10)
	want := map[string]bool{}
	for i := range 10 {
		id := fmt.Sprintf("far-%d", i)
		payload := fmt.Sprintf(`{"taskId":%q,"stage":%q,"tenant":"acme","input":%d,"params":{"pad":%q},"notBefore":"9999-12-31T00:00:00Z"}`,
			id, stage, i, pad)
		if err := e.rdb.XAdd(e.ctx, &redis.XAddArgs{Stream: e.ks.Tasks(stage),
			Values: []any{"_watermill_message_uuid", "u-" + id, "payload", payload}}).Err(); err != nil {
			t.Fatal(err)
		}
		want[id] = true
	}
	got := e.collect([]string{stage}, want, 20*time.Second)
	for id := range want {
		evs := got[id]
		if len(evs) == 0 || evs[0].Status != topics.StatusFailed || evs[0].ErrorCode != reason ||
			!strings.Contains(evs[0].Error, "168h0m0s") {
			t.Errorf("%s: events %+v; want FAILED not_before_too_far naming the 168h0m0s horizon", id, evs)
		}
	}
	dl := e.rdb.XRange(e.ctx, e.ks.DLQ(stage), "-", "+").Val()
	if len(dl) != len(want) {
		t.Errorf("%d dead letters, want %d", len(dl), len(want))
	}
	for _, m := range dl {
		if r, _ := m.Values[topics.FieldReason].(string); r != reason {
			t.Errorf("dead letter %s: reason %q", m.ID, r)
		}
	}
	set := e.prefix + ":scheduled:{" + stage + "}"
	keys := []string{set, set + ":moving", set + ":due", set + ":appending", set + ":tasks"}
	for _, k := range keys {
		if n := e.rdb.Exists(e.ctx, k).Val(); n != 0 {
			t.Errorf("the far tasks are kept in %s (%s)", k, e.rdb.Type(e.ctx, k).Val())
		}
	}
}

// TestIsolationEnqueuedAtNotTrusted: a task whose enqueuedAt lies 23 hours back (inside the
// 24-hour skew the consumer accepts) shows in the consumer's /metrics queue-wait and
// end-to-end histograms and in its event's queuedMs the moments it really waited, counted from
// its stream entry, not 23 hours.
func TestIsolationEnqueuedAtNotTrusted(t *testing.T) {
	e := newE2E(t)
	p := e.start("c1")
	stage := "interview-evaluation"
	payload := fmt.Sprintf(`{"taskId":"old","stage":%q,"tenant":"acme","input":{"q":1},"enqueuedAt":%q}`,
		stage, topics.FormatTime(time.Now().Add(-23*time.Hour)))
	if err := e.rdb.XAdd(e.ctx, &redis.XAddArgs{Stream: e.ks.Tasks(stage),
		Values: []any{"_watermill_message_uuid", "u-old", "payload", payload}}).Err(); err != nil {
		t.Fatal(err)
	}
	evs := e.collect([]string{stage}, map[string]bool{"old": true}, 20*time.Second)["old"]
	if len(evs) == 0 || evs[0].Status != topics.StatusSucceeded {
		t.Fatalf("events %+v", evs)
	}
	if q := evs[0].QueuedMs; q < 0 || q > 60_000 {
		t.Errorf("queuedMs %d (%s); want the moments the task waited, not 23 h", q, time.Duration(q)*time.Millisecond)
	}
	const st = `{stage="interview-evaluation"}`
	var m map[string]float64
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		m = p.scrape(t)
		if m["flightdeck_end_to_end_seconds_count"+st] >= 1 || time.Now().After(deadline) {
			break
		}
	}
	for _, h := range []string{"flightdeck_queue_wait_seconds", "flightdeck_end_to_end_seconds"} {
		n, sum := m[h+"_count"+st], m[h+"_sum"+st]
		if n != 1 || sum < 0 || sum > 60 {
			t.Errorf("%s: %v samples summing to %v s; want 1 of moments, not 23 h", h, n, sum)
		}
	}
}

// TestIsolationProducerUnderDocumentedACL: the producer CLI, under exactly the producer ACL
// line of docs/SECURITY.md (enqueueing with --any-stage, as that section says, since the line
// grants no read of the stage registry), enqueues a task and waits for its event, and Redis
// refuses it nothing.
func TestIsolationProducerUnderDocumentedACL(t *testing.T) {
	prefix := redistest.Prefix()
	stage := "interview-evaluation"
	e, srv := newSecureE2E(t, prefix, &redistest.Options{ACL: []string{producerACL(t, "pw-producer", prefix, stage)}})
	e.start("c1")
	bin := producerBinary(t)
	url := fmt.Sprintf("redis://producer:pw-producer@%s/0", srv.Addr())
	enqueue := func(extra ...string) (string, string, error) {
		ctx, cancel := context.WithTimeout(context.Background(), 40*time.Second)
		defer cancel()
		args := append([]string{"--prefix", prefix, "enqueue", "--any-stage", "--stage", stage, "--tenant", "acme",
			"--input", `{"question":"q1","answer":"a1"}`}, extra...)
		cmd := exec.CommandContext(ctx, bin, args...)
		cmd.Env = producerEnv("REDIS_URL=" + url)
		var out, errOut bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &errOut
		err := cmd.Run()
		return out.String(), errOut.String(), err
	}
	out, errOut, err := enqueue()
	var receipt struct {
		TaskID, StreamID, RequestKey string
	}
	if err != nil || json.Unmarshal([]byte(out), &receipt) != nil || receipt.StreamID == "" {
		t.Fatalf("producer enqueue under the documented ACL: %v\nstdout: %s\nstderr: %s", err, out, errOut)
	}
	out, errOut, err = enqueue("--wait", "--timeout", "20s", "--format", "json")
	if err != nil || !strings.Contains(out, `"status":"SUCCEEDED"`) || !strings.Contains(out, `"summary"`) {
		t.Fatalf("producer enqueue --wait under the documented ACL: %v\nstdout: %s\nstderr: %s", err, out, errOut)
	}
	if d := aclDenials(t, e.rdb, "producer"); len(d) > 0 {
		t.Errorf("Redis refused the producer CLI (fix docs/SECURITY.md or the producer):\n%s", strings.Join(d, "\n"))
	}
}

// producerBinary builds the producer CLI into the test's temporary directory.
func producerBinary(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "producer")
	if out, err := exec.Command("go", "build", "-o", bin, "../producer").CombinedOutput(); err != nil {
		t.Fatalf("build producer: %v\n%s", err, out)
	}
	return bin
}

// producerEnv is this process's environment without REDIS_*, OPENAI_* and FLIGHTDECK_*
// variables, with extra on top.
func producerEnv(extra ...string) []string {
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "REDIS_") && !strings.HasPrefix(kv, "OPENAI_") && !strings.HasPrefix(kv, "FLIGHTDECK_") {
			env = append(env, kv)
		}
	}
	return append(env, extra...)
}
