package main_test

import (
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/flightdeck-ai/flightdeck/flight"
	"github.com/flightdeck-ai/flightdeck/internal/faults"
	"github.com/flightdeck-ai/flightdeck/internal/redisconn"
	"github.com/flightdeck-ai/flightdeck/topics"
	"github.com/redis/go-redis/v9"
)

// Process tests of the promises that depend on time (faults that last longer than a TTL or
// shorter than a lease, restarts, crashes between two writes). Each drives real consumer
// processes against a real redis-server.

// shortTTLs: an active flight's meta and waiters expire 4 s after it starts, a result lives
// 30 s.
const shortTTLs = `stages:
  interview-evaluation:
    heartbeatInterval: 250ms
    lease: 1500ms
    runningTTL: 3s
    failureTTL: 1s
    resultTTL: 30s
    parkCheck: 1s
    concurrency: 4
`

func (e *e2e) enqueue(tasks ...topics.Task) {
	e.t.Helper()
	for _, tk := range tasks {
		if _, err := e.w.EnqueueTask(e.ctx, tk); err != nil {
			e.t.Fatal(err)
		}
	}
}

// waitParked waits until key's flight has n parked tasks.
func (e *e2e) waitParked(key string, n int, timeout time.Duration) {
	e.t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		if m, err := e.coord.Get(e.ctx, key); err == nil && len(m.Parked) == n {
			return
		}
		if time.Now().After(deadline) {
			e.t.Fatalf("%d tasks not parked on %s", n, key)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func ids(prefix string, n int) map[string]bool {
	out := map[string]bool{}
	for i := range n {
		out[fmt.Sprint(prefix, i)] = true
	}
	return out
}

// expectAnswered fails unless every task in want has an event, all SUCCEEDED with one result.
func (e *e2e) expectAnswered(want map[string]bool, timeout time.Duration) map[string][]topics.Event {
	e.t.Helper()
	got := e.collect([]string{"interview-evaluation"}, want, timeout)
	results := map[string]bool{}
	for id := range want {
		evs := got[id]
		if len(evs) == 0 {
			e.t.Errorf("task %s got no terminal event", id)
			continue
		}
		if evs[0].Status != topics.StatusSucceeded {
			e.t.Errorf("task %s: %s %s %s", id, evs[0].Status, evs[0].ErrorCode, evs[0].Error)
		}
		results[string(evs[0].Result)] = true
	}
	if len(results) > 1 {
		e.t.Errorf("one key, %d different results", len(results))
	}
	return got
}

// TestParkedTasksOutliveEveryTTL: followers parked on a flight whose owner dies (SIGKILL, or
// SIGTERM with a short grace) are answered although no consumer runs for longer than the
// flight's meta and waiter record live; the model runs once more at most (the takeover of a
// lapsed owner).
func TestParkedTasksOutliveEveryTTL(t *testing.T) {
	for _, sig := range []syscall.Signal{syscall.SIGKILL, syscall.SIGTERM} {
		t.Run(sig.String(), func(t *testing.T) {
			e := newE2E(t)
			e.stages = "interview-evaluation"
			cfg := e.stageConfig(shortTTLs)
			a := e.startConfig("a", cfg, "--grace", "300ms")
			owner := task("p0", "interview-evaluation", 1, 2500)
			e.enqueue(owner)
			key := keyOf(t, owner)
			e.waitOwned([]string{key}, "a", 10*time.Second)
			e.enqueue(task("p1", "interview-evaluation", 1, 2500), task("p2", "interview-evaluation", 1, 2500),
				task("p3", "interview-evaluation", 1, 2500))
			e.waitParked(key, 3, 10*time.Second)
			if err := a.cmd.Process.Signal(sig); err != nil {
				t.Fatal(err)
			}
			<-a.done
			// Nobody runs until the flight's records are gone (runningTTL + failureTTL).
			deadline := time.Now().Add(10 * time.Second)
			for e.rdb.Exists(e.ctx, e.ks.Flight(key), e.ks.Waiters(key)).Val() > 0 {
				if time.Now().After(deadline) {
					t.Fatal("the flight's records did not expire")
				}
				time.Sleep(100 * time.Millisecond)
			}
			time.Sleep(500 * time.Millisecond)
			b := e.startConfig("b", cfg)
			e.expectAnswered(ids("p", 4), 30*time.Second)
			if n := b.modelCalls(t); n > 1 {
				t.Errorf("b ran the model %d times, want at most 1 (a's run was lost with it)", n)
			}
			e.expectDrained(10 * time.Second)
		})
	}
}

// expectDrained fails unless no task entry is left pending (parked or held) within timeout.
func (e *e2e) expectDrained(timeout time.Duration) {
	e.t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		p, err := e.rdb.XPending(e.ctx, e.ks.Tasks("interview-evaluation"), topics.ConsumerGroup).Result()
		if err == nil && p.Count == 0 {
			return
		}
		if time.Now().After(deadline) {
			e.t.Errorf("entries left pending: %+v (%v)", p, err)
			return
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// TestVanishedFlightMidRun: the meta and waiters of a running flight disappear (lost writes,
// eviction): the owner writes the flight back, its task and the parked one are answered, and
// the model runs once.
func TestVanishedFlightMidRun(t *testing.T) {
	e := newE2E(t)
	e.stages = "interview-evaluation"
	cfg := e.stageConfig(shortTTLs)
	a := e.startConfig("a", cfg)
	owner := task("v0", "interview-evaluation", 2, 2000)
	e.enqueue(owner)
	key := keyOf(t, owner)
	e.waitOwned([]string{key}, "a", 10*time.Second)
	e.enqueue(task("v1", "interview-evaluation", 2, 2000))
	e.waitParked(key, 1, 10*time.Second)
	if err := e.rdb.Del(e.ctx, e.ks.Flight(key), e.ks.Waiters(key)).Err(); err != nil {
		t.Fatal(err)
	}
	e.expectAnswered(ids("v", 2), 20*time.Second)
	if n := a.modelCalls(t); n != 1 {
		t.Errorf("model ran %d times, want 1", n)
	}
	e.expectDrained(10 * time.Second)
}

// TestVanishedFlightPausedOwner: the record and waiters of a running flight disappear while
// its owner is paused for less than its lease. Another consumer that checks the parked task
// meanwhile finds no flight, and must not run the task before the owner could have written
// the flight back: the owner resumes, writes it back, and the model runs once.
func TestVanishedFlightPausedOwner(t *testing.T) {
	e := newE2E(t)
	e.stages = "interview-evaluation"
	cfg := e.stageConfig(`stages:
  interview-evaluation:
    heartbeatInterval: 250ms
    lease: 5s
    runningTTL: 10s
    failureTTL: 1s
    resultTTL: 30s
    parkCheck: 300ms
`)
	a := e.startConfig("a", cfg)
	// A long run: b starts and w1 parks well before it ends.
	owner := task("w0", "interview-evaluation", 5, 5000)
	e.enqueue(owner)
	key := keyOf(t, owner)
	e.waitOwned([]string{key}, "a", 10*time.Second)
	b := e.startConfig("b", cfg)
	e.enqueue(task("w1", "interview-evaluation", 5, 5000))
	e.waitParked(key, 1, 10*time.Second)
	if err := a.cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	if err := e.rdb.Del(e.ctx, e.ks.Flight(key), e.ks.Waiters(key)).Err(); err != nil {
		t.Fatal(err)
	}
	// b checks the parked task several times (parkCheck 300ms) while a is paused.
	time.Sleep(2 * time.Second)
	if err := a.cmd.Process.Signal(syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	got := e.expectAnswered(ids("w", 2), 30*time.Second)
	if n := a.modelCalls(t) + b.modelCalls(t); n != 1 {
		t.Errorf("model ran %d times, want 1", n)
	}
	if ev := got["w0"]; len(ev) != 1 || ev[0].Consumer != "a" || ev[0].Attempts != 1 {
		t.Errorf("owner's events %+v, want a's result on attempt 1", ev)
	}
	e.expectDrained(10 * time.Second)
}

// TestVanishedOutcomeAcrossAFleet: a task is parked, but its flight's record and waiters
// are gone and no owner holds an entry (lost writes, an eviction after the owner finished) on
// a stage run by four consumers, whose claim loops all check the parked entry: one of
// them runs it once the flight has been gone for a lease, and it is answered.
func TestVanishedOutcomeAcrossAFleet(t *testing.T) {
	e := newE2E(t)
	e.stages = "interview-evaluation"
	cfg := e.stageConfig(`stages:
  interview-evaluation:
    heartbeatInterval: 250ms
    lease: 1s
    runningTTL: 6s
    failureTTL: 1s
    resultTTL: 30s
    parkCheck: 2s
`)
	// The parked entry as a lost flight leaves it: pending under the parking consumer.
	tasks := e.ks.Tasks("interview-evaluation")
	if err := e.rdb.XGroupCreateMkStream(e.ctx, tasks, topics.ConsumerGroup, "$").Err(); err != nil {
		t.Fatal(err)
	}
	e.enqueue(task("x1", "interview-evaluation", 6, 0))
	if err := e.rdb.XReadGroup(e.ctx, &redis.XReadGroupArgs{Group: topics.ConsumerGroup,
		Consumer: topics.ParkingConsumer, Streams: []string{tasks, ">"}, Count: 1}).Err(); err != nil {
		t.Fatal(err)
	}
	var procs []*proc
	for _, name := range []string{"a", "b", "c", "d"} {
		procs = append(procs, e.startConfig(name, cfg))
	}
	got := e.expectAnswered(map[string]bool{"x1": true}, 30*time.Second)
	if evs := got["x1"]; len(evs) != 1 || evs[0].Status != topics.StatusSucceeded {
		t.Fatalf("x1's events %+v, want one SUCCEEDED", evs)
	}
	n := 0
	for _, p := range procs {
		n += p.modelCalls(t)
	}
	if n != 1 {
		t.Errorf("model ran %d times, want 1", n)
	}
	e.expectDrained(10 * time.Second)
}

// TestRollingDeployKeepsTheOwnersPolicy: during a rolling deploy a consumer configured with a
// 1 s lease runs beside an owner that heartbeats every 2 s under a 5 s lease: it never takes
// the live owner's flight over; its duplicate follows; the model runs once for the key.
func TestRollingDeployKeepsTheOwnersPolicy(t *testing.T) {
	e := newE2E(t)
	e.stages = "interview-evaluation"
	old := e.stageConfig(`stages:
  interview-evaluation:
    heartbeatInterval: 2s
    lease: 5s
    concurrency: 1
`)
	a := e.startConfig("old", old)
	owner := task("r0", "interview-evaluation", 3, 6000)
	e.enqueue(owner)
	key := keyOf(t, owner)
	e.waitOwned([]string{key}, "old", 10*time.Second)
	b := e.startConfig("new", e.stageConfig(`stages:
  interview-evaluation:
    heartbeatInterval: 250ms
    lease: 1s
`))
	// Two other tasks first, so that the duplicate below reaches the new consumer whatever
	// the old one holds.
	e.enqueue(task("f0", "interview-evaluation", 30, 500), task("f1", "interview-evaluation", 31, 500))
	// Duplicates spread over a heartbeat interval: some arrive when the owner's last
	// heartbeat is older than the new consumer's 1 s lease.
	for i := 1; i <= 4; i++ {
		time.Sleep(500 * time.Millisecond)
		e.enqueue(task(fmt.Sprint("r", i), "interview-evaluation", 3, 6000))
	}
	got := e.expectAnswered(ids("r", 5), 30*time.Second)
	e.collect([]string{"interview-evaluation"}, ids("f", 2), 30*time.Second)
	if n := a.modelCalls(t) + b.modelCalls(t); n != 3 {
		t.Errorf("model ran %d times, want 3 (r0's key once, f0, f1)", n)
	}
	if ev := got["r0"]; len(ev) > 0 && (ev[0].Attempts != 1 || ev[0].Consumer != "old") {
		t.Errorf("owner's event %+v, want old's result on attempt 1", ev[0])
	}
}

// TestPauseShorterThanLease: an owner paused (SIGSTOP) for less than its lease while another
// consumer is idle keeps its flight: nobody claims its entry or runs the model again.
func TestPauseShorterThanLease(t *testing.T) {
	e := newE2E(t)
	e.stages = "interview-evaluation"
	cfg := e.stageConfig(`stages:
  interview-evaluation:
    heartbeatInterval: 500ms
    lease: 3s
`)
	a := e.startConfig("a", cfg)
	owner := task("s0", "interview-evaluation", 4, 4000)
	e.enqueue(owner)
	e.waitOwned([]string{keyOf(t, owner)}, "a", 10*time.Second)
	b := e.startConfig("b", cfg)
	time.Sleep(time.Second)
	if err := a.cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	time.Sleep(2 * time.Second)
	if err := a.cmd.Process.Signal(syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	got := e.expectAnswered(ids("s", 1), 20*time.Second)
	if n := b.modelCalls(t); n != 0 {
		t.Errorf("b ran the model %d times during a pause shorter than the lease", n)
	}
	if ev := got["s0"]; len(ev) != 1 || ev[0].Consumer != "a" || ev[0].Attempts != 1 {
		t.Errorf("events %+v, want a's result on attempt 1", ev)
	}
}

// TestZombieDoesNotRerunAnAnsweredTask: an owner paused past its lease is taken over; the new
// owner answers the paused owner's task too, and the flight's records expire before the paused
// owner wakes up. Its refused result must not make it run the model again for a task that is
// answered already (its entry is no longer pending).
func TestZombieDoesNotRerunAnAnsweredTask(t *testing.T) {
	e := newE2E(t)
	e.stages = "interview-evaluation"
	cfg := e.stageConfig(`stages:
  interview-evaluation:
    heartbeatInterval: 250ms
    lease: 1500ms
    resultTTL: 1s
`)
	a := e.startConfig("a", cfg)
	tk := task("z0", "interview-evaluation", 7, 2500)
	e.enqueue(tk)
	e.waitOwned([]string{keyOf(t, tk)}, "a", 10*time.Second)
	if err := a.cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	b := e.startConfig("b", cfg)
	got := e.expectAnswered(ids("z", 1), 20*time.Second)
	if ev := got["z0"]; len(ev) != 1 || ev[0].Consumer != "b" {
		t.Fatalf("events %+v, want b's answer", ev)
	}
	// Let the result and the flight's meta expire, then wake the paused owner up.
	time.Sleep(2 * time.Second)
	if m, err := e.coord.Get(e.ctx, keyOf(t, tk)); err == nil {
		t.Fatalf("the flight's meta outlived its result TTL: %+v", m)
	}
	if err := a.cmd.Process.Signal(syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	time.Sleep(5 * time.Second)
	if n := a.modelCalls(t); n != 1 {
		t.Errorf("the woken owner ran the model %d times, want its first call only", n)
	}
	if n := b.modelCalls(t); n != 1 {
		t.Errorf("b ran the model %d times, want 1", n)
	}
	if evs := e.collect([]string{"interview-evaluation"}, ids("z", 1), time.Second); len(evs["z0"]) != 1 {
		t.Errorf("task z0 got %d events, want 1: %+v", len(evs["z0"]), evs["z0"])
	}
	e.expectDrained(10 * time.Second)
}

// TestShutdownSpendsNoAttempt: SIGTERM during the last attempt hands the flight over without
// spending it: a healthy peer runs it and the task succeeds.
func TestShutdownSpendsNoAttempt(t *testing.T) {
	e := newE2E(t)
	e.stages = "interview-evaluation"
	cfg := e.stageConfig(`stages:
  interview-evaluation:
    heartbeatInterval: 250ms
    lease: 1500ms
    maxAttempts: 1
`)
	a := e.startConfig("leaving", cfg, "--grace", "300ms")
	owner := task("h0", "interview-evaluation", 5, 3000)
	e.enqueue(owner)
	e.waitOwned([]string{keyOf(t, owner)}, "leaving", 10*time.Second)
	e.startConfig("staying", cfg)
	if err := a.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	got := e.expectAnswered(ids("h", 1), 20*time.Second)
	if ev := got["h0"]; len(ev) > 0 && (ev[0].Consumer != "staying" || ev[0].Attempts != 1) {
		t.Errorf("event %+v, want staying's result on attempt 1", ev[0])
	}
}

// TestSpoolSurvivesRestart: the model answered while Redis was unreachable; the consumer spooled
// the result and died. A consumer started later under another name, on the same spool
// directory, writes the result back: the task is answered and the model is not run again.
func TestSpoolSurvivesRestart(t *testing.T) {
	e := newE2E(t)
	if e.srv == nil {
		t.Skip("needs a private redis-server (REDIS_URL is set)")
	}
	e.stages = "interview-evaluation"
	// The model: an OpenAI-compatible endpoint whose first answer waits until the test has
	// paused Redis, so that the result arrives when Redis cannot take it.
	var calls atomic.Int64
	started, release := make(chan struct{}), make(chan struct{})
	ai := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if calls.Add(1) == 1 {
			close(started)
			<-release
		}
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprint(w, `{"model":"fake-1","choices":[{"message":{"role":"assistant","content":"the only answer"},"finish_reason":"stop"}]}`)
	}))
	defer ai.Close()
	env := []string{"REDIS_URL=" + e.url, "OPENAI_BASE_URL=" + ai.URL, "OPENAI_API_KEY=sk-test", "OPENAI_MODEL=fake-1"}
	cfg := e.stageConfig(`stages:
  interview-evaluation:
    model: openai
    heartbeatInterval: 200ms
    lease: 1s
`)
	a := e.startWith("host-1", env, true, "--config", cfg)
	e.enqueue(task("w0", "interview-evaluation", 6, 0))
	<-started
	e.srv.Pause() // Redis stops answering while the model works
	close(release)
	spooled := func() bool {
		files, _ := filepath.Glob(filepath.Join(flight.DeploymentSpoolDir(e.spool, e.prefix, redisconn.Deployment(e.url)), "spool-host-1.jsonl"))
		for _, f := range files {
			if b, err := os.ReadFile(f); err == nil && strings.Contains(string(b), `"key"`) {
				return true
			}
		}
		return false
	}
	deadline := time.Now().Add(30 * time.Second)
	for !spooled() {
		if time.Now().After(deadline) {
			e.srv.Resume()
			t.Fatal("the result was not spooled")
		}
		time.Sleep(50 * time.Millisecond)
	}
	_ = a.cmd.Process.Signal(syscall.SIGKILL)
	<-a.done
	e.srv.Resume()
	e.startWith("host-2", env, true, "--config", cfg)
	got := e.expectAnswered(ids("w", 1), 30*time.Second)
	if evs := got["w0"]; len(evs) == 0 || !strings.Contains(string(evs[0].Result), "the only answer") {
		t.Errorf("w0: %+v, want the spooled answer", evs)
	}
	if n := calls.Load(); n != 1 {
		t.Errorf("the model was called %d times; the spooled result should answer the task", n)
	}
	if left, _ := filepath.Glob(filepath.Join(flight.DeploymentSpoolDir(e.spool, e.prefix, redisconn.Deployment(e.url)), "spool-host-1.*")); len(left) != 0 {
		t.Errorf("host-1's spool files left behind: %v", left)
	}
}

// TestCrashBetweenScriptAndAnswers: consumers that write answers after the scripts (Redis
// Cluster's way, forced here) die right after a complete; the tasks it would have answered
// are answered by the next caller or by a parked-entry check, and none runs the model again.
func TestCrashBetweenScriptAndAnswers(t *testing.T) {
	e := newE2E(t)
	e.stages = "interview-evaluation"
	cfg := e.stageConfig(shortTTLs)
	crash := []string{"REDIS_URL=" + e.url, "FLIGHTDECK_FAULT_ANSWER_AFTER_SCRIPT=1", "FLIGHTDECK_FAULT_CRASH_AFTER=complete:1"}
	a := e.startWith("a", crash, true, "--config", cfg)
	owner := task("x0", "interview-evaluation", 7, 1000)
	e.enqueue(owner)
	key := keyOf(t, owner)
	e.waitOwned([]string{key}, "a", 10*time.Second)
	e.enqueue(task("x1", "interview-evaluation", 7, 1000), task("x2", "interview-evaluation", 7, 1000))
	e.waitParked(key, 2, 10*time.Second)
	select {
	case <-a.done:
	case <-time.After(10 * time.Second):
		t.Fatal("the consumer did not crash after its complete script")
	}
	if code := a.cmd.ProcessState.ExitCode(); code != 86 {
		t.Fatalf("a exited %d, want the fault's 86", code)
	}
	if m, err := e.coord.Get(e.ctx, key); err != nil || m.Status != flight.StatusSucceeded || len(m.Parked) != 2 {
		t.Fatalf("after the crash: %+v %v (want SUCCEEDED with the parked tasks unanswered)", m, err)
	}
	b := e.startConfig("b", cfg)
	e.expectAnswered(ids("x", 3), 20*time.Second)
	if n := b.modelCalls(t); n != 0 {
		t.Errorf("b ran the model %d times", n)
	}
	e.expectDrained(10 * time.Second)
}

// TestCancelledByACrashedCanceller: a canceller that dies right after the cancel script (on the
// Cluster answer path) leaves the parked tasks unanswered; a consumer's parked-entry check
// answers them CANCELLED, and the owner answers its own task.
func TestCancelledByACrashedCanceller(t *testing.T) {
	e := newE2E(t)
	e.stages = "interview-evaluation"
	cfg := e.stageConfig(shortTTLs)
	a := e.startConfig("a", cfg)
	owner := task("c0", "interview-evaluation", 8, 30000)
	e.enqueue(owner)
	key := keyOf(t, owner)
	e.waitOwned([]string{key}, "a", 10*time.Second)
	e.enqueue(task("c1", "interview-evaluation", 8, 30000))
	e.waitParked(key, 1, 10*time.Second)
	opt, err := redis.ParseURL(e.url)
	if err != nil {
		t.Fatal(err)
	}
	crashing := redis.NewClient(opt)
	defer crashing.Close()
	crashing.AddHook(faults.AfterScripts(func(string) { panic(errCrash) }))
	coord, err := flight.NewCoordinator(flight.Config{Client: crashing, Keyspace: e.ks, AnswerAfterScript: true})
	if err != nil {
		t.Fatal(err)
	}
	func() {
		defer func() {
			if r := recover(); r != errCrash {
				t.Fatalf("recovered %v", r)
			}
		}()
		_, _ = coord.Cancel(e.ctx, key, "interview closed", flight.CancelParams{Stage: "interview-evaluation"})
	}()
	got := e.collect([]string{"interview-evaluation"}, ids("c", 2), 20*time.Second)
	for id := range ids("c", 2) {
		if evs := got[id]; len(evs) == 0 || evs[0].Status != topics.StatusCancelled || evs[0].Error != "interview closed" {
			t.Errorf("%s: %+v", id, evs)
		}
	}
	// The owner's task is answered as the owner (by its own acquire, after the cancel aborted
	// its run); the parked one as a follower.
	if evs := got["c0"]; len(evs) > 0 && evs[0].Shared != topics.SharedOwner {
		t.Errorf("the owner's task was answered as %q, want owner", evs[0].Shared)
	}
	if evs := got["c1"]; len(evs) > 0 && evs[0].Shared != topics.SharedFollower {
		t.Errorf("the parked task was answered as %q, want follower", evs[0].Shared)
	}
	// The consumer counts the owner's task as the owner's too. It counts once the acquire
	// that wrote the event has returned, a moment after the event is readable.
	const st = `stage="interview-evaluation"`
	const owned = `flightdeck_task_events_total{outcome="owner_CANCELLED",` + st + `}`
	m := a.scrape(t)
	for deadline := time.Now().Add(5 * time.Second); m[owned] == 0 && time.Now().Before(deadline); m = a.scrape(t) {
		time.Sleep(20 * time.Millisecond)
	}
	if n := m[owned]; n != 1 {
		t.Errorf("owner_CANCELLED counted %v times, want 1 (metrics %v)", n, m)
	}
	e.expectDrained(10 * time.Second)
}

var errCrash = errors.New("simulated crash")

// TestInvalidPrefixRefused: a prefix with braces would split one flight over several Redis
// Cluster slots: the consumer refuses it at start with a clear error.
func TestInvalidPrefixRefused(t *testing.T) {
	e := newE2E(t)
	p := e.startWith("bad", []string{"REDIS_URL=" + e.url}, false, "--prefix", "ai{x}")
	select {
	case <-p.done:
	case <-time.After(10 * time.Second):
		t.Fatal("the consumer started with a prefix holding braces")
	}
	b, _ := os.ReadFile(p.logPath)
	if p.cmd.ProcessState.ExitCode() == 0 || !strings.Contains(string(b), "prefix") {
		t.Errorf("exit %d, output %s", p.cmd.ProcessState.ExitCode(), b)
	}
}
