package main_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/flightdeck-ai/flightdeck/flight"
	"github.com/flightdeck-ai/flightdeck/internal/testkit/openaitest"
	"github.com/flightdeck-ai/flightdeck/internal/testkit/redistest"
	"github.com/flightdeck-ai/flightdeck/topics"
	"github.com/redis/go-redis/v9"
)

const limitedStage = "interview-evaluation"

// limited starts n stock consumers whose evaluation stage calls srv through the limiter the
// stage file's limiters and stage fields set.
func (e *e2e) limited(srv *openaitest.Server, n int, limiters, stage string, extra ...string) []*proc {
	e.t.Helper()
	e.stages = limitedStage
	cfg := e.stageConfig("limiters:\n" + limiters + "stages:\n  " + limitedStage + ":\n    model: openai\n    limiter: main\n" + stage)
	var ps []*proc
	for i := range n {
		ps = append(ps, e.startWith("c"+strconv.Itoa(i+1), []string{"REDIS_URL=" + e.url, "OPENAI_BASE_URL=" + srv.BaseURL(),
			"OPENAI_MODEL=test-model"}, true, append([]string{"--config", cfg}, extra...)...))
	}
	return ps
}

// enqueueLimited enqueues tasks ids with their own keys (the id is the prompt), or key's.
func (e *e2e) enqueueLimited(key string, ids ...string) map[string]bool {
	e.t.Helper()
	want := map[string]bool{}
	for _, id := range ids {
		k := key
		if k == "" {
			k = id
		}
		if _, err := e.w.EnqueueTask(e.ctx, topics.Task{TaskID: id, Stage: limitedStage, Tenant: "acme",
			Input: json.RawMessage(`{"prompt":"` + k + `"}`)}); err != nil {
			e.t.Fatal(err)
		}
		want[id] = true
	}
	return want
}

func taskIDs(prefix string, n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = prefix + strconv.Itoa(i)
	}
	return out
}

func (e *e2e) allSucceeded(got map[string][]topics.Event, want map[string]bool) {
	e.t.Helper()
	for id := range want {
		if evs := got[id]; len(evs) == 0 || evs[0].Status != topics.StatusSucceeded {
			e.t.Fatalf("task %s: %+v", id, evs)
		}
	}
}

// TestLimiterHeldFleetWide: two consumers share one limiter of 120 requests a minute (a burst
// of 10, then 2 a second) in front of a provider with the same limit: 20 tasks get no 429,
// the calls after the burst come at the limiter's pace across both processes, and each
// owner's event carries the provider's usage.
func TestLimiterHeldFleetWide(t *testing.T) {
	srv := openaitest.Start(t, openaitest.Config{RequestsPerMinute: 120, Burst: 5 * time.Second})
	e := newE2E(t)
	e.limited(srv, 2, "  main:\n    requestsPerMinute: 120\n    burst: 5s\n", "")
	start := time.Now()
	want := e.enqueueLimited("", taskIDs("t", 20)...)
	got := e.collect([]string{limitedStage}, want, 30*time.Second)
	e.allSucceeded(got, want)
	requests, limited, _ := srv.Stats()
	if limited != 0 || requests != 20 {
		t.Errorf("the provider saw %d requests and answered %d with 429, want 20 and none", requests, limited)
	}
	if d := time.Since(start); d < 4*time.Second {
		t.Errorf("20 calls in %v: faster than 10 at once and 2 a second", d)
	}
	for id := range want {
		if u := got[id][0].Usage; u == nil || u.CompletionTokens != 50 || u.PromptTokens == 0 || u.Model != "test-model" {
			t.Errorf("task %s: usage %+v, want the provider's", id, u)
		}
	}
}

// TestLimiterRefundsSmallerUsage: a limiter of 6,000 tokens a minute (1,000 at once) with
// calls that reserve about 900 but use about 60: each call's refund lets the next one go
// within a second, so 6 tasks finish in a few seconds instead of a wait of 9 s each.
func TestLimiterRefundsSmallerUsage(t *testing.T) {
	srv := openaitest.Start(t, openaitest.Config{CompletionTokens: 50})
	e := newE2E(t)
	e.limited(srv, 1, "  main:\n    tokensPerMinute: 6000\n", "    estimateTokens: 900\n")
	start := time.Now()
	want := e.enqueueLimited("", taskIDs("r", 6)...)
	got := e.collect([]string{limitedStage}, want, 30*time.Second)
	e.allSucceeded(got, want)
	if d := time.Since(start); d > 8*time.Second {
		t.Errorf("6 tasks took %v: the reservations were not refunded", d)
	}
}

// TestLimiter429HoldsTheLimiter: the provider answers the first call with 429 and
// Retry-After 2: no call of any key reaches it for those 2 s, and every task succeeds.
func TestLimiter429HoldsTheLimiter(t *testing.T) {
	srv := openaitest.Start(t, openaitest.Config{Hook: func(n int, w http.ResponseWriter, _ *http.Request) bool {
		if n != 1 {
			return false
		}
		w.Header().Set("Retry-After", "2")
		w.WriteHeader(http.StatusTooManyRequests)
		fmt.Fprint(w, `{"error":{"message":"slow down","code":"rate_limit_exceeded"}}`)
		return true
	}})
	e := newE2E(t)
	e.limited(srv, 2, "  main:\n    requestsPerMinute: 6000\n", "")
	want := e.enqueueLimited("", "first")
	hold := e.ks.LimiterKeys("main")[0]
	deadline := time.Now().Add(10 * time.Second)
	for e.rdb.HExists(e.ctx, hold, "hold").Val() == false {
		if time.Now().After(deadline) {
			t.Fatal("the 429 did not hold the limiter")
		}
		time.Sleep(10 * time.Millisecond)
	}
	held := time.Now()
	for id := range e.enqueueLimited("", taskIDs("next", 4)...) {
		want[id] = true
	}
	got := e.collect([]string{limitedStage}, want, 30*time.Second)
	e.allSucceeded(got, want)
	for _, at := range srv.Times() {
		if at.Before(held.Add(1500 * time.Millisecond)) {
			t.Errorf("a call reached the provider %v after the 429's hold began", at.Sub(held))
		}
	}
}

// TestLimiterWaitHoldsNoHandler: with one handler and a limiter of one call per 5 s, a task
// the limiter makes wait does not hold the handler: a duplicate of a finished key behind it
// is answered at once, and the waiting task runs when the budget is back.
func TestLimiterWaitHoldsNoHandler(t *testing.T) {
	srv := openaitest.Start(t, openaitest.Config{})
	e := newE2E(t)
	e.limited(srv, 1, "  main:\n    requestsPerMinute: 12\n    burst: 5s\n", "    concurrency: 1\n")
	first := e.enqueueLimited("a", "a1")
	e.allSucceeded(e.collect([]string{limitedStage}, first, 20*time.Second), first)
	waiting := e.enqueueLimited("b", "b1")
	time.Sleep(500 * time.Millisecond) // b1 is read and made to wait
	start := time.Now()
	hit := e.enqueueLimited("a", "a2")
	got := e.collect([]string{limitedStage}, hit, 20*time.Second)
	e.allSucceeded(got, hit)
	if d := time.Since(start); d > 2*time.Second || got["a2"][0].Shared != topics.SharedHit {
		t.Errorf("the duplicate was answered after %v as %q: the waiting task held the handler", d, got["a2"][0].Shared)
	}
	got = e.collect([]string{limitedStage}, waiting, 20*time.Second)
	e.allSucceeded(got, waiting)
	if requests, _, _ := srv.Stats(); requests != 2 {
		t.Errorf("%d calls, want 2", requests)
	}
}

// TestLimiterCrashFreesItsSlot: a consumer SIGKILLed in the middle of the only call a
// limiter of concurrency 1 allows leaves its reservation behind: it expires after the
// stage's runningTTL, and the other consumer takes the flight over and calls.
func TestLimiterCrashFreesItsSlot(t *testing.T) {
	srv := openaitest.Start(t, openaitest.Config{Hook: func(n int, _ http.ResponseWriter, r *http.Request) bool {
		if n == 1 {
			<-r.Context().Done() // the first call hangs until its consumer dies
			return true
		}
		return false
	}})
	e := newE2E(t)
	ps := e.limited(srv, 2, "  main:\n    concurrency: 1\n",
		"    lease: 2s\n    heartbeatInterval: 500ms\n    runningTTL: 4s\n")
	want := e.enqueueLimited("", "k1")
	deadline := time.Now().Add(10 * time.Second)
	for {
		if n, _, _ := srv.Stats(); n >= 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("no call reached the provider")
		}
		time.Sleep(10 * time.Millisecond)
	}
	// Kill whichever consumer makes the call: the one whose model calls counter moved.
	for _, p := range ps {
		if p.modelCalls(t) == 1 {
			_ = p.cmd.Process.Signal(syscall.SIGKILL)
		}
	}
	got := e.collect([]string{limitedStage}, want, 30*time.Second)
	e.allSucceeded(got, want)
	if n, _, _ := srv.Stats(); n != 2 {
		t.Errorf("%d calls, want 2 (the killed one and the takeover)", n)
	}
}

// TestLimiterUnderLeastACL: every path of the limiter functions (take, a refusal, the fair
// shares, a settle with usage, the provider's remaining budget and a 429) runs under exactly
// the consumer ACL line docs/SECURITY.md gives.
func TestLimiterUnderLeastACL(t *testing.T) {
	prefix := redistest.Prefix()
	pw, opsPW := secret(t, "pw-"), secret(t, "ops-")
	e, srv := newSecureE2E(t, prefix, &redistest.Options{ACL: []string{leastACL(t, pw, prefix), operatorACL(t, opsPW)}})
	loadFunctions(t, fmt.Sprintf("redis://flightdeck-ops:%s@%s/0", opsPW, srv.Addr()))
	c := redis.NewClient(&redis.Options{Addr: srv.Addr(), Username: "flightdeck", Password: pw})
	defer c.Close()
	coord, err := flight.NewCoordinator(flight.Config{Client: c, Keyspace: topics.Keyspace{Prefix: prefix}})
	if err != nil {
		t.Fatal(err)
	}
	lim, err := coord.NewLimiter("acl", flight.Limit{RequestsPerMinute: 6, TokensPerMinute: 600, Concurrency: 1})
	if err != nil {
		t.Fatal(err)
	}
	res, th, err := lim.Take(e.ctx, "acme", 10, time.Minute)
	if err != nil || th.Wait != 0 {
		t.Fatalf("take: %+v %v", th, err)
	}
	if _, th, err := lim.Take(e.ctx, "beta", 10, time.Minute); err != nil || th.Wait == 0 {
		t.Fatalf("a second call at concurrency 1: %+v %v", th, err)
	}
	if err := lim.Settle(e.ctx, res, &flight.Usage{PromptTokens: 3, CompletionTokens: 2}, flight.Remaining{Requests: 5, Tokens: 500}, flight.CallOK, 0); err != nil {
		t.Fatal(err)
	}
	res, _, _ = lim.Take(e.ctx, "beta", 10, time.Minute)
	if err := lim.Settle(e.ctx, res, nil, flight.Remaining{Requests: -1, Tokens: -1}, flight.CallLimited, time.Second); err != nil {
		t.Fatal(err)
	}
	if d := aclDenials(t, e.rdb, "flightdeck"); len(d) > 0 {
		t.Errorf("Redis refused the documented ACL user (add the commands to docs/SECURITY.md):\n%s", strings.Join(d, "\n"))
	}
}

// TestLimiterFairAcrossTenants: on a limiter of 600 calls a minute, tenant A enqueues 5,000
// tasks and then tenant B 50. Once the consumers have read through A's entries to B's, B's
// tasks finish within twice the time they take alone: they are not behind A's backlog.
func TestLimiterFairAcrossTenants(t *testing.T) {
	srv := openaitest.Start(t, openaitest.Config{})
	e := newE2E(t)
	e.limited(srv, 2, "  main:\n    requestsPerMinute: 600\n    burst: 1s\n", "")
	enqueue := func(tenant string, n int) map[string]bool {
		want := map[string]bool{}
		ts := make([]topics.Task, n)
		for i := range ts {
			id := tenant + strconv.Itoa(i)
			ts[i] = topics.Task{TaskID: id, Stage: limitedStage, Tenant: tenant, Input: json.RawMessage(`{"prompt":"` + id + `"}`)}
			want[id] = true
		}
		if _, err := e.w.EnqueueTasks(e.ctx, ts); err != nil {
			t.Fatal(err)
		}
		return want
	}
	start := time.Now()
	want := enqueue("solo", 50)
	e.allSucceeded(e.collect([]string{limitedStage}, want, time.Minute), want)
	alone := time.Since(start)
	time.Sleep(6 * time.Second) // solo leaves the limiter's active tenants, and its budget refills

	enqueue("a", 5000)
	start = time.Now()
	want = enqueue("b", 50)
	info, err := e.rdb.XInfoStream(e.ctx, e.ks.Tasks(limitedStage)).Result()
	if err != nil {
		t.Fatal(err)
	}
	readAll := make(chan time.Duration, 1)
	go func() { // when the consumers have read every entry up to B's last
		for time.Since(start) < time.Minute {
			if g, err := e.rdb.XInfoGroups(e.ctx, e.ks.Tasks(limitedStage)).Result(); err == nil && len(g) > 0 && g[0].EntriesRead >= info.EntriesAdded {
				readAll <- time.Since(start)
				return
			}
			time.Sleep(20 * time.Millisecond)
		}
		readAll <- 0
	}()
	e.allSucceeded(e.collect([]string{limitedStage}, want, 2*time.Minute), want)
	shared := time.Since(start)
	read := <-readAll
	t.Logf("B's 50 tasks: %v alone; %v behind A's 5,000, of which %v reading through A's entries", alone, shared, read)
	if read == 0 || shared-read > 2*alone {
		t.Errorf("B's tasks took %v after the consumers reached them, more than twice the %v they take alone", shared-read, alone)
	}
}
