package main_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/flightdeck-ai/flightdeck/client"
	"github.com/flightdeck-ai/flightdeck/internal/testkit/redistest"
	"github.com/flightdeck-ai/flightdeck/topics"
)

// producerACL returns the producer's ACL file line documented in docs/SECURITY.md (the one
// line of its "acl-producer" code block, written for stage interview-evaluation) with the
// password, key prefix and stage of this test.
func producerACL(t *testing.T, password, prefix, stage string) string {
	t.Helper()
	block := documentedACL(t, "acl-producer")
	if !strings.Contains(block, " >CHANGE-ME ") {
		t.Fatalf("docs/SECURITY.md has no one-line acl-producer block with >CHANGE-ME: %q", block)
	}
	block = strings.Replace(block, " >CHANGE-ME ", " >"+password+" ", 1)
	block = strings.ReplaceAll(block, "~ai:", "~"+prefix+":")
	return strings.ReplaceAll(block, "interview-evaluation", stage)
}

// TestProducerACL: a producer service under the documented producer ACL enqueues tasks of its
// stage, awaits their events and follows its result stream through the client while a
// consumer runs, and Redis refuses everything else a hostile producer would try: reading any
// task stream (other producers' raw payloads), writing a result stream (forged events) or a
// dead-letter stream (forged dead letters an operator might requeue), enqueueing to another
// stage, reading the consumer group, and touching flight state.
func TestProducerACL(t *testing.T) {
	prefix := redistest.Prefix()
	stage := "interview-evaluation"
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
	// Following the result stream from now on ("$", as producer enqueue --wait and tail do).
	sctx, stop := context.WithCancel(ctx)
	defer stop()
	ch, err := cl.Subscribe(sctx, []string{stage}, "$")
	if err != nil {
		t.Fatalf("subscribe under the producer ACL: %v", err)
	}
	r2, err := cl.Enqueue(ctx, task("p2", stage, 2, 0))
	if err != nil {
		t.Fatal(err)
	}
	for se := range ch {
		if se.Err == nil && r2.Matches(se.Event) {
			break
		}
	}
	if ctx.Err() != nil {
		t.Fatal("no event for the task enqueued after subscribing")
	}
	stop()
	if d := aclDenials(t, e.rdb, "producer"); len(d) > 0 {
		t.Errorf("Redis refused the producer's own work (fix docs/SECURITY.md):\n%s", strings.Join(d, "\n"))
	}
	// A result an event carries only as resultRef is read from its stage's flight records.
	if b, err := rdb.Get(ctx, e.ks.Flight(r.RequestKey)).Bytes(); err != nil || len(b) == 0 {
		t.Errorf("GET of its stage's stored result under the producer ACL: %q, %v", b, err)
	}

	other := "interview-followup"
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
		{"hgetall", e.ks.Waiters(r.RequestKey)},
		{"get", e.ks.Fence(r.RequestKey)},
		{"get", e.ks.Flight(strings.Replace(r.RequestKey, stage, other, 1))},
		{"set", e.ks.Flight(r.RequestKey), "forged"},
		{"hset", e.ks.Flight(r.RequestKey), "status", "SUCCEEDED"},
		{"del", e.ks.Tasks(stage)},
	} {
		if err := rdb.Do(ctx, cmd...).Err(); err == nil || !strings.Contains(err.Error(), "NOPERM") {
			t.Errorf("%v under the producer ACL: %v, want NOPERM", cmd, err)
		}
	}
}

// TestTenantCredentials: tenants that do not trust each other get one key prefix each, a
// consumer per prefix that accepts only its tenant (--tenants), and producer credentials on
// their own prefix (the documented producer line, for that prefix). Then the tenant comes from
// the credentials: acme's producer enqueues and awaits its own tasks; it cannot read beta's
// task or result streams, enqueue on beta's prefix, or write any result or dead-letter
// stream; a task it sends naming tenant beta, with beta's request key, is dead-lettered
// (unknown_tenant, and a FAILED event on acme's own result stream) and creates no flight
// anywhere; so beta's later task with that key runs its own model and gets its own result.
func TestTenantCredentials(t *testing.T) {
	stage := "interview-evaluation"
	pA, pB := redistest.Prefix(), redistest.Prefix()
	lineFor := func(user, pw, prefix string) string {
		return strings.Replace(producerACL(t, pw, prefix, stage), "user producer ", "user "+user+" ", 1)
	}
	eA, srv := newSecureE2E(t, pA, &redistest.Options{ACL: []string{
		lineFor("producer-acme", "pw-acme", pA), lineFor("producer-beta", "pw-beta", pB)}})
	eB := newE2EOn(t, srv.Client(), srv.URL(), pB)
	eB.config, eB.stages, eB.grace = eA.config, eA.stages, eA.grace
	eA.startWith("acme-c1", []string{"REDIS_URL=" + eA.url}, true, "--tenants", "acme")
	eB.startWith("beta-c1", []string{"REDIS_URL=" + eB.url}, true, "--tenants", "beta")

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	producer := func(user, pw string, e *e2e) (*redis.Client, *client.Client) {
		rdb := redis.NewClient(&redis.Options{Addr: srv.Addr(), Username: user, Password: pw})
		t.Cleanup(func() { _ = rdb.Close() })
		cl, err := client.New(client.Config{Client: rdb, Keyspace: e.ks})
		if err != nil {
			t.Fatal(err)
		}
		return rdb, cl
	}
	rdbA, acme := producer("producer-acme", "pw-acme", eA)
	_, beta := producer("producer-beta", "pw-beta", eB)

	// acme's own work.
	own := task("acme-1", stage, 1, 0)
	r, err := acme.Enqueue(ctx, own)
	if err != nil {
		t.Fatal(err)
	}
	if ev, err := acme.Await(ctx, r); err != nil || ev.Status != topics.StatusSucceeded {
		t.Fatalf("acme's own task: %+v, %v", ev, err)
	}

	// acme names tenant beta, with the request key beta will use and an input of its own.
	forged := task("forged-1", stage, 2, 0)
	forged.Tenant, forged.RequestKey = "beta", "q-7"
	fr, err := acme.Enqueue(ctx, forged)
	if err != nil {
		t.Fatal(err)
	}
	ev, err := acme.Await(ctx, fr)
	if err != nil || ev.Status != topics.StatusFailed || ev.ErrorCode != string(topics.ReasonUnknownTenant) {
		t.Fatalf("a task of acme's producer naming tenant beta: %+v, %v; want FAILED unknown_tenant", ev, err)
	}
	for _, ks := range []topics.Keyspace{eA.ks, eB.ks} {
		if n, err := srv.Client().Exists(ctx, ks.Flight(fr.RequestKey)).Result(); err != nil || n != 0 {
			t.Errorf("the forged task left a flight %s: %d, %v", ks.Flight(fr.RequestKey), n, err)
		}
	}

	// beta's task with that key runs its own model and gets its own result.
	mine := task("beta-1", stage, 3, 0)
	mine.Tenant, mine.RequestKey = "beta", "q-7"
	br, err := beta.Enqueue(ctx, mine)
	if err != nil {
		t.Fatal(err)
	}
	bev, err := beta.Await(ctx, br)
	if err != nil || bev.Status != topics.StatusSucceeded || bev.Shared != topics.SharedOwner {
		t.Fatalf("beta's task: %+v, %v; want its own model run (shared owner)", bev, err)
	}

	// What acme's credentials cannot do to beta's prefix, or to any result or dead-letter stream.
	for _, cmd := range [][]any{
		{"xadd", eB.ks.Tasks(stage), "*", topics.FieldPayload, "{}"},
		{"xread", "streams", eB.ks.Tasks(stage), "0"},
		{"xread", "streams", eB.ks.Results(stage), "0"},
		{"xadd", eB.ks.Results(stage), "*", topics.FieldPayload, "{}"},
		{"xadd", eA.ks.Results(stage), "*", topics.FieldPayload, "{}"},
		{"xadd", eA.ks.DLQ(stage), "*", topics.FieldPayload, "{}"},
		{"xadd", eB.ks.DLQ(stage), "*", topics.FieldPayload, "{}"},
		{"get", eB.ks.Flight(br.RequestKey)},
	} {
		if err := rdbA.Do(ctx, cmd...).Err(); err == nil || !strings.Contains(err.Error(), "NOPERM") {
			t.Errorf("%v with acme's producer credentials: %v, want NOPERM", cmd, err)
		}
	}
}
