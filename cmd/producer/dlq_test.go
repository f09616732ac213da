package main

import (
	"bytes"
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/flightdeck-ai/flightdeck/internal/broker"
	"github.com/flightdeck-ai/flightdeck/topics"
)

// deadLetter writes a dead letter of stage as a consumer does and returns its entry id.
func (c *cli) deadLetter(stage string, d topics.DeadLetter) string {
	c.t.Helper()
	ctx := context.Background()
	d.Stage = stage
	w := broker.Writer{Client: c.r.Client, Keyspace: c.ks}
	if err := w.DeadLetter(ctx, d); err != nil {
		c.t.Fatal(err)
	}
	last, err := c.r.Client.XRevRangeN(ctx, c.ks.DLQ(stage), "+", "-", 1).Result()
	if err != nil || len(last) != 1 {
		c.t.Fatalf("the dead letter just written: %v %v", last, err)
	}
	return last[0].ID
}

// want checks a run's exit status and its exact output.
func want(t *testing.T, res result, code int, stdout, stderr string) {
	t.Helper()
	if res.code != code || res.stdout != stdout || res.stderr != stderr {
		t.Errorf("exit %d, stdout %q, stderr %q\nwant exit %d, stdout %q, stderr %q", res.code, res.stdout, res.stderr,
			code, stdout, stderr)
	}
}

// testDLQ (TestCLI/DLQ): producer dlq lists, shows, requeues and purges dead letters
// through the dashboard's code, with exact messages and exit statuses.
func testDLQ(t *testing.T, c *cli) {
	ctx := context.Background()
	want(t, c.run("", "dlq", "ls"), 2, "", `producer dlq ls: no consumer has registered any stage under prefix "`+c.prefix+
		`": name one with --stage (see 'producer dlq ls -h')`+"\n")
	want(t, c.run("", "dlq"), 2, "", "producer dlq: want a subcommand: ls, show, requeue or purge (see 'producer dlq -h')\n")
	want(t, c.run("", "dlq", "frob"), 2, "", `producer dlq: unknown subcommand "frob": want ls, show, requeue or purge (see 'producer dlq -h')`+"\n")
	c.register(stage)
	want(t, c.run("", "dlq", "ls"), 0, "", "producer: no dead letters in the DLQs of the registered stages\n")

	// A payload over the dashboard's 2 KiB preview: ls still names its task, show prints it whole.
	big := `{"taskId":"t-big","stage":"` + stage + `","tenant":"acme","input":{"text":"` + strings.Repeat("x", 5000) + `"},"bogus":1}`
	id1 := c.deadLetter(stage, topics.DeadLetter{UUID: "u-1", Payload: []byte(big), Reason: "unknown_field",
		Detail: `field "bogus" is not a task field`, Consumer: "node-a"})
	id2 := c.deadLetter(stage, topics.DeadLetter{UUID: "u-2", Payload: []byte(`not json`), Reason: "bad_json",
		Detail: "invalid character 'o' in literal null", Consumer: "node-b",
		Raw: map[string]any{"metadata": "\x81\xa1"}})

	res := c.run("", "dlq", "ls")
	out := lines(res.stdout)
	if res.code != 0 || len(out) != 3 || !strings.HasPrefix(out[0], "STAGE ") ||
		!strings.Contains(out[0], " ID ") || !strings.Contains(out[0], " AGE ") || !strings.Contains(out[0], " TASK ") {
		t.Fatalf("dlq ls: exit %d, stdout %q, stderr %q", res.code, res.stdout, res.stderr)
	}
	if f := strings.Fields(out[1]); len(f) < 6 || f[0] != stage || f[1] != id2 || f[3] != "bad_json" || f[4] != "-" {
		t.Errorf("dlq ls, newest row %q: want %s, bad_json and no task id", out[1], id2)
	}
	if f := strings.Fields(out[2]); len(f) < 6 || f[1] != id1 || f[3] != "unknown_field" || f[4] != "t-big" ||
		!strings.HasSuffix(out[2], `field "bogus" is not a task field`) {
		t.Errorf("dlq ls, oldest row %q: want %s, unknown_field, t-big and the detail", out[2], id1)
	}
	res = c.run("", "dlq", "ls", "--stage", stage, "--n", "1", "--format", "json")
	var rows []dlqRow
	if err := json.Unmarshal([]byte(res.stdout), &rows); err != nil || res.code != 0 {
		t.Fatalf("dlq ls --format json: exit %d, %v, %q", res.code, err, res.stdout)
	}
	if len(rows) != 1 || rows[0].ID != id2 || rows[0].UUID != "u-2" || rows[0].Consumer != "node-b" ||
		rows[0].AgeMs < 0 || rows[0].AgeMs > 20000 {
		t.Errorf("dlq ls --n 1: %+v", rows)
	}
	want(t, c.run("", "dlq", "ls", "--n", "0"), 2, "", "producer dlq ls: --n must be between 1 and 1000 (see 'producer dlq ls -h')\n")

	// show: the whole payload (as JSON when it is JSON), the original fields.
	res = c.run("", "dlq", "show", id1, "--stage", stage)
	var shown struct {
		Stage, ID, UUID, Reason, Detail, Consumer, TaskID, PayloadText string
		Payload                                                        json.RawMessage
	}
	if err := json.Unmarshal([]byte(res.stdout), &shown); err != nil || res.code != 0 {
		t.Fatalf("dlq show: exit %d, %v, stdout %q, stderr %q", res.code, err, res.stdout, res.stderr)
	}
	var compact bytes.Buffer
	_ = json.Compact(&compact, shown.Payload)
	if shown.Stage != stage || shown.ID != id1 || shown.UUID != "u-1" || shown.Reason != "unknown_field" ||
		shown.Consumer != "node-a" || shown.TaskID != "t-big" || compact.String() != big || shown.PayloadText != "" {
		t.Errorf("dlq show %s: %.300s", id1, res.stdout)
	}
	res = c.run("", "dlq", "show", "--stage", stage, id2)
	var shown2 struct {
		PayloadText string
		Original    map[string]string
	}
	if err := json.Unmarshal([]byte(res.stdout), &shown2); err != nil || res.code != 0 ||
		shown2.PayloadText != "not json" || len(shown2.Original) != 1 {
		t.Errorf("dlq show %s: exit %d, %v, %q", id2, res.code, err, res.stdout)
	}
	want(t, c.run("", "dlq", "show", "1-1", "--stage", stage), 1, "", "producer dlq show: no dead letter 1-1 in the DLQ of stage "+stage+"\n")
	want(t, c.run("", "dlq", "show", "xyz", "--stage", stage), 2, "",
		`producer dlq show: "xyz" is not a stream entry id (see 'producer dlq show -h')`+"\n")
	want(t, c.run("", "dlq", "show", id1), 2, "", "producer dlq show: --stage is required (see 'producer dlq show -h')\n")

	// requeue: back onto the task stream with the same uuid and payload.
	want(t, c.run("", "dlq", "requeue", id1, "--stage", stage), 0, "requeued 1 dead letter of stage "+stage+" onto its task stream\n", "")
	msgs, err := c.r.Client.XRange(ctx, c.ks.Tasks(stage), "-", "+").Result()
	if err != nil || len(msgs) != 1 || msgs[0].Values[topics.FieldUUID] != "u-1" || msgs[0].Values[topics.FieldPayload] != big {
		t.Errorf("task stream after the requeue: %d entries, %v", len(msgs), err)
	}
	want(t, c.run("", "dlq", "requeue", id1, "--stage", stage), 1, "requeued 0 dead letters of stage "+stage+" onto its task stream\n",
		"producer dlq requeue: 1 of the 1 ids given are not in the DLQ of stage "+stage+"\n")
	want(t, c.run("", "dlq", "requeue", id2, "--all", "--stage", stage), 2, "",
		"producer dlq requeue: give dead letter ids or --all, not both (see 'producer dlq requeue -h')\n")
	want(t, c.run("", "dlq", "requeue", "--stage", stage), 2, "",
		"producer dlq requeue: want dead letter ids or --all (see 'producer dlq requeue -h')\n")

	// purge: refused without --yes, whatever the selection; nothing is deleted.
	for _, args := range [][]string{{"--all"}, {id2}} {
		want(t, c.run("", append([]string{"dlq", "purge", "--stage", stage}, args...)...), 2, "",
			"producer dlq purge: refusing to delete dead letters for good without --yes (see 'producer dlq purge -h')\n")
	}
	if n := c.r.Client.XLen(ctx, c.ks.DLQ(stage)).Val(); n != 1 {
		t.Fatalf("DLQ has %d entries after refused purges, want 1", n)
	}
	want(t, c.run("", "dlq", "purge", id2, "--stage", stage, "--yes"), 0, "purged 1 dead letter from the DLQ of stage "+stage+"\n", "")

	// --all: every entry there when the command starts.
	for i := range 3 {
		c.deadLetter(stage, topics.DeadLetter{UUID: "u-all-" + string(rune('a'+i)), Payload: []byte(`{}`), Reason: "missing_field"})
	}
	want(t, c.run("", "dlq", "requeue", "--all", "--stage", stage), 0, "requeued 3 dead letters of stage "+stage+" onto its task stream\n", "")
	for range 2 {
		c.deadLetter(stage, topics.DeadLetter{Payload: []byte(`{}`), Reason: "missing_field"})
	}
	want(t, c.run("", "dlq", "purge", "--all", "--stage", stage, "--yes"), 0, "purged 2 dead letters from the DLQ of stage "+stage+"\n", "")
	if n := c.r.Client.XLen(ctx, c.ks.DLQ(stage)).Val(); n != 0 {
		t.Errorf("DLQ has %d entries after purge --all", n)
	}
	if n := c.r.Client.XLen(ctx, c.ks.Tasks(stage)).Val(); n != 4 {
		t.Errorf("task stream has %d entries, want the 4 requeued", n)
	}
	want(t, c.run("", "dlq", "ls", "--stage", stage), 0, "", "producer: no dead letters in the DLQ of stage "+stage+"\n")
}
