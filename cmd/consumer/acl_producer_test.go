package main_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/flightdeck-ai/flightdeck/client"
	"github.com/flightdeck-ai/flightdeck/handlers"
	"github.com/flightdeck-ai/flightdeck/internal/redistest"
	"github.com/flightdeck-ai/flightdeck/topics"
)

// producerACL returns the producer's ACL file line documented in docs/SECURITY.md (the one
// line of its "acl-producer" code block, written for stage interview-evaluation) with the
// password, key prefix and stage of this test.
func producerACL(t *testing.T, password, prefix, stage string) string {
	t.Helper()
	doc, err := os.ReadFile(filepath.Join("..", "..", "docs", "SECURITY.md"))
	if err != nil {
		t.Fatal(err)
	}
	_, block, ok := strings.Cut(string(doc), "\n```acl-producer\n")
	block, _, ok2 := strings.Cut(block, "\n```")
	if !ok || !ok2 || strings.Count(block, "\n") != 0 || !strings.Contains(block, " >CHANGE-ME ") {
		t.Fatalf("docs/SECURITY.md has no one-line acl-producer block with >CHANGE-ME: %q", block)
	}
	block = strings.Replace(block, " >CHANGE-ME ", " >"+password+" ", 1)
	block = strings.ReplaceAll(block, "~ai:", "~"+prefix+":")
	return strings.ReplaceAll(block, "interview-evaluation", stage)
}

// TestProducerACL: a producer service under the documented producer ACL enqueues tasks of its
// stage and awaits their events through the client while a consumer runs, and Redis refuses
// everything else a hostile producer would try: reading any task stream (other producers'
// raw payloads), writing a result stream (forged events) or a dead-letter stream (forged dead
// letters an operator might requeue), enqueueing to another stage, reading the consumer
// group, and touching flight state.
func TestProducerACL(t *testing.T) {
	prefix := redistest.Prefix()
	stage := handlers.StageEvaluation
	line := producerACL(t, "pw-producer", prefix, stage)
	e, srv := newSecureE2E(t, prefix, &redistest.Options{ACL: []string{line}})
	e.start("c1")
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr(), Username: "producer", Password: "pw-producer"})
	defer rdb.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cl, err := client.New(client.Config{Client: rdb, Keyspace: e.ks})
	if err != nil {
		t.Fatal(err)
	}
	r, err := cl.Enqueue(ctx, task("p1", stage, 1, 0))
	if err != nil {
		t.Fatalf("enqueue under the producer ACL: %v", err)
	}
	ev, err := cl.Await(ctx, r)
	if err != nil || ev.Status != topics.StatusSucceeded {
		t.Fatalf("await under the producer ACL: %+v, %v", ev, err)
	}
	if d := aclDenials(t, e.rdb, "producer"); len(d) > 0 {
		t.Errorf("Redis refused the producer's own work (fix docs/SECURITY.md):\n%s", strings.Join(d, "\n"))
	}

	other := handlers.StageFollowup
	for _, cmd := range [][]any{
		{"xread", "streams", e.ks.Tasks(stage), "0"},
		{"xrange", e.ks.Tasks(stage), "-", "+"},
		{"xrevrange", e.ks.Tasks(stage), "+", "-"},
		{"xreadgroup", "group", topics.ConsumerGroup, "x", "streams", e.ks.Tasks(stage), ">"},
		{"xinfo", "stream", e.ks.Tasks(stage)},
		{"xadd", e.ks.Results(stage), "*", topics.FieldPayload, `{"taskId":"p1"}`},
		{"xadd", e.ks.DLQ(stage), "*", topics.FieldPayload, "{}"},
		{"xadd", e.ks.Tasks(other), "*", topics.FieldPayload, "{}"},
		{"xread", "streams", e.ks.Results(other), "0"},
		{"xdel", e.ks.Tasks(stage), "0-1"},
		{"xtrim", e.ks.Results(stage), "maxlen", "0"},
		{"hgetall", e.ks.Meta(r.RequestKey)},
		{"get", e.ks.Result(r.RequestKey)},
		{"hset", e.ks.Meta(r.RequestKey), "status", "SUCCEEDED"},
		{"del", e.ks.Tasks(stage)},
	} {
		if err := rdb.Do(ctx, cmd...).Err(); err == nil || !strings.Contains(err.Error(), "NOPERM") {
			t.Errorf("%v under the producer ACL: %v, want NOPERM", cmd, err)
		}
	}
}
