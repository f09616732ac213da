package main_test

// Process measurements behind docs/BENCHMARKS.md: takeover time after SIGKILL and consumer
// process memory per parked follower, each beside a bare watermill-redisstream consumer
// process. They are tests gated by BENCH_REPORT=1, so `make test` skips them:
//
//	BENCH_REPORT=1 go test -run 'TestReport' -v -count 1 ./cmd/consumer/
//
// Consumers run from a binary built without the race detector (the e2e tests' binary has it),
// with the e2e tests' flags and stage file (lease 1.5 s, heartbeat 250 ms, liveness 200 ms,
// claim interval 200 ms). The bare consumer is this test binary re-executed in a child mode
// (see init): 4 watermill-redisstream subscribers in the same consumer group, claim interval
// 200 ms and max idle 1.5 s, so it redelivers within the same budget.

import (
	"bufio"
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill-redisstream/pkg/redisstream"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/redis/go-redis/v9"

	"github.com/flightdeck-ai/flightdeck/flight"
	"github.com/flightdeck-ai/flightdeck/internal/broker"
	"github.com/flightdeck-ai/flightdeck/internal/redisconn"
	"github.com/flightdeck-ai/flightdeck/internal/testkit/redistest"
	"github.com/flightdeck-ai/flightdeck/topics"
)

// Environment of the bare child process.
const (
	repBareEnv   = "FLIGHTDECK_REPORT_BARE" // "block": handlers never return; "noop": they ack; "floor", "floor-scripts": the fleet's floors
	repStreamEnv = "FLIGHTDECK_REPORT_STREAM"
	repNameEnv   = "FLIGHTDECK_REPORT_NAME"
	repSubsEnv   = "FLIGHTDECK_REPORT_SUBS" // subscribers of the child (default 4)
)

// init turns this test binary into a bare watermill consumer when repBareEnv is set; it runs
// before TestMain, so the child builds nothing and runs no test.
func init() {
	if mode := os.Getenv(repBareEnv); mode == "floor" || mode == "floor-scripts" {
		os.Exit(repFloorChild(mode))
	} else if mode != "" {
		os.Exit(repBareChild(mode))
	}
}

// repBareChild runs bare subscribers ($FLIGHTDECK_REPORT_SUBS, default 4) on
// $FLIGHTDECK_REPORT_STREAM until SIGTERM/SIGKILL. It prints READY once subscribed and
// "START <uuid>" when a handler receives a message.
func repBareChild(mode string) int {
	opt, err := redis.ParseURL(os.Getenv("REDIS_URL"))
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	name := os.Getenv(repNameEnv)
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	router, err := message.NewRouter(message.RouterConfig{}, nil)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	var mu sync.Mutex
	subs, err := strconv.Atoi(os.Getenv(repSubsEnv))
	if err != nil || subs <= 0 {
		subs = 4
	}
	for i := range subs {
		sub, err := redisstream.NewSubscriber(redisstream.SubscriberConfig{
			Client: redisconn.NewClient(opt), Consumer: name + "/" + strconv.Itoa(i), ConsumerGroup: topics.ConsumerGroup,
			ClaimInterval: claimInterval, MaxIdleTime: testLease, DisableIndefiniteInitialBlock: true}, nil)
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		router.AddNoPublisherHandler("h"+strconv.Itoa(i), os.Getenv(repStreamEnv), sub, func(m *message.Message) error {
			if mode == "block" {
				mu.Lock()
				fmt.Println("START", m.UUID)
				mu.Unlock()
				<-ctx.Done()
			}
			return nil
		})
	}
	go func() { <-router.Running(); fmt.Println("READY") }()
	if err := router.Run(ctx); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	return 0
}

// repLine is a line a bare child printed, with the time the parent read it.
type repLine struct {
	text string
	at   time.Time
}

// repBare is a bare child process.
type repBare struct {
	cmd   *exec.Cmd
	lines chan repLine
	done  chan struct{}
}

// repStartBare starts a bare child with 4 subscribers and waits for its READY.
func repStartBare(t testing.TB, url, stream, name, mode string) *repBare {
	t.Helper()
	return repStartBareN(t, url, stream, name, mode, 4)
}

// repStartBareN starts a bare child with subs subscribers and waits for its READY.
func repStartBareN(t testing.TB, url, stream, name, mode string, subs int) *repBare {
	t.Helper()
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	c := &repBare{cmd: exec.Command(self), lines: make(chan repLine, 100), done: make(chan struct{})}
	c.cmd.Env = append(os.Environ(), "REDIS_URL="+url, repBareEnv+"="+mode, repStreamEnv+"="+stream, repNameEnv+"="+name,
		repSubsEnv+"="+strconv.Itoa(subs))
	c.cmd.Stderr = os.Stderr
	out, err := c.cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := c.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			c.lines <- repLine{sc.Text(), time.Now()}
		}
		_ = c.cmd.Wait()
		close(c.done)
	}()
	t.Cleanup(func() { _ = c.cmd.Process.Kill(); <-c.done })
	if l := c.next(t, 20*time.Second); l.text != "READY" {
		t.Fatalf("bare child %s: %q", name, l.text)
	}
	return c
}

func (c *repBare) next(t testing.TB, timeout time.Duration) repLine {
	t.Helper()
	select {
	case l := <-c.lines:
		return l
	case <-c.done:
		t.Fatal("bare child exited")
	case <-time.After(timeout):
		t.Fatal("bare child silent")
	}
	return repLine{}
}

func (c *repBare) kill() {
	_ = c.cmd.Process.Kill()
	<-c.done
}

var (
	repBinaryOnce sync.Once
	repBinary     string
)

// repUseReleaseBinary makes e.start run a consumer built without the race detector for the
// rest of the test (tests of this package do not run in parallel).
func repUseReleaseBinary(t testing.TB) {
	t.Helper()
	repBinaryOnce.Do(func() {
		repBinary = filepath.Join(filepath.Dir(binary), "consumer-norace")
		build := exec.Command("go", "build", "-o", repBinary, ".")
		build.Stdout, build.Stderr = os.Stdout, os.Stderr
		if err := build.Run(); err != nil {
			t.Fatalf("build consumer: %v", err)
		}
	})
	saved := binary
	binary = repBinary
	t.Cleanup(func() { binary = saved })
}

func repGate(t *testing.T) {
	if os.Getenv("BENCH_REPORT") != "1" {
		t.Skip("report measurement: set BENCH_REPORT=1 (see docs/BENCHMARKS.md)")
	}
}

func repRuns() int {
	if n, err := strconv.Atoi(os.Getenv("BENCH_REPORT_RUNS")); err == nil && n > 0 {
		return n
	}
	return 10
}

func repSummary(d []time.Duration) string {
	s := slices.Clone(d)
	slices.Sort(s)
	ms := func(x time.Duration) string { return strconv.FormatInt(x.Milliseconds(), 10) }
	var all []string
	for _, x := range d {
		all = append(all, ms(x))
	}
	return fmt.Sprintf("median %s ms, min %s ms, max %s ms (runs: %s)", ms(s[len(s)/2]), ms(s[0]), ms(s[len(s)-1]), strings.Join(all, " "))
}

// TestReportTakeover: a consumer process owns a 20 s task and is SIGKILLed 1.0-1.25 s after
// its flight went RUNNING (a random phase of its 250 ms heartbeat); another consumer process
// is running. Measured: kill to the new owner's RUNNING (polled every 2 ms), and kill to the
// moment the rescuer claimed the stream entry. The bare twin: a bare consumer process holds
// the message in a handler that never returns, is SIGKILLed at the same point after its
// handler started, and another bare process runs it again: kill to the rescuer's handler.
func TestReportTakeover(t *testing.T) {
	repGate(t)
	repUseReleaseBinary(t)
	r := redistest.New(t)
	ctx := context.Background()
	var fdTake, fdClaim, bareTake []time.Duration
	for run := range repRuns() {
		// Flightdeck.
		e := newE2EOn(t, r.Client, r.URL, redistest.Prefix())
		key, victim, rescuer, killed := repKillOwner(t, e, "slow", run)
		var claimed time.Duration
		for {
			if claimed == 0 {
				xp, err := e.rdb.XPendingExt(ctx, &redis.XPendingExtArgs{Stream: e.ks.Tasks("interview-evaluation"),
					Group: topics.ConsumerGroup, Start: "-", End: "+", Count: 10}).Result()
				if err == nil && len(xp) > 0 && xp[0].Consumer == "rescuer" {
					claimed = time.Since(killed)
				}
			}
			m, err := e.coord.Get(ctx, key)
			if err == nil && m.Status == flight.StatusRunning && m.OwnerID == "rescuer" {
				break
			}
			if time.Since(killed) > 15*time.Second {
				t.Fatalf("run %d: no takeover within 15 s", run)
			}
			time.Sleep(2 * time.Millisecond)
		}
		took := time.Since(killed)
		fdTake, fdClaim = append(fdTake, took), append(fdClaim, claimed)
		_ = rescuer.cmd.Process.Kill()
		<-rescuer.done
		<-victim.done

		// Bare watermill.
		stream := redistest.Prefix() + ":tasks"
		bv := repStartBare(t, r.URL, stream, "bare-victim", "block")
		if err := r.Client.XAdd(ctx, &redis.XAddArgs{Stream: stream,
			Values: []any{topics.FieldUUID, "slow", topics.FieldPayload, "{}"}}).Err(); err != nil {
			t.Fatal(err)
		}
		started := bv.next(t, 10*time.Second)
		br := repStartBare(t, r.URL, stream, "bare-rescuer", "block")
		time.Sleep(time.Until(started.at.Add(time.Second + rand.N(250*time.Millisecond))))
		bv.kill()
		killed = time.Now()
		again := br.next(t, 15*time.Second)
		bareTake = append(bareTake, again.at.Sub(killed))
		br.kill()
		t.Logf("run %d: flightdeck kill->claim %v, kill->RUNNING %v; bare kill->handler %v", run, claimed, took, again.at.Sub(killed))
	}
	t.Logf("flightdeck kill -> new owner RUNNING: %s", repSummary(fdTake))
	t.Logf("flightdeck kill -> entry claimed:     %s", repSummary(fdClaim))
	t.Logf("bare watermill kill -> handler again: %s", repSummary(bareTake))
}

// repRSS is a process's resident set size from /proc.
func repRSS(t *testing.T, pid int) float64 {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			kb, err := strconv.ParseFloat(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 64)
			if err != nil {
				t.Fatal(err)
			}
			return kb * 1024
		}
	}
	t.Fatal("no VmRSS")
	return 0
}

const repParked = 10000

// repPendingStage is the stage file of the memory test: the e2e timings, room for 20,000
// parked tasks per flight.
const repPendingStage = `stages:
  interview-evaluation:
    heartbeatInterval: 250ms
    lease: 1500ms
    concurrency: 4
    maxParked: 20000
`

// TestReportParkedProcessMemory: one consumer process (4 subscribers) owns a 60 s task; 10,000
// follower tasks of its key arrive and are parked. Sampled before and 2 s after: RSS (from
// /proc), go_memstats_heap_inuse_bytes, go_goroutines, flightdeck_running_owners, and the
// stream's pending entries; then a task of another key is sent and its enqueue-to-event time
// shows a handler slot is free. The deltas include what processing 10,000 messages leaves in
// a process (heap not yet collected, Redis connection buffers); the bare twin shows that part.
// The retained heap per parked follower, after forced collections, is measured in process by
// BenchmarkReportParkedConsumerMemory (handlers). Run with the default GOGC and with GOGC=10 (the heap then
// stays close to the live heap, so garbage from processing 10,000 messages does not count).
// The bare twin is a bare consumer process acking 10,000 messages (RSS before and after).
func TestReportParkedProcessMemory(t *testing.T) {
	repGate(t)
	repUseReleaseBinary(t)
	r := redistest.New(t)
	ctx := context.Background()
	cfg := filepath.Join(t.TempDir(), "stages.yaml")
	if err := os.WriteFile(cfg, []byte(repPendingStage), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, gogc := range []string{"", "10"} {
		for run := range max(repRuns()/3, 1) {
			t.Setenv("GOGC", gogc)
			e := newE2EOn(t, r.Client, r.URL, redistest.Prefix())
			e.config = cfg
			p := e.start("holder")
			owner := task("owner", "interview-evaluation", run, 60000)
			key := keyOf(t, owner)
			if _, err := e.w.EnqueueTask(ctx, owner); err != nil {
				t.Fatal(err)
			}
			e.waitOwned([]string{key}, "holder", 10*time.Second)
			time.Sleep(time.Second)
			rss0, m0 := repRSS(t, p.cmd.Process.Pid), p.scrape(t)
			repEnqueueFollowers(t, e, "f", run, 60000)
			var parked, pending int64
			for deadline := time.Now().Add(time.Minute); ; time.Sleep(5 * time.Millisecond) {
				parked = e.rdb.HLen(ctx, e.ks.Waiters(key)).Val()
				pending = e.rdb.XPending(ctx, e.ks.Tasks("interview-evaluation"), topics.ConsumerGroup).Val().Count
				if parked+pending-1 >= repParked {
					break
				}
				if time.Now().After(deadline) {
					t.Fatalf("%d parked, %d pending", parked, pending)
				}
			}
			time.Sleep(2 * time.Second)
			parked = e.rdb.HLen(ctx, e.ks.Waiters(key)).Val()
			pending = e.rdb.XPending(ctx, e.ks.Tasks("interview-evaluation"), topics.ConsumerGroup).Val().Count
			rss1, m1 := repRSS(t, p.cmd.Process.Pid), p.scrape(t)
			probeTook := repProbe(t, e, task("probe", "interview-evaluation", 1_000_000+run, 0))
			const st = `{stage="interview-evaluation"}`
			per := func(a, b float64) string { return fmt.Sprintf("%.1f B", (b-a)/float64(parked)) }
			t.Logf("GOGC=%q run %d: %d parked, %d entries pending; per parked follower: RSS %s, heap in use %s; "+
				"goroutines %v -> %v; running owners %v; other-key task answered in %v",
				gogc, run, parked, pending, per(rss0, rss1),
				per(m0["go_memstats_heap_inuse_bytes"], m1["go_memstats_heap_inuse_bytes"]),
				m0["go_goroutines"], m1["go_goroutines"], m1["flightdeck_running_owners"+st], probeTook.Round(time.Millisecond))
			_ = p.cmd.Process.Kill()
			<-p.done

			stream := redistest.Prefix() + ":tasks"
			bare := repStartBare(t, r.URL, stream, "bare", "noop")
			payload, err := owner.Encode()
			if err != nil {
				t.Fatal(err)
			}
			time.Sleep(time.Second)
			b0 := repRSS(t, bare.cmd.Process.Pid)
			repBareRound(t, r.Client, stream, payload, 1)
			time.Sleep(2 * time.Second)
			b1 := repRSS(t, bare.cmd.Process.Pid)
			bare.kill()
			t.Logf("GOGC=%q run %d: bare consumer after acking %d messages: RSS %.1f B per message", gogc, run, repParked, (b1-b0)/repParked)
		}
	}
}

// repEnqueueFollowers enqueues repParked tasks <prefix><i> with the input of key k.
func repEnqueueFollowers(t *testing.T, e *e2e, prefix string, k, latencyMs int) {
	t.Helper()
	for start := 0; start < repParked; start += 500 {
		batch := make([]topics.Task, 0, 500)
		for i := start; i < start+500; i++ {
			batch = append(batch, task(prefix+strconv.Itoa(i), "interview-evaluation", k, latencyMs))
		}
		if _, err := e.w.EnqueueTasks(e.ctx, batch); err != nil {
			t.Fatal(err)
		}
	}
}

// repBareRound appends repParked messages to stream and waits until the bare consumer has
// read and acked all of them (round is 1-based: round*repParked entries read in total).
func repBareRound(t *testing.T, rdb *redis.Client, stream string, payload []byte, round int64) {
	t.Helper()
	ctx := context.Background()
	for start := 0; start < repParked; start += 500 {
		_, err := rdb.Pipelined(ctx, func(pl redis.Pipeliner) error {
			for i := start; i < start+500; i++ {
				pl.XAdd(ctx, &redis.XAddArgs{Stream: stream, Values: []any{topics.FieldUUID,
					"b" + strconv.FormatInt(round, 10) + "-" + strconv.Itoa(i), topics.FieldPayload, payload}})
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(5 * time.Millisecond) {
		groups, err := rdb.XInfoGroups(ctx, stream).Result()
		if err == nil && len(groups) == 1 && groups[0].EntriesRead >= round*repParked && groups[0].Pending == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("bare consumer stalled: %+v %v", groups, err)
		}
	}
}

// repProbe enqueues tk and answers the time until its terminal event appears (read from the
// result stream's end, with a blocking XREAD).
func repProbe(t *testing.T, e *e2e, tk topics.Task) time.Duration {
	t.Helper()
	stream, last := e.ks.Results(tk.Stage), "0"
	if msgs, err := e.rdb.XRevRangeN(e.ctx, stream, "+", "-", 1).Result(); err == nil && len(msgs) > 0 {
		last = msgs[0].ID
	}
	sent := time.Now()
	if _, err := e.w.EnqueueTask(e.ctx, tk); err != nil {
		t.Fatal(err)
	}
	for time.Since(sent) < 10*time.Second {
		evs, _, err := broker.ReadEvents(e.ctx, e.rdb, map[string]string{stream: last}, 100, 100*time.Millisecond)
		if err != nil {
			t.Fatal(err)
		}
		for _, ev := range evs {
			last = ev.ID
			if ev.Event.TaskID == tk.TaskID {
				return time.Since(sent)
			}
		}
	}
	t.Fatalf("task %s got no event within 10 s", tk.TaskID)
	return 0
}
