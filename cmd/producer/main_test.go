package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/flightdeck-ai/flightdeck/client"
	"github.com/flightdeck-ai/flightdeck/flight"
	"github.com/flightdeck-ai/flightdeck/internal/broker"
	"github.com/flightdeck-ai/flightdeck/internal/testkit/redistest"
	"github.com/flightdeck-ai/flightdeck/topics"
)

const stage = "interview-evaluation"

// cli runs the built binary against one Redis under its own prefix.
type cli struct {
	t      *testing.T
	bin    string
	r      *redistest.Target
	prefix string
	ks     topics.Keyspace
}

type result struct {
	stdout, stderr string
	code           int
}

func (c *cli) run(stdin string, args ...string) result {
	c.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, c.bin, append([]string{"--redis", c.r.URL, "--prefix", c.prefix}, args...)...)
	var out, errOut bytes.Buffer
	cmd.Stdin, cmd.Stdout, cmd.Stderr = strings.NewReader(stdin), &out, &errOut
	return c.result(cmd.Run(), out.String(), errOut.String(), args)
}

// result is the outcome of a run that ended with err.
func (c *cli) result(err error, stdout, stderr string, args []string) result {
	c.t.Helper()
	res := result{stdout: stdout, stderr: stderr}
	if ee, ok := errors.AsType[*exec.ExitError](err); ok {
		res.code = ee.ExitCode()
	} else if err != nil {
		c.t.Fatalf("run %v: %v", args, err)
	}
	return res
}

// register plays a consumer that registered stages (one partition each) in the stage registry.
func (c *cli) register(stages ...string) {
	c.t.Helper()
	ctx := context.Background()
	now, err := c.r.Client.Time(ctx).Result()
	if err != nil {
		c.t.Fatal(err)
	}
	infos := make([]topics.StageInfo, len(stages))
	for i, s := range stages {
		infos[i] = topics.StageInfo{Name: s, Partitions: 1, Mode: "HYBRID", Model: "sim", Consumer: "test-consumer"}
	}
	if _, err := broker.RegisterStages(ctx, c.r.Client, c.ks, now.UnixMilli(), infos); err != nil {
		c.t.Fatal(err)
	}
}

// tasks returns the decoded entries of a task stream.
func (c *cli) tasks(stage string) []topics.Task {
	c.t.Helper()
	msgs, err := c.r.Client.XRange(context.Background(), c.ks.Tasks(stage), "-", "+").Result()
	if err != nil {
		c.t.Fatal(err)
	}
	var out []topics.Task
	for _, m := range msgs {
		p, _ := m.Values[topics.FieldPayload].(string)
		task, err := topics.DecodeTask([]byte(p), topics.Limits{})
		if err != nil {
			c.t.Fatalf("entry %s: %v", m.ID, err)
		}
		out = append(out, task)
	}
	return out
}

// consume plays a consumer until ctx ends: one SUCCEEDED owner event per task of stage.
func (c *cli) consume(ctx context.Context, stage string) {
	w := broker.Writer{Client: c.r.Client, Keyspace: c.ks}
	var wg sync.WaitGroup
	wg.Add(1)
	c.t.Cleanup(wg.Wait)
	go func() {
		defer wg.Done()
		last := "0"
		for ctx.Err() == nil {
			res, err := c.r.Client.XRead(ctx, &redis.XReadArgs{Streams: []string{c.ks.Tasks(stage), last}, Block: 100 * time.Millisecond}).Result()
			if err != nil {
				continue
			}
			for _, m := range res[0].Messages {
				last = m.ID
				p, _ := m.Values[topics.FieldPayload].(string)
				task, err := topics.DecodeTask([]byte(p), topics.Limits{})
				if err != nil {
					c.t.Errorf("consumer: %v", err)
					continue
				}
				key, err := flight.TaskKey(task) // the key a consumer runs it under: clients match on it
				if err != nil {
					c.t.Errorf("consumer: %v", err)
					continue
				}
				e := topics.Event{TaskID: task.TaskID, RequestKey: key, Stage: task.Stage,
					Tenant: task.Tenant, Status: topics.StatusSucceeded, Shared: topics.SharedOwner, FinishedAt: time.Now()}
				if err := w.PublishEvents(ctx, e); err != nil && ctx.Err() == nil {
					c.t.Errorf("consumer: %v", err)
				}
			}
		}
	}()
}

func lines(s string) []string { return strings.Split(strings.TrimSpace(s), "\n") }

func TestCLI(t *testing.T) {
	bin := filepath.Join(t.TempDir(), "producer")
	if out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	r := redistest.New(t)
	newCLI := func(t *testing.T) *cli {
		p := redistest.Prefix()
		return &cli{t: t, bin: bin, r: r, prefix: p, ks: topics.Keyspace{Prefix: p}}
	}

	t.Run("EnqueueOne", func(t *testing.T) {
		t.Parallel()
		c := newCLI(t)
		c.register(stage)
		res := c.run("", "enqueue", "--stage", stage, "--tenant", "acme", "--session", "s-1",
			"--input", `{"q": 1}`, "--key", "ai:custom:k1", "--model-version", "m1")
		if res.code != 0 {
			t.Fatalf("exit %d: %s", res.code, res.stderr)
		}
		var rc client.Receipt
		if err := json.Unmarshal([]byte(res.stdout), &rc); err != nil {
			t.Fatalf("receipt %q: %v", res.stdout, err)
		}
		got := c.tasks(stage)
		if len(got) != 1 {
			t.Fatalf("%d entries on the stream, want 1", len(got))
		}
		tk := got[0]
		if tk.TaskID != rc.TaskID || tk.Tenant != "acme" || tk.SessionID != "s-1" || tk.RequestKey != "ai:custom:k1" ||
			tk.ModelVersion != "m1" || string(tk.Input) != `{"q":1}` || tk.EnqueuedAt == "" {
			t.Errorf("task = %+v, receipt %+v", tk, rc)
		}
		if key, _ := flight.TaskKey(tk); rc.RequestKey == "" || rc.RequestKey != key {
			t.Errorf("receipt requestKey %q, want the task's flight key %q", rc.RequestKey, key)
		}
	})

	t.Run("LoadWithoutWait", func(t *testing.T) {
		t.Parallel()
		c := newCLI(t)
		c.register(splitList(defaultStages)...)
		res := c.run("", "load", "--n", "20", "--keys", "5", "--latency-ms", "7")
		if res.code != 0 {
			t.Fatalf("exit %d: %s", res.code, res.stderr)
		}
		if !strings.Contains(res.stderr, "enqueued 20 of 20 tasks") {
			t.Errorf("stderr = %q, want the final count line", res.stderr)
		}
		// One receipt per task on stdout, each with the key inspect and cancel take.
		receipts := lines(res.stdout)
		if len(receipts) != 20 {
			t.Fatalf("stdout has %d lines, want 20 receipts: %q", len(receipts), res.stdout)
		}
		for _, l := range receipts {
			var rc client.Receipt
			if err := json.Unmarshal([]byte(l), &rc); err != nil || rc.TaskID == "" ||
				!strings.HasPrefix(rc.RequestKey, "ai:"+rc.Stage+":v1:load:") {
				t.Errorf("receipt line %q: %+v, %v", l, rc, err)
			}
		}
		inputs := map[string]int{}
		total := 0
		for _, s := range splitList(defaultStages) {
			tasks := c.tasks(s)
			if len(tasks) != 5 {
				t.Errorf("stage %s has %d tasks, want 5 (round robin)", s, len(tasks))
			}
			for _, tk := range tasks {
				inputs[string(tk.Input)]++
				total++
				if tk.Tenant != "load" {
					t.Errorf("tenant = %q", tk.Tenant)
				}
			}
		}
		if total != 20 || len(inputs) != 5 {
			t.Errorf("%d tasks over %d distinct inputs, want 20 over 5: %v", total, len(inputs), inputs)
		}
		if _, ok := inputs[`{"question":"q3","answer":"answer 3","sim":{"latencyMs":7}}`]; !ok {
			t.Errorf("inputs = %v", inputs)
		}
	})

	t.Run("EnqueueFile", func(t *testing.T) {
		t.Parallel()
		c := newCLI(t)
		c.register(stage, "interview-followup")
		file := filepath.Join(t.TempDir(), "tasks.jsonl")
		body := `{"taskId":"f-1","input":{"a":1}}` + "\n\n" +
			`{"taskId":"f-2","input":{"a":2},"tenant":"other"}` + "\n" +
			`{"input":"three","stage":"interview-followup"}` + "\n"
		if err := os.WriteFile(file, []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
		res := c.run("", "enqueue", "-f", file, "--stage", stage, "--tenant", "acme")
		if res.code != 0 {
			t.Fatalf("exit %d: %s", res.code, res.stderr)
		}
		if n := len(lines(res.stdout)); n != 3 || !strings.Contains(res.stdout, `"requestKey":"ai:interview-followup:v1:acme:`) {
			t.Errorf("stdout = %q, want 3 receipts with their request keys", res.stdout)
		}
		a, b := c.tasks(stage), c.tasks("interview-followup")
		if len(a) != 2 || len(b) != 1 {
			t.Fatalf("%d + %d entries, want 2 + 1", len(a), len(b))
		}
		if a[0].TaskID != "f-1" || a[0].Tenant != "acme" || a[1].Tenant != "other" || b[0].TaskID == "" || b[0].Tenant != "acme" {
			t.Errorf("tasks = %+v %+v", a, b)
		}

		// A bad line is reported with its number and nothing is enqueued.
		bad := `{"taskId":"ok","input":1}` + "\n" + `{"taskId":"bad id","input":1}` + "\n"
		res = c.run(bad, "--prefix", c.prefix+"x", "enqueue", "-f", "-", "--stage", stage, "--tenant", "acme")
		if res.code != 1 || !strings.Contains(res.stderr, "-:2:") {
			t.Errorf("bad file: exit %d, stderr %q", res.code, res.stderr)
		}
		if n := c.r.Client.XLen(context.Background(), topics.Keyspace{Prefix: c.prefix + "x"}.Tasks(stage)).Val(); n != 0 {
			t.Errorf("%d tasks enqueued from a bad file", n)
		}
	})

	// The subtests kept in files of their own, each on a fresh prefix.
	for _, sub := range []struct {
		name string
		test func(*testing.T, *cli)
	}{
		{"CancelScheduled", testCancelScheduled}, {"StrictFile", testStrictFile}, {"InspectTask", testInspectTask},
		{"Scheduled", testScheduled}, {"InspectArchive", testInspectArchive}, {"DLQ", testDLQ}, {"Formats", testFormats},
	} {
		t.Run(sub.name, func(t *testing.T) {
			t.Parallel()
			sub.test(t, newCLI(t))
		})
	}

	t.Run("Unreachable", func(t *testing.T) {
		t.Parallel()
		c := newCLI(t)
		for _, args := range [][]string{{"enqueue", "--any-stage", "--stage", stage, "--tenant", "acme", "--input", "1"},
			{"tail", "--stages", stage}, {"inspect", "ai:interview-evaluation:v1:acme:k"}} {
			res := c.run("", append([]string{"--redis", "redis://127.0.0.1:1/0"}, args...)...)
			if res.code != 1 || !strings.Contains(res.stderr, "cannot reach Redis") || strings.Count(strings.TrimSpace(res.stderr), "\n") != 0 {
				t.Errorf("%s with no Redis: exit %d, stderr %q; want 1 and one line saying it cannot reach Redis", args[0], res.code, res.stderr)
			}
		}
	})

	t.Run("InspectAndCancel", func(t *testing.T) {
		t.Parallel()
		c := newCLI(t)
		res := c.run("", "inspect", "ai:unknown:v1:acme:0")
		if res.code != 1 || !strings.Contains(res.stderr, "no flight") {
			t.Errorf("inspect unknown: exit %d, stderr %q", res.code, res.stderr)
		}
		for _, cmd := range []string{"inspect", "cancel"} {
			if res := c.run("", cmd, "not a {key}"); res.code != 2 || !strings.Contains(res.stderr, `"not a {key}" is not a request key`) {
				t.Errorf("%s with a malformed key: exit %d, stderr %q; want exit 2", cmd, res.code, res.stderr)
			}
			// An in-process executor's key may be free-form: looked up, not refused.
			if res := c.run("", cmd, "k1"); res.code != 1 || !strings.Contains(res.stderr, "no flight") {
				t.Errorf("%s k1: exit %d, stderr %q; want exit 1 and no flight", cmd, res.code, res.stderr)
			}
		}
		res = c.run("", "cancel", "ai:unknown:v1:acme:0")
		if res.code != 1 || !strings.Contains(res.stderr, "no flight") {
			t.Errorf("cancel unknown: exit %d, stderr %q", res.code, res.stderr)
		}

		coord, err := flight.NewCoordinator(flight.Config{Client: c.r.Client, Keyspace: c.ks})
		if err != nil {
			t.Fatal(err)
		}
		ctx := context.Background()
		const key = "ai:interview-evaluation:v1:acme:k2"
		tasks := c.ks.Tasks(stage)
		c.r.Client.XGroupCreateMkStream(ctx, tasks, topics.ConsumerGroup, "$")
		for _, id := range []string{"owner", "p-1"} {
			c.r.Client.XAdd(ctx, &redis.XAddArgs{Stream: tasks, Values: []any{"task", id}})
			rd, err := c.r.Client.XReadGroup(ctx, &redis.XReadGroupArgs{Group: topics.ConsumerGroup, Consumer: "n1",
				Streams: []string{tasks, ">"}, Count: 1, Block: -1}).Result()
			if err != nil {
				t.Fatal(err)
			}
			tk := flight.Task{ID: id, Stream: tasks, Entry: rd[0].Messages[0].ID}
			if _, err := coord.Acquire(ctx, flight.AcquireParams{Key: key, OwnerID: "n1", Task: tk, Stage: stage, Tenant: "acme"}); err != nil {
				t.Fatal(err)
			}
		}
		res = c.run("", "inspect", key)
		if res.code != 0 {
			t.Fatalf("inspect: exit %d: %s", res.code, res.stderr)
		}
		var in inspection
		if err := json.Unmarshal([]byte(res.stdout), &in); err != nil {
			t.Fatalf("inspect output %q: %v", res.stdout, err)
		}
		if in.Status != "PENDING" || in.OwnerTaskID != "owner" || len(in.Parked) != 1 || in.TTLMs.Meta <= 0 || in.TTLMs.Result != -2 {
			t.Errorf("inspect = %+v", in)
		}
		res = c.run("", "cancel", key, "--reason", "bye")
		if res.code != 0 || !strings.Contains(res.stdout, "answered 1 parked tasks") {
			t.Errorf("cancel: exit %d, stdout %q, stderr %q", res.code, res.stdout, res.stderr)
		}
		res = c.run("", "cancel", key, "--reason", "again")
		if res.code != 0 || !strings.Contains(res.stdout, "already cancelled (reason: bye)") {
			t.Errorf("second cancel: exit %d, stdout %q, stderr %q", res.code, res.stdout, res.stderr)
		}
	})

	t.Run("Version", func(t *testing.T) {
		t.Parallel()
		res := newCLI(t).run("", "--version")
		if res.code != 0 || !strings.HasPrefix(res.stdout, "producer github.com/flightdeck-ai/flightdeck ") {
			t.Errorf("--version: exit %d, stdout %q", res.code, res.stdout)
		}
	})

	t.Run("WaitAnswered", func(t *testing.T) {
		t.Parallel()
		c := newCLI(t)
		c.register(stage)
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		c.consume(ctx, stage)
		res := c.run("", "enqueue", "--stage", stage, "--tenant", "acme", "--input", `{"q":2}`, "--wait", "--timeout", "2s")
		if res.code != 0 {
			t.Fatalf("exit %d: %s", res.code, res.stderr)
		}
		out := lines(res.stdout)
		if len(out) != 2 {
			t.Fatalf("stdout = %q, want an event line and a summary line", res.stdout)
		}
		e, err := topics.DecodeEvent([]byte(out[0]))
		if err != nil || e.Status != topics.StatusSucceeded {
			t.Errorf("event line %q: %+v, %v", out[0], e, err)
		}
		var sum struct{ Summary client.Summary }
		if err := json.Unmarshal([]byte(out[1]), &sum); err != nil {
			t.Fatalf("summary line %q: %v", out[1], err)
		}
		if s := sum.Summary; s.Tasks != 1 || s.Events != 1 || s.Missing != 0 || s.Owner != 1 || s.DistinctKeys != 1 {
			t.Errorf("summary = %+v", s)
		}
		if !strings.Contains(res.stderr, "owner runs") {
			t.Errorf("stderr = %q, want the summary table", res.stderr)
		}
	})

	t.Run("WaitTimeout", func(t *testing.T) {
		t.Parallel()
		c := newCLI(t)
		c.register(stage)
		start := time.Now()
		res := c.run("", "load", "--n", "3", "--keys", "1", "--stages", stage, "--wait", "--timeout", "500ms")
		if res.code != 1 {
			t.Fatalf("exit %d, want 1: %s", res.code, res.stderr)
		}
		if !strings.Contains(res.stderr, "3 of 3 events missing") {
			t.Errorf("stderr = %q", res.stderr)
		}
		out := lines(res.stdout)
		if len(out) != 4 || !strings.HasPrefix(out[3], `{"summary":{"tasks":3,"events":0,"missing":3`) {
			t.Fatalf("stdout = %q, want 3 missing receipts and the summary", res.stdout)
		}
		for _, l := range out[:3] {
			var m struct{ Missing client.Receipt }
			if err := json.Unmarshal([]byte(l), &m); err != nil || m.Missing.TaskID == "" || m.Missing.RequestKey == "" {
				t.Errorf("missing line %q: %+v, %v", l, m, err)
			}
		}
		// Nobody ever read the stage: the hint says so, and that a consumer registered it.
		hint := "producer: stage " + stage + ": no consumer group on " + c.ks.Tasks(stage) + " (3 entries): no consumer ever read it; its last consumer test-consumer was seen "
		if !strings.Contains(res.stderr, hint) {
			t.Errorf("stderr = %q, want the hint %q", res.stderr, hint)
		}
		if d := time.Since(start); d > 5*time.Second {
			t.Errorf("took %v", d)
		}
	})

	t.Run("BadFlagValues", func(t *testing.T) {
		t.Parallel()
		c := newCLI(t)
		// A value no task may carry is a command-line mistake: exit 2, one line naming the
		// field and what it allows; nothing is enqueued.
		for _, cs := range []struct {
			args []string
			want string
		}{
			{[]string{"--tenant", "Acme"}, "bad_charset in tenant: byte 0x41 at offset 0 not allowed (want [a-z0-9_-])"},
			{[]string{"--tenant", "acme", "--id", "bad/id"}, "bad_charset in taskId: byte 0x2f at offset 3 not allowed (want [A-Za-z0-9._:-])"},
		} {
			res := c.run("", append([]string{"enqueue", "--stage", stage, "--input", "1"}, cs.args...)...)
			if res.code != 2 || !strings.Contains(res.stderr, cs.want) || strings.Count(res.stderr, "\n") != 1 {
				t.Errorf("%v: exit %d, stderr %q; want exit 2 and %q", cs.args, res.code, res.stderr, cs.want)
			}
		}
		if n := c.r.Client.XLen(context.Background(), c.ks.Tasks(stage)).Val(); n != 0 {
			t.Errorf("%d tasks enqueued after refusals", n)
		}
	})

	t.Run("UnknownStage", func(t *testing.T) {
		t.Parallel()
		c := newCLI(t)
		// No consumer has registered anything under this prefix yet.
		for _, args := range [][]string{
			{"enqueue", "--stage", stage, "--tenant", "acme", "--input", "1"},
			{"load", "--n", "2", "--stages", stage},
		} {
			res := c.run("", args...)
			want := `producer: unknown stage "` + stage + `": no consumer has registered any stage yet under prefix "` + c.prefix +
				`"; --any-stage enqueues anyway` + "\n"
			if res.code != 2 || res.stderr != want {
				t.Errorf("%v with an empty registry: exit %d, stderr %q; want exit 2 and %q", args, res.code, res.stderr, want)
			}
		}
		c.register(stage, "interview-demeanor")
		for _, args := range [][]string{
			{"enqueue", "--stage", "interview-evalution", "--tenant", "acme", "--input", "1", "--wait"},
			{"load", "--n", "2", "--stages", stage + ",interview-evalution"},
		} {
			res := c.run("", args...)
			want := `producer: unknown stage "interview-evalution" (known: interview-demeanor, interview-evaluation); --any-stage enqueues anyway` + "\n"
			if res.code != 2 || res.stderr != want {
				t.Errorf("%v: exit %d, stderr %q; want exit 2 and %q", args, res.code, res.stderr, want)
			}
		}
		ctx := context.Background()
		for _, s := range []string{stage, "interview-evalution"} {
			if n := c.r.Client.XLen(ctx, c.ks.Tasks(s)).Val(); n != 0 {
				t.Errorf("%d tasks enqueued on %s after a refusal", n, s)
			}
		}
		res := c.run("", "enqueue", "--stage", "interview-evalution", "--tenant", "acme", "--input", "1", "--any-stage")
		var rc client.Receipt
		if res.code != 0 || json.Unmarshal([]byte(res.stdout), &rc) != nil || rc.Stage != "interview-evalution" || rc.RequestKey == "" {
			t.Errorf("--any-stage: exit %d, stdout %q, stderr %q", res.code, res.stdout, res.stderr)
		}
	})

	t.Run("WaitHints", func(t *testing.T) {
		t.Parallel()
		c := newCLI(t)
		c.register(stage, "interview-followup")
		ctx := context.Background()
		// interview-followup: a consumer group whose consumer read the tasks and holds them.
		tasks := c.ks.Tasks("interview-followup")
		if err := c.r.Client.XGroupCreateMkStream(ctx, tasks, topics.ConsumerGroup, "$").Err(); err != nil {
			t.Fatal(err)
		}
		go func() {
			time.Sleep(300 * time.Millisecond) // after the producer enqueued
			c.r.Client.XReadGroup(ctx, &redis.XReadGroupArgs{Group: topics.ConsumerGroup, Consumer: "holder/0",
				Streams: []string{tasks, ">"}, Count: 10, Block: -1})
		}()
		res := c.run("", "enqueue", "--stage", "interview-followup", "--tenant", "acme", "--input", "1", "--wait", "--timeout", "700ms")
		want := "producer: stage interview-followup: 1 entry pending on " + tasks + " (0 parked on running flights), the oldest held by holder/0, idle "
		if res.code != 1 || !strings.Contains(res.stderr, want) {
			t.Errorf("pending: exit %d, stderr %q; want exit 1 and %q", res.code, res.stderr, want)
		}
		// interview-evaluation: a group with a consumer reading, but not the new entries.
		tasks = c.ks.Tasks(stage)
		if err := c.r.Client.XGroupCreateMkStream(ctx, tasks, topics.ConsumerGroup, "$").Err(); err != nil {
			t.Fatal(err)
		}
		c.r.Client.XGroupCreateConsumer(ctx, tasks, topics.ConsumerGroup, "reader/0")
		res = c.run("", "enqueue", "--stage", stage, "--tenant", "acme", "--input", "1", "--wait", "--timeout", "300ms")
		want = "producer: stage " + stage + ": 1 entry not yet read on " + tasks + ", whose consumers are alive (its last consumer test-consumer was seen "
		if res.code != 1 || !strings.Contains(res.stderr, want) || !strings.Contains(res.stderr, "the stage is behind") {
			t.Errorf("behind: exit %d, stderr %q; want exit 1 and %q", res.code, res.stderr, want)
		}
		// The consumers read the stage in two partitions; this producer writes one stream.
		c.r.Client.HSet(ctx, c.ks.Stages(), stage, `{"partitions":2,"mode":"HYBRID","model":"sim","consumer":"p","lastSeen":1}`)
		res = c.run("", "enqueue", "--stage", stage, "--tenant", "acme", "--input", "2", "--wait", "--timeout", "300ms")
		want = "producer: stage " + stage + ": the consumers read it in 2 partitions, this producer wrote 1 (--partitions 2)\n"
		if res.code != 1 || !strings.Contains(res.stderr, want) {
			t.Errorf("partitions: exit %d, stderr %q; want exit 1 and %q", res.code, res.stderr, want)
		}
	})

	t.Run("Stages", func(t *testing.T) {
		t.Parallel()
		c := newCLI(t)
		res := c.run("", "stages")
		if res.code != 0 || res.stdout != "" || !strings.Contains(res.stderr, "no consumer has registered any stage under prefix") {
			t.Errorf("stages, empty: exit %d, stdout %q, stderr %q", res.code, res.stdout, res.stderr)
		}
		c.register(stage, "interview-followup")
		ctx := context.Background()
		// interview-evaluation: 2 entries nobody read; interview-followup: 3 entries, 1 read
		// and pending, 2 not yet read.
		for range 2 {
			c.r.Client.XAdd(ctx, &redis.XAddArgs{Stream: c.ks.Tasks(stage), Values: []any{"k", "v"}})
		}
		f := c.ks.Tasks("interview-followup")
		c.r.Client.XGroupCreateMkStream(ctx, f, topics.ConsumerGroup, "$")
		for range 3 {
			c.r.Client.XAdd(ctx, &redis.XAddArgs{Stream: f, Values: []any{"k", "v"}})
		}
		c.r.Client.XReadGroup(ctx, &redis.XReadGroupArgs{Group: topics.ConsumerGroup, Consumer: "x/0", Streams: []string{f, ">"}, Count: 1, Block: -1})
		res = c.run("", "stages", "--format", "json")
		var rows []stageRow
		if err := json.Unmarshal([]byte(res.stdout), &rows); res.code != 0 || err != nil {
			t.Fatalf("stages --format json: exit %d, %v: %q %q", res.code, err, res.stdout, res.stderr)
		}
		if len(rows) != 2 || rows[0].Name != "interview-evaluation" || rows[0].Backlog != 2 || rows[0].Pending != 0 ||
			rows[1].Name != "interview-followup" || rows[1].Backlog != 2 || rows[1].Pending != 1 ||
			rows[1].Consumer != "test-consumer" || rows[1].Partitions != 1 || rows[1].Mode != "HYBRID" || rows[1].Model != "sim" ||
			rows[1].LastSeen == "" || rows[1].LastSeenAgoMs < 0 || rows[1].LastSeenAgoMs > 20000 {
			t.Errorf("rows = %+v", rows)
		}
		res = c.run("", "stages")
		out := lines(res.stdout)
		if res.code != 0 || len(out) != 3 || !strings.HasPrefix(out[0], "STAGE ") ||
			!strings.HasPrefix(out[2], "interview-followup ") || !strings.Contains(out[2], " test-consumer ") {
			t.Errorf("stages: exit %d, stdout %q", res.code, res.stdout)
		}
		if res := c.run("", "stages", "--format", "yaml"); res.code != 2 {
			t.Errorf("--format yaml: exit %d, want 2", res.code)
		}

		// A paused stage says so, in the table, the JSON, and the hints of a --wait that
		// times out (not "the stage is behind").
		c.r.Client.HSet(ctx, c.ks.Paused(), "interview-followup", `{"by":"ops@10.0.0.7","at":1}`)
		res = c.run("", "stages")
		if out := lines(res.stdout); res.code != 0 || len(out) != 3 || !strings.HasPrefix(out[2], "interview-followup (paused) ") {
			t.Errorf("stages, paused: exit %d, stdout %q", res.code, res.stdout)
		}
		res = c.run("", "stages", "--format", "json")
		if err := json.Unmarshal([]byte(res.stdout), &rows); err != nil || len(rows) != 2 || rows[0].Paused != nil ||
			rows[1].Paused == nil || rows[1].Paused.By != "ops@10.0.0.7" {
			t.Errorf("stages --format json, paused: %v %q", err, res.stdout)
		}
		res = c.run("", "enqueue", "--stage", "interview-followup", "--tenant", "acme", "--input", "1", "--wait", "--timeout", "300ms")
		want := "producer: stage interview-followup: the stage is paused (by ops@10.0.0.7, "
		if res.code != 1 || !strings.Contains(res.stderr, want) || strings.Contains(res.stderr, "behind") {
			t.Errorf("enqueue --wait on a paused stage: exit %d, stderr %q; want %q", res.code, res.stderr, want)
		}
	})

	t.Run("Usage", func(t *testing.T) {
		t.Parallel()
		c := newCLI(t)
		for _, args := range [][]string{{}, {"nope"}} {
			cmd := exec.Command(c.bin, args...)
			var errOut bytes.Buffer
			cmd.Stderr = &errOut
			err := cmd.Run()
			ee, ok := errors.AsType[*exec.ExitError](err)
			if !ok || ee.ExitCode() != 2 {
				t.Errorf("%v: %v, want exit 2", args, err)
			}
			for _, sub := range []string{"enqueue", "load", "tail", "inspect", "cancel", "stages", "dlq"} {
				if !strings.Contains(errOut.String(), sub) {
					t.Errorf("%v: usage does not list %s", args, sub)
				}
			}
		}
		if err := exec.Command(c.bin, "-h").Run(); err != nil {
			t.Errorf("-h: %v", err)
		}
		res := c.run("", "enqueue", "--stage", stage)
		if res.code != 2 || !strings.Contains(res.stderr, "required") {
			t.Errorf("enqueue without tenant/input: exit %d, %q", res.code, res.stderr)
		}
		res = c.run("", "enqueue", "--stage", stage, "--tenant", "acme", "--input", "{")
		if res.code != 2 {
			t.Errorf("enqueue with bad JSON: exit %d", res.code)
		}
	})
}
