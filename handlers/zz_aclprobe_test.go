package handlers_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/flightdeck-ai/flightdeck/flight"
	"github.com/flightdeck-ai/flightdeck/handlers"
	"github.com/flightdeck-ai/flightdeck/handlers/model"
	"github.com/flightdeck-ai/flightdeck/internal/redisconn"
	"github.com/flightdeck-ai/flightdeck/internal/redistest"
	"github.com/flightdeck-ai/flightdeck/topics"
)

func TestZZACLProbe(t *testing.T) {
	acl := os.Getenv("PROBE_ACL")
	if acl == "" {
		t.Skip()
	}
	prefix := "pfx"
	srv := redistest.Start(t, &redistest.Options{ACL: []string{"user fd on >pw resetkeys resetchannels " + acl}})
	mon := exec.Command("redis-cli", "-p", strings.Split(srv.Addr(), ":")[1], "monitor")
	mf, _ := os.Create("/tmp/monitor.txt")
	mon.Stdout = mf
	_ = mon.Start()
	defer mon.Process.Kill()
	admin := srv.Client()
	b := &bundle{t: t, ctx: context.Background(), r: &redistest.Target{Client: admin, URL: srv.URL(), Prefix: prefix, Server: srv}}
	b.ks = topics.Keyspace{Prefix: prefix}
	b.w = topics.Writer{Client: admin, Keyspace: b.ks}
	b.sim = &model.Sim{}
	opt, err := redisconn.Options("redis://fd:pw@" + srv.Addr())
	if err != nil {
		t.Fatal(err)
	}
	mut := func(c *handlers.Config) {
		c.NewClient = redisconn.Factory(opt)
		stages, err := handlers.LoadStages("", []string{handlers.StageEvaluation, handlers.StageExtraction})
		if err != nil {
			t.Fatal(err)
		}
		for i := range stages {
			stages[i].HeartbeatInterval, stages[i].Lease = 100*time.Millisecond, time.Second
		}
		c.Stages = stages
		c.Limits = topics.Limits{}
	}
	stop1 := b.consumer("c1", mut)
	b.consumer("c2", mut)
	in := func(s string) json.RawMessage { return json.RawMessage(s) }
	for i := range 10 {
		b.enqueue(topics.Task{TaskID: fmt.Sprint("d", i), Stage: handlers.StageEvaluation, Input: simInput(i%2, 300)})
	}
	b.enqueue(topics.Task{TaskID: "f1", Stage: handlers.StageEvaluation, Input: in(`{"x":1,"sim":{"fail":"retryable","failAttempts":1}}`)})
	b.enqueue(topics.Task{TaskID: "f2", Stage: handlers.StageEvaluation, Input: in(`{"x":2,"sim":{"fail":"final"}}`)})
	b.enqueue(topics.Task{TaskID: "dl", Stage: handlers.StageEvaluation, Input: in(`{"x":3}`), Deadline: "2000-01-01T00:00:00Z"})
	b.enqueue(topics.Task{TaskID: "c1", Stage: handlers.StageEvaluation, Input: in(`{"x":4,"sim":{"latencyMs":3000}}`)})
	for i := range 3 {
		b.enqueue(topics.Task{TaskID: fmt.Sprint("h", i), Stage: handlers.StageExtraction, SessionID: "s1", Input: in(fmt.Sprintf(`{"r":%d,"sim":{"latencyMs":200}}`, i))})
	}
	admin.XAdd(b.ctx, &redis.XAddArgs{Stream: b.ks.Tasks(handlers.StageEvaluation), Values: []any{"payload", "x"}})
	time.Sleep(500 * time.Millisecond)
	coord, _ := flight.NewCoordinator(flight.Config{Client: admin, Keyspace: b.ks})
	k, _ := handlers.TaskKey(topics.Task{TaskID: "c1", Stage: handlers.StageEvaluation, Tenant: "acme", Input: in(`{"x":4,"sim":{"latencyMs":3000}}`)})
	if _, err := coord.Cancel(b.ctx, k, "probe", flight.Policy{}); err != nil {
		t.Log("cancel:", err)
	}
	// a slow task, then c1 leaves gracefully with it running: c2 claims it.
	b.enqueue(topics.Task{TaskID: "slow", Stage: handlers.StageEvaluation, Input: in(`{"x":5,"sim":{"latencyMs":4000}}`)})
	time.Sleep(300 * time.Millisecond)
	stop1()
	got := b.events([]string{handlers.StageEvaluation, handlers.StageExtraction}, 18, 20*time.Second)
	t.Logf("%d events", len(got))
	for id, evs := range got {
		t.Logf("%s: %s %s %s", id, evs[0].Status, evs[0].Consumer, evs[0].ErrorCode)
	}
	for _, e := range admin.Do(b.ctx, "ACL", "LOG").Val().([]any) {
		m := e.(map[any]any)
		t.Logf("ACL LOG %v %v %v count=%v", m["reason"], m["context"], m["object"], m["count"])
	}
	ok := 0
	for _, evs := range got {
		if evs[0].Status == topics.StatusSucceeded {
			ok++
		}
	}
	t.Logf("RESULT events=%d succeeded=%d", len(got), ok)
}
