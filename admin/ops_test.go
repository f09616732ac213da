package admin_test

import (
	"context"
	"encoding/json"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/flightdeck-ai/flightdeck/admin"
	"github.com/flightdeck-ai/flightdeck/topics"
)

// TestAPIHistory: the history of the fleet (two consumers) counts every task once, with
// latency quantiles, over a full hour of minutes.
func TestAPIHistory(t *testing.T) {
	p := startPipeline(t, []string{"interview-evaluation", "interview-followup"}, "node-a", "node-b")
	const n = 10
	for i := range n {
		p.enqueue(topics.Task{TaskID: "h-" + strconv.Itoa(i),
			Input: input(map[string]any{"answer": "a" + strconv.Itoa(i), "sim": map[string]any{"latencyMs": 30}})})
	}
	eventually(t, 20*time.Second, "the events", func() bool { return len(p.events()) == n })
	var hist []admin.StageHistory
	eventually(t, 10*time.Second, "the fleet's stats", func() bool {
		if code := p.get("history?stage="+"interview-evaluation", &hist); code != http.StatusOK {
			t.Fatalf("GET history: %d", code)
		}
		var total int64
		for _, m := range hist[0].Minutes {
			total += m.Total
		}
		return total == n
	})
	if len(hist) != 1 || len(hist[0].Minutes) != admin.MaxHistoryMinutes {
		t.Fatalf("history: %d stages, want 1 with %d minutes", len(hist), admin.MaxHistoryMinutes)
	}
	ms := hist[0].Minutes
	for i := 1; i < len(ms); i++ {
		if ms[i].Minute != ms[i-1].Minute+60 {
			t.Fatalf("minutes not consecutive: %d then %d", ms[i-1].Minute, ms[i].Minute)
		}
	}
	var count int64
	for _, m := range ms {
		count += m.Count
		if m.Count > 0 && (m.P50Ms < 0 || m.P99Ms < m.P50Ms || m.Outcomes["owner_SUCCEEDED"] == 0) {
			t.Errorf("minute %+v: want quantiles and owner outcomes", m)
		}
	}
	if count != n {
		t.Errorf("%d latencies, want %d", count, n)
	}
	if code := p.get("history", &hist); code != http.StatusOK || len(hist) != 2 {
		t.Errorf("GET history of every stage: %d, %d stages", code, len(hist))
	}
	if code := p.get("history?stage=nope", nil); code != http.StatusNotFound {
		t.Errorf("GET history of an unknown stage: %d, want 404", code)
	}
}

// TestAPIPauseAndQueued: pausing needs the action token; a paused stage's new task stays
// queued (listed with its payload, HTML escaped in the JSON) until the stage is resumed. The
// flight detail lists the attempt.
func TestAPIPauseAndQueued(t *testing.T) {
	p := startPipeline(t, []string{"interview-evaluation"}, "node-a")
	stage := map[string]string{"stage": "interview-evaluation"}
	for _, c := range []struct {
		token string
		want  int
	}{{"", http.StatusUnauthorized}, {testReadToken, http.StatusForbidden}, {"wrong-token-0123456789", http.StatusUnauthorized}} {
		if code, body := p.post("pause", c.token, stage, nil); code != c.want {
			t.Errorf("pause with token %q: %d %s, want %d", c.token, code, body, c.want)
		}
	}
	var info topics.PauseInfo
	if code, body := p.post("pause", testToken, stage, &info); code != http.StatusOK || info.At == 0 || !strings.HasPrefix(info.By, "dashboard ") {
		t.Fatalf("pause: %d %s %+v", code, body, info)
	}
	if code, _ := p.post("pause", testToken, map[string]string{"stage": "nope"}, nil); code != http.StatusNotFound {
		t.Errorf("pause of an unknown stage: %d, want 404", code)
	}
	var ov admin.Overview
	p.get("overview", &ov)
	if ov.Stages[0].Paused == nil || ov.Stages[0].Paused.At != info.At {
		t.Fatalf("overview: paused %+v, want %+v", ov.Stages[0].Paused, info)
	}
	time.Sleep(2 * time.Second) // the subscribers' cached pause state (1 s) and a read already blocking (250 ms)
	// Written as a producer may write it: the markup raw in the payload.
	if err := p.r.Client.XAdd(context.Background(), &redis.XAddArgs{Stream: p.ks.Tasks("interview-evaluation"),
		Values: []any{topics.FieldUUID, "uuid-q-1", topics.FieldPayload, `{"taskId":"q-1","stage":"` + "interview-evaluation" +
			`","tenant":"acme","input":{"answer":"<script>alert(1)</script>","sim":{"latencyMs":10}}}`}}).Err(); err != nil {
		t.Fatal(err)
	}
	var queued []admin.QueuedView
	eventually(t, 5*time.Second, "the queued task", func() bool {
		p.get("queued?stage="+"interview-evaluation", &queued)
		return len(queued) == 1
	})
	if q := queued[0]; q.TaskID != "q-1" || q.Tenant != "acme" || !strings.Contains(q.Payload, "<script>") || q.AgeMs < 0 {
		t.Errorf("queued: %+v", q)
	}
	var rawJSON json.RawMessage // the bytes as served
	p.get("queued", &rawJSON)
	if raw := string(rawJSON); strings.Contains(raw, "<script>") || !strings.Contains(raw, `\u003cscript\u003e`) {
		t.Errorf("queued JSON not HTML-escaped: %s", rawJSON)
	}
	time.Sleep(time.Second)
	if len(p.events()["q-1"]) > 0 {
		t.Fatal("a paused stage's task was answered")
	}
	var resumed map[string]bool
	if code, body := p.post("resume", testReadToken, stage, nil); code != http.StatusForbidden {
		t.Errorf("resume with the read token: %d %s", code, body)
	}
	if code, body := p.post("resume", testToken, stage, &resumed); code != http.StatusOK || !resumed["wasPaused"] {
		t.Fatalf("resume: %d %s", code, body)
	}
	eventually(t, 10*time.Second, "the resumed task's event", func() bool { return len(p.events()["q-1"]) > 0 })
	key := p.events()["q-1"][0].RequestKey
	p.get("queued", &queued)
	if len(queued) != 0 {
		t.Errorf("queued after resume: %+v", queued)
	}
	var d admin.FlightDetail
	if code := p.get("flight?key="+url.QueryEscape(key), &d); code != http.StatusOK {
		t.Fatalf("GET flight: %d", code)
	}
	if len(d.Attempts) != 1 {
		t.Fatalf("attempts %+v, want 1", d.Attempts)
	}
	if a := d.Attempts[0]; a.Attempt != 1 || a.Owner != "node-a" || a.Token == 0 || a.Outcome != "SUCCEEDED" ||
		a.StartedAt <= 0 || a.EndedAt < a.StartedAt {
		t.Errorf("attempt %+v", a)
	}
}

// TestAPIDLQBulk: bulk requeue and purge need the action token, and act on the selected
// entries or on every entry of a stage.
func TestAPIDLQBulk(t *testing.T) {
	p := startPipeline(t, []string{"interview-evaluation"}, "node-a")
	ctx := context.Background()
	dlq := p.ks.DLQ("interview-evaluation")
	var ids []string
	for i := range 5 {
		id, err := p.r.Client.XAdd(ctx, &redis.XAddArgs{Stream: dlq, Values: []any{
			topics.FieldUUID, "uuid-" + strconv.Itoa(i), topics.FieldPayload, `{"taskId":"bad-` + strconv.Itoa(i) + `"}`,
			topics.FieldReason, "invalid_task"}}).Result()
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, id)
	}
	sel := admin.DLQSelection{Stage: "interview-evaluation", IDs: ids[:2]}
	for _, path := range []string{"dlq/requeue", "dlq/purge"} {
		if code, _ := p.post(path, "", sel, nil); code != http.StatusUnauthorized {
			t.Errorf("%s without a token: %d, want 401", path, code)
		}
		if code, _ := p.post(path, testReadToken, sel, nil); code != http.StatusForbidden {
			t.Errorf("%s with the read token: %d, want 403", path, code)
		}
	}
	if n := p.r.Client.XLen(ctx, dlq).Val(); n != 5 {
		t.Fatalf("refused actions changed the DLQ: %d entries", n)
	}
	for _, bad := range []admin.DLQSelection{{Stage: "interview-evaluation"},
		{Stage: "interview-evaluation", IDs: []string{"x"}}, {Stage: "interview-evaluation", All: true, IDs: ids[:1]}} {
		if code, body := p.post("dlq/purge", testToken, bad, nil); code != http.StatusBadRequest {
			t.Errorf("purge %+v: %d %s, want 400", bad, code, body)
		}
	}
	// Paused, the requeued entries stay on the task stream where they can be seen.
	p.post("pause", testToken, map[string]string{"stage": "interview-evaluation"}, nil)
	time.Sleep(2 * time.Second) // the subscribers' cached pause state
	var res admin.BulkResult
	if code, body := p.post("dlq/requeue", testToken, sel, &res); code != http.StatusOK || res.Done != 2 || len(res.IDs) != 2 {
		t.Fatalf("requeue: %d %s %+v", code, body, res)
	}
	var queued []admin.QueuedView
	p.get("queued", &queued)
	if len(queued) != 2 || queued[0].UUID != "uuid-0" || queued[1].UUID != "uuid-1" {
		t.Errorf("queued after the requeue: %+v", queued)
	}
	res = admin.BulkResult{}
	if code, body := p.post("dlq/purge", testToken, admin.DLQSelection{Stage: "interview-evaluation",
		IDs: []string{ids[2], ids[0]}}, &res); code != http.StatusOK || res.Done != 1 || res.Missing != 1 {
		t.Errorf("purge: %d %s %+v", code, body, res)
	}
	res = admin.BulkResult{}
	if code, body := p.post("dlq/requeue", testToken, admin.DLQSelection{Stage: "interview-evaluation", All: true,
		UpTo: ids[3]}, &res); code != http.StatusOK || res.Done != 1 || res.UpTo != ids[3] {
		t.Errorf("requeue all up to %s: %d %s %+v", ids[3], code, body, res)
	}
	res = admin.BulkResult{}
	if code, body := p.post("dlq/purge", testToken, admin.DLQSelection{Stage: "interview-evaluation", All: true},
		&res); code != http.StatusOK || res.Done != 1 {
		t.Errorf("purge all: %d %s %+v", code, body, res)
	}
	if n := p.r.Client.XLen(ctx, dlq).Val(); n != 0 {
		t.Errorf("DLQ has %d entries left", n)
	}
	p.get("queued", &queued)
	if len(queued) != 3 {
		t.Errorf("queued: %d entries, want 3", len(queued))
	}
}
