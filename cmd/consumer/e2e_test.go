package main_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/flightdeck-ai/flightdeck/flight"
	"github.com/flightdeck-ai/flightdeck/handlers"
	"github.com/flightdeck-ai/flightdeck/internal/broker"
	"github.com/flightdeck-ai/flightdeck/internal/testkit/redistest"
	"github.com/flightdeck-ai/flightdeck/topics"
)

// binary is the consumer built once for all tests of this package.
var binary string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "flightdeck-e2e")
	if err != nil {
		panic(err)
	}
	binary = filepath.Join(dir, "consumer")
	build := exec.Command("go", "build", "-race", "-o", binary, ".")
	build.Stdout, build.Stderr = os.Stdout, os.Stderr
	if err := build.Run(); err != nil {
		fmt.Fprintln(os.Stderr, "build consumer:", err)
		os.Exit(1)
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// Stage timings for the process tests: a short lease so that takeovers happen in seconds.
const (
	testLease     = 1500 * time.Millisecond
	claimInterval = 200 * time.Millisecond
)

const stageYAML = `stages:
  interview-evaluation:
    heartbeatInterval: 250ms
    lease: 1500ms
    concurrency: 4
  interview-followup:
    heartbeatInterval: 250ms
    lease: 1500ms
    concurrency: 4
`

type e2e struct {
	t      testing.TB
	ctx    context.Context
	rdb    redis.UniversalClient
	url    string
	prefix string
	ks     topics.Keyspace
	w      broker.Writer
	stages string // --stages of the consumers
	grace  string // --grace of the consumers
	coord  *flight.Coordinator
	config string
	spool  string // the consumers' spool directory
	srv    *redistest.Server
	// stock starts the consumers as a user would: the built-in stages at their defaults, with
	// only the flags that place a process (prefix, name, listener, spool directory).
	stock bool
}

func newE2E(t testing.TB) *e2e {
	r := redistest.New(t)
	e := newE2EOn(t, r.Client, r.URL, r.Prefix)
	e.srv = r.Server
	return e
}

// stageConfig writes a stage config file for this test and returns its path.
func (e *e2e) stageConfig(yaml string) string {
	e.t.Helper()
	path := filepath.Join(e.t.TempDir(), "stages.yaml")
	if err := os.WriteFile(path, []byte(yaml), 0o600); err != nil {
		e.t.Fatal(err)
	}
	return path
}

// startConfig runs a consumer with the given stage config and extra flags, and waits until it
// is ready.
func (e *e2e) startConfig(name, config string, extra ...string) *proc {
	e.t.Helper()
	return e.startWith(name, []string{"REDIS_URL=" + e.url}, true, append([]string{"--config", config}, extra...)...)
}

// newE2EOn sets a test up on any Redis: a single node or a cluster (url in cluster form).
func newE2EOn(t testing.TB, rdb redis.UniversalClient, url, prefix string) *e2e {
	cfg := filepath.Join(t.TempDir(), "stages.yaml")
	if err := os.WriteFile(cfg, []byte(stageYAML), 0o600); err != nil {
		t.Fatal(err)
	}
	ks := topics.Keyspace{Prefix: prefix}
	coord, _ := flight.NewCoordinator(flight.Config{Client: rdb, Keyspace: ks})
	return &e2e{t: t, ctx: context.Background(), rdb: rdb, url: url, prefix: prefix, ks: ks,
		w: broker.Writer{Client: rdb, Keyspace: ks}, coord: coord, config: cfg,
		stages: "interview-evaluation,interview-followup", grace: "3s", spool: filepath.Join(t.TempDir(), "spool")}
}

// proc is one consumer process.
type proc struct {
	name    string
	cmd     *exec.Cmd
	http    string
	logPath string
	done    chan struct{}
}

func freeAddr(t testing.TB) string {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

// start runs a consumer process with the default environment and waits until it is ready.
func (e *e2e) start(name string) *proc {
	return e.startWith(name, []string{"REDIS_URL=" + e.url}, true)
}

// startWith runs a consumer process with the given environment (on top of this process's,
// without REDIS_*, OPENAI_* and FLIGHTDECK_* variables) and extra flags, and waits until it is
// ready (/readyz; wait false: it only starts it).
func (e *e2e) startWith(name string, env []string, wait bool, extra ...string) *proc {
	e.t.Helper()
	// One log across attempts: what a failed attempt did at start stays in it.
	logPath := filepath.Join(e.t.TempDir(), name+".log")
	for attempt := 1; ; attempt++ {
		p, portTaken := e.launch(name, logPath, env, wait, extra...)
		// Another process may take the --http port freeAddr found free before the consumer
		// binds it; the consumer then exits at start, and runs again on another port.
		if !portTaken || attempt == 3 {
			if portTaken {
				b, _ := os.ReadFile(p.logPath)
				e.t.Fatalf("consumer %s exited at start:\n%s", name, b)
			}
			return p
		}
	}
}

// launch runs one consumer process as startWith describes, appending to its log at logPath.
// portTaken reports that it exited at start because its --http port was taken.
func (e *e2e) launch(name, logPath string, env []string, wait bool, extra ...string) (_ *proc, portTaken bool) {
	e.t.Helper()
	p := &proc{name: name, http: freeAddr(e.t), logPath: logPath, done: make(chan struct{})}
	logf, err := os.OpenFile(p.logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		e.t.Fatal(err)
	}
	args := append([]string{"--config", e.config, "--stages", e.stages, "--prefix", e.prefix,
		"--name", name, "--http", p.http, "--grace", e.grace, "--liveness-interval", "200ms",
		"--claim-interval", claimInterval.String(), "--log-level", "info", "--spool-dir", e.spool}, extra...)
	if e.stock {
		args = append([]string{"--prefix", e.prefix, "--name", name, "--http", p.http, "--spool-dir", e.spool}, extra...)
	}
	p.cmd = exec.Command(binary, args...)
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "REDIS_") && !strings.HasPrefix(kv, "OPENAI_") && !strings.HasPrefix(kv, "FLIGHTDECK_") {
			p.cmd.Env = append(p.cmd.Env, kv)
		}
	}
	p.cmd.Env = append(p.cmd.Env, env...)
	p.cmd.Stdout, p.cmd.Stderr = logf, logf
	if err := p.cmd.Start(); err != nil {
		e.t.Fatal(err)
	}
	go func() { _ = p.cmd.Wait(); logf.Close(); close(p.done) }()
	e.t.Cleanup(func() {
		_ = p.cmd.Process.Signal(syscall.SIGCONT) // a test may have stopped it
		_ = p.cmd.Process.Kill()
		<-p.done
		if e.t.Failed() {
			b, _ := os.ReadFile(p.logPath)
			lines := strings.Split(string(b), "\n")
			if len(lines) > 40 && !strings.Contains(string(b), "DATA RACE") {
				lines = lines[len(lines)-40:]
			}
			e.t.Logf("--- last log lines of %s:\n%s", name, strings.Join(lines, "\n"))
		}
	})
	if !wait {
		return p, false
	}
	deadline := time.Now().Add(20 * time.Second)
	for {
		resp, err := http.Get("http://" + p.http + "/readyz")
		if err == nil {
			resp.Body.Close()
			// Ready, and not another process that took the port: this one logged its listener.
			if b, _ := os.ReadFile(p.logPath); resp.StatusCode == 200 && strings.Contains(string(b), `"addr":"`+p.http+`"`) {
				return p, false
			}
		}
		select {
		case <-p.done:
			b, _ := os.ReadFile(p.logPath)
			if strings.Contains(string(b), "--http "+p.http+": listen tcp "+p.http+": bind: address already in use") {
				return p, true
			}
			e.t.Fatalf("consumer %s exited at start:\n%s", name, b)
		default:
		}
		if time.Now().After(deadline) {
			b, _ := os.ReadFile(p.logPath)
			e.t.Fatalf("consumer %s did not become healthy:\n%s", name, b)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// modelCalls scrapes flightdeck_model_calls_total from a consumer's /metrics.
func (p *proc) modelCalls(t *testing.T) int {
	t.Helper()
	resp, err := http.Get("http://" + p.http + "/metrics")
	if err != nil {
		t.Fatalf("metrics of %s: %v", p.name, err)
	}
	defer resp.Body.Close()
	n := 0
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		line := sc.Text()
		if strings.HasPrefix(line, "flightdeck_model_calls_total{") {
			f := strings.Fields(line)
			v, _ := strconv.ParseFloat(f[len(f)-1], 64)
			n += int(v)
		}
	}
	return n
}

func task(id, stage string, key, latencyMs int) topics.Task {
	return topics.Task{TaskID: id, Stage: stage, Tenant: "acme",
		Input: json.RawMessage(fmt.Sprintf(`{"question":"q%d","answer":"a%d","sim":{"latencyMs":%d}}`, key, key, latencyMs))}
}

// collect reads result streams from the start until every id in want has an event or the
// timeout passes; it returns every event per task id (duplicates included).
func (e *e2e) collect(stages []string, want map[string]bool, timeout time.Duration) map[string][]topics.Event {
	e.t.Helper()
	from := map[string]string{}
	for _, s := range stages {
		from[e.ks.Results(s)] = "0"
	}
	got := map[string][]topics.Event{}
	missing := len(want)
	deadline := time.Now().Add(timeout)
	for missing > 0 && time.Now().Before(deadline) {
		evs, _, err := broker.ReadEvents(e.ctx, e.rdb, from, 1000, 200*time.Millisecond)
		if err != nil {
			e.t.Fatal(err)
		}
		for _, ev := range evs {
			from[ev.Stream] = ev.ID
			if ev.Err != nil {
				e.t.Errorf("undecodable event %s: %v", ev.ID, ev.Err)
				continue
			}
			id := ev.Event.TaskID
			if want[id] && len(got[id]) == 0 {
				missing--
			}
			got[id] = append(got[id], ev.Event)
		}
	}
	return got
}

// TestThreeConsumers600Tasks: 3 consumer processes, 600 tasks over 60 keys in concurrent
// bursts, a sixth of them through a raw XADD as a non-Go service would send them: every task
// gets its terminal event with its key's single result, and the model runs exactly 60 times.
func TestThreeConsumers600Tasks(t *testing.T) { run600(t, newE2E(t)) }

// TestThreeConsumers600TasksOnCluster runs the same test on a 3-master Redis Cluster: every
// flight lives in one slot, streams and keys spread over the masters.
func TestThreeConsumers600TasksOnCluster(t *testing.T) {
	c := redistest.StartCluster(t, 3)
	run600(t, newE2EOn(t, c.Client(), c.URL(), redistest.Prefix()))
}

func run600(t *testing.T, e *e2e) {
	procs := []*proc{e.start("c1"), e.start("c2"), e.start("c3")}
	stages := []string{"interview-evaluation", "interview-followup"}
	want := map[string]bool{}
	var wg sync.WaitGroup
	for burst := range 6 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := burst * 100; i < (burst+1)*100; i++ {
				k := i % 60
				tk := task(fmt.Sprintf("t%03d", i), stages[k%2], k, 100)
				if burst == 5 { // raw XADD, exactly as docs/OPERATIONS.md shows
					payload, _ := json.Marshal(tk)
					err := e.rdb.XAdd(e.ctx, &redis.XAddArgs{Stream: e.ks.Tasks(tk.Stage),
						Values: []any{"_watermill_message_uuid", "raw-" + tk.TaskID, "payload", payload}}).Err()
					if err != nil {
						t.Error(err)
					}
					continue
				}
				if _, err := e.w.EnqueueTask(e.ctx, tk); err != nil {
					t.Error(err)
				}
			}
		}()
	}
	for i := range 600 {
		want[fmt.Sprintf("t%03d", i)] = true
	}
	wg.Wait()
	got := e.collect(stages, want, 60*time.Second)
	if len(got) != 600 {
		t.Fatalf("%d of 600 tasks got an event", len(got))
	}
	results := map[string]string{}
	for id, evs := range got {
		ev := evs[0]
		if ev.Status != topics.StatusSucceeded {
			t.Errorf("%s: %s %s", id, ev.Status, ev.Error)
			continue
		}
		if r, ok := results[ev.RequestKey]; ok && r != string(ev.Result) {
			t.Errorf("%s: key %s has two results:\n%s\n%s", id, ev.RequestKey, r, ev.Result)
		}
		results[ev.RequestKey] = string(ev.Result)
	}
	runs := 0
	for _, p := range procs {
		runs += p.modelCalls(t)
	}
	if len(results) != 60 || runs != 60 {
		t.Errorf("%d keys, %d model runs; want 60 and 60", len(results), runs)
	}
}

// waitOwned waits until every key's flight is RUNNING under owner and returns the tokens.
func (e *e2e) waitOwned(keys []string, owner string, timeout time.Duration) map[string]int64 {
	e.t.Helper()
	tokens := map[string]int64{}
	deadline := time.Now().Add(timeout)
	for len(tokens) < len(keys) {
		if time.Now().After(deadline) {
			e.t.Fatalf("only %d of %d flights running under %s", len(tokens), len(keys), owner)
		}
		for _, k := range keys {
			if m, err := e.coord.Get(e.ctx, k); err == nil && m.Status == flight.StatusRunning && m.OwnerID == owner {
				tokens[k] = m.OwnerToken
			}
		}
		time.Sleep(20 * time.Millisecond)
	}
	return tokens
}

func keyOf(t *testing.T, tk topics.Task) string {
	k, err := handlers.TaskKey(tk)
	if err != nil {
		t.Fatal(err)
	}
	return k
}

// TestSIGKILLOwner: a consumer is killed while it owns slow tasks; another consumer takes them
// over with larger tokens within lease + claim interval (plus the liveness timeout that tells
// it the first one is dead), and every task, followers included, gets its event.
func TestSIGKILLOwner(t *testing.T) {
	e := newE2E(t)
	a := e.start("victim")
	var keys []string
	want := map[string]bool{}
	for i := range 4 {
		tk := task(fmt.Sprintf("slow%d", i), "interview-evaluation", 100+i, 2500)
		keys = append(keys, keyOf(t, tk))
		if _, err := e.w.EnqueueTask(e.ctx, tk); err != nil {
			t.Fatal(err)
		}
		want[tk.TaskID] = true
	}
	before := e.waitOwned(keys, "victim", 10*time.Second)
	for i := range 4 { // followers parked on the victim's flights
		tk := task(fmt.Sprintf("dup%d", i), "interview-evaluation", 100+i, 2500)
		if _, err := e.w.EnqueueTask(e.ctx, tk); err != nil {
			t.Fatal(err)
		}
		want[tk.TaskID] = true
	}
	time.Sleep(300 * time.Millisecond)
	b := e.start("rescuer")
	if err := a.cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	killed := time.Now()
	// How soon is a report's business (TestReportTakeover, BENCHMARKS.md); here: the rescuer
	// takes every flight over, with larger tokens, and every task is answered once.
	after := e.waitOwned(keys, "rescuer", 30*time.Second)
	t.Logf("taken over %v after the kill (lease %v, claim interval %v)", time.Since(killed), testLease, claimInterval)
	for k, tok := range after {
		if tok <= before[k] {
			t.Errorf("%s: takeover token %d not above %d", k, tok, before[k])
		}
	}
	got := e.collect([]string{"interview-evaluation"}, want, 20*time.Second)
	for id := range want {
		evs := got[id]
		if len(evs) == 0 {
			t.Errorf("%s: no event", id)
			continue
		}
		if evs[0].Status != topics.StatusSucceeded || evs[0].Consumer != "rescuer" {
			t.Errorf("%s: %+v", id, evs[0])
		}
	}
	if n := b.modelCalls(t); n != 4 {
		t.Errorf("rescuer ran the model %d times, want 4", n)
	}
}

// TestSIGSTOPZombie: an owner is stopped past its lease and continued after another consumer
// took over and finished: the task finishes once with the new owner's token, the zombie's late
// result is refused, and no second event appears for the key.
func TestSIGSTOPZombie(t *testing.T) {
	e := newE2E(t)
	a := e.start("zombie")
	tk := task("z1", "interview-evaluation", 7, 2000)
	key := keyOf(t, tk)
	if _, err := e.w.EnqueueTask(e.ctx, tk); err != nil {
		t.Fatal(err)
	}
	before := e.waitOwned([]string{key}, "zombie", 10*time.Second)[key]
	b := e.start("fresh")
	if err := a.cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	got := e.collect([]string{"interview-evaluation"}, map[string]bool{"z1": true}, 20*time.Second)
	if len(got["z1"]) != 1 {
		t.Fatalf("events for z1 while the zombie sleeps: %+v", got["z1"])
	}
	ev := got["z1"][0]
	if ev.Consumer != "fresh" || ev.OwnerToken <= before || ev.Status != topics.StatusSucceeded {
		t.Fatalf("event %+v, want fresh's with a token above %d", ev, before)
	}
	if err := a.cmd.Process.Signal(syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	// Give the zombie time to wake, find its token stale and try to write.
	time.Sleep(3 * time.Second)
	got = e.collect([]string{"interview-evaluation"}, map[string]bool{"z1": true}, time.Second)
	if len(got["z1"]) != 1 {
		t.Errorf("%d events for z1 after the zombie woke, want 1: %+v", len(got["z1"]), got["z1"])
	}
	m, err := e.coord.Get(e.ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	res, _ := e.coord.Result(e.ctx, key)
	if m.OwnerToken != ev.OwnerToken || m.Status != flight.StatusSucceeded || !strings.Contains(string(res), `"consumer":"fresh"`) {
		t.Errorf("stored flight %s token %d result %s; want fresh's", m.Status, m.OwnerToken, res)
	}
	if n := e.rdb.XPending(e.ctx, e.ks.Tasks("interview-evaluation"), topics.ConsumerGroup).Val().Count; n != 0 {
		t.Errorf("%d entries pending after the run", n)
	}
	if b.modelCalls(t) != 1 {
		t.Errorf("fresh ran the model %d times", b.modelCalls(t))
	}
}

// TestSIGTERMGraceful: on SIGTERM a consumer stops reading, lets an owner that finishes within
// the grace period publish its event, hands the slower one over without spending its attempt
// and exits 0; another consumer takes the slow one over at once (without waiting for a lease).
func TestSIGTERMGraceful(t *testing.T) {
	e := newE2E(t)
	a := e.start("leaving")
	fast := task("fast", "interview-evaluation", 1, 1000)
	slow := task("slow", "interview-evaluation", 2, 6000)
	for _, tk := range []topics.Task{fast, slow} {
		if _, err := e.w.EnqueueTask(e.ctx, tk); err != nil {
			t.Fatal(err)
		}
	}
	e.waitOwned([]string{keyOf(t, fast), keyOf(t, slow)}, "leaving", 10*time.Second)
	if err := a.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	termAt := time.Now()
	b := e.start("staying")
	select {
	case <-a.done:
	case <-time.After(10 * time.Second):
		t.Fatal("consumer did not exit after SIGTERM")
	}
	if took := time.Since(termAt); took > 3*time.Second+2*time.Second {
		t.Errorf("shutdown took %v with a 3s grace period", took)
	}
	if code := a.cmd.ProcessState.ExitCode(); code != 0 {
		t.Errorf("exit code %d", code)
	}
	got := e.collect([]string{"interview-evaluation"}, map[string]bool{"fast": true, "slow": true}, 20*time.Second)
	if evs := got["fast"]; len(evs) != 1 || evs[0].Consumer != "leaving" || evs[0].Status != topics.StatusSucceeded {
		t.Errorf("fast: %+v, want leaving's result", evs)
	}
	if evs := got["slow"]; len(evs) != 1 || evs[0].Consumer != "staying" || evs[0].Status != topics.StatusSucceeded || evs[0].Attempts != 1 {
		t.Errorf("slow: %+v, want staying's result, still attempt 1 (a handover spends no attempt)", evs)
	}
	if n := b.modelCalls(t); n != 1 {
		t.Errorf("staying ran the model %d times, want 1", n)
	}
}

// scrape returns every sample of a consumer's /metrics as "name{labels}" -> value.
func (p *proc) scrape(t *testing.T) map[string]float64 {
	t.Helper()
	resp, err := http.Get("http://" + p.http + "/metrics")
	if err != nil {
		t.Fatalf("metrics of %s: %v", p.name, err)
	}
	defer resp.Body.Close()
	out := map[string]float64{}
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		line := sc.Text()
		if strings.HasPrefix(line, "#") || line == "" {
			continue
		}
		i := strings.LastIndexByte(line, ' ')
		v, err := strconv.ParseFloat(line[i+1:], 64)
		if err == nil {
			out[line[:i]] = v
		}
	}
	return out
}

// TestMetricsAfterARun: after 10 tasks over 2 keys and one malformed entry, /metrics holds the
// right counts: 2 model runs, 2 owner events, 8 follower or hit events, 1 dead letter with its
// reason, a DLQ length of 1, histogram counts, and no pending entries; labels never carry a
// key or a task id.
func TestMetricsAfterARun(t *testing.T) {
	e := newE2E(t)
	p := e.start("metered")
	want := map[string]bool{}
	for i := range 10 {
		tk := task(fmt.Sprintf("m%d", i), "interview-evaluation", i%2, 200)
		if _, err := e.w.EnqueueTask(e.ctx, tk); err != nil {
			t.Fatal(err)
		}
		want[tk.TaskID] = true
	}
	e.rdb.XAdd(e.ctx, &redis.XAddArgs{Stream: e.ks.Tasks("interview-evaluation"),
		Values: []any{"_watermill_message_uuid", "bad", "payload", "{not json"}})
	if got := e.collect([]string{"interview-evaluation"}, want, 20*time.Second); len(got) != 10 {
		t.Fatalf("%d of 10 events", len(got))
	}
	const st = `stage="interview-evaluation"`
	var m map[string]float64
	followersAndHits := func() float64 {
		return m[`flightdeck_task_events_total{outcome="follower_SUCCEEDED",`+st+`}`] +
			m[`flightdeck_task_events_total{outcome="hit_SUCCEEDED",`+st+`}`]
	}
	// A task is counted when its handler's script call returns, a moment after its event is
	// readable, and the gauges read from Redis are cached for 5 s: scrape until every check
	// holds (or the deadline), then report the ones that do not.
	type check struct {
		name      string
		got, want float64
	}
	checks := func() []check {
		return []check{
			{"model calls", m[`flightdeck_model_calls_total{`+st+`}`], 2},
			{"owner events", m[`flightdeck_task_events_total{outcome="owner_SUCCEEDED",`+st+`}`], 2},
			{"follower + hit events", followersAndHits(), 8},
			{"dead letters", m[`flightdeck_dead_letters_total{reason="bad_json",`+st+`}`], 1},
			{"dlq length", m[`flightdeck_dlq_length{`+st+`}`], 1},
			{"owner run count", m[`flightdeck_owner_run_seconds_count{`+st+`}`], 2},
			{"end-to-end count (owner and hit tasks)", m[`flightdeck_end_to_end_seconds_count{`+st+`}`],
				2 + m[`flightdeck_task_events_total{outcome="hit_SUCCEEDED",`+st+`}`]},
			{"running owners", m[`flightdeck_running_owners{`+st+`}`], 0},
			{"breaker closed", m[`flightdeck_breaker_state`], 0},
			{"backlog", m[`flightdeck_backlog_entries{`+st+`}`], 0},
			{"follower waits observed + hits", m[`flightdeck_follower_wait_seconds_count{`+st+`}`] +
				m[`flightdeck_task_events_total{outcome="hit_SUCCEEDED",`+st+`}`], 8},
		}
	}
	var failed []check
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(200 * time.Millisecond) {
		m = p.scrape(t)
		failed = failed[:0]
		for _, c := range checks() {
			if c.got != c.want {
				failed = append(failed, c)
			}
		}
		if len(failed) == 0 || time.Now().After(deadline) {
			break
		}
	}
	for _, c := range failed {
		t.Errorf("%s = %v, want %v", c.name, c.got, c.want)
	}
	for k := range m {
		if strings.Contains(k, "ai:interview") || strings.Contains(k, `"m1"`) {
			t.Errorf("a metric label carries a key or task id: %s", k)
		}
	}
}

// TestPartitionedStageOnCluster: a stage split into 3 task-stream partitions on a 3-master
// cluster: producers spread tasks over the partitions, which live on different masters, and two
// consumers reading all partitions answer every task with one model run per key.
func TestPartitionedStageOnCluster(t *testing.T) {
	c := redistest.StartCluster(t, 3)
	e := newE2EOn(t, c.Client(), c.URL(), redistest.Prefix())
	yaml := strings.Replace(stageYAML, "  interview-evaluation:\n", "  interview-evaluation:\n    partitions: 3\n", 1)
	if err := os.WriteFile(e.config, []byte(yaml), 0o600); err != nil {
		t.Fatal(err)
	}
	e.ks.Partitions = map[string]int{"interview-evaluation": 3}
	e.w.Keyspace = e.ks
	procs := []*proc{e.start("p1"), e.start("p2")}
	want := map[string]bool{}
	for i := range 120 {
		tk := task(fmt.Sprintf("pt%03d", i), "interview-evaluation", i%12, 50)
		if _, err := e.w.EnqueueTask(e.ctx, tk); err != nil {
			t.Fatal(err)
		}
		want[tk.TaskID] = true
	}
	got := e.collect([]string{"interview-evaluation"}, want, 30*time.Second)
	if len(got) != 120 {
		t.Fatalf("%d of 120 tasks answered", len(got))
	}
	runs := 0
	for _, p := range procs {
		runs += p.modelCalls(t)
	}
	if runs != 12 {
		t.Errorf("%d model runs, want 12", runs)
	}
	masters := map[string]bool{}
	for _, s := range e.ks.TaskStreams("interview-evaluation") {
		n, err := e.rdb.XLen(e.ctx, s).Result()
		if err != nil || n == 0 {
			t.Errorf("partition %s holds %d entries (%v)", s, n, err)
		}
		slot, _ := e.rdb.ClusterKeySlot(e.ctx, s).Result()
		for _, sh := range e.rdb.(*redis.ClusterClient).ClusterShards(e.ctx).Val() {
			for _, r := range sh.Slots {
				if slot >= r.Start && slot <= r.End {
					masters[fmt.Sprint(sh.Nodes[0].Port)] = true
				}
			}
		}
	}
	if len(masters) < 2 {
		t.Errorf("the 3 partitions live on %d master(s); want them spread", len(masters))
	}
}
