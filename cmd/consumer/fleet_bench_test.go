package main_test

// BenchmarkFleetBurst is the fleet measurement of docs/BENCHMARKS.md: consumer processes (not
// in-process consumers) draining a burst of tasks that were all enqueued at once, the way a
// deployment sees a backlog. Its asynq twins are in bench/asynq (BenchmarkAsynqBurst, and
// BenchmarkAsynqDrain for the workers' CPU per task beside consumer-us/task), a separate
// module, so that this module does not depend on asynq; `make bench-compare` runs them all.
//
//	go test -run '^$' -bench FleetBurst -benchtime 5x ./cmd/consumer/

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/flightdeck-ai/flightdeck/internal/testkit/otlptest"
	"github.com/flightdeck-ai/flightdeck/internal/testkit/pgtest"
	"github.com/flightdeck-ai/flightdeck/internal/testkit/redistest"
	"github.com/flightdeck-ai/flightdeck/topics"
)

// Shape of one fleet burst.
const (
	fleetTasks       = 5000 // tasks per op, XADDed at once
	fleetProcesses   = 2    // consumer processes
	fleetConcurrency = 8    // handlers (subscribers) per process; the -c50 loads run 50, as many as asynq's
	fleetStage       = "interview-evaluation"
)

// BenchmarkFleetBurst: fleetTasks tasks with a zero-latency sim model, XADDed in pipelines,
// with unique keys (load=unique) or 10 tasks per key XADDed one after the other (load=dup10),
// through fleetProcesses consumer processes of fleetConcurrency handlers each (the -c50 loads:
// 50 handlers each, the concurrency of each asynq server in the asynq burst). tasks/s runs
// from the first XADD to the last terminal event; redis-us/task is Redis's CPU time (INFO cpu,
// user + sys) over the same span, per task, consumer-us/task the consumer processes' CPU
// time (user + sys, /proc/<pid>/stat), consumer-cs/task their threads' context switches
// (voluntary and involuntary, /proc/<pid>/task/*/status), and fcall-us/task the time Redis
// spent in the flight functions (INFO commandstats). FLEET_COMMANDSTATS=1 logs every
// command's calls and µs per task (with -v). impl=bare is the same number of bare
// watermill-redisstream consumer processes with fleetConcurrency subscribers each and a handler
// that only acknowledges; it is done when the group has read every entry and none is pending.
// impl=floor is the same number of processes of the least loop that makes a read batch's
// round trips, read, acquire and complete, runs the same simulated model and writes each
// task's event (floor_bench_test.go): what the round trips, the runtime, the client and the
// model's stand-in cost on this machine, in the same run. impl=floor-scripts is that loop with
// the consumer's own acquire and complete through a Batcher, each task on a goroutine
// (floor_scripts_bench_test.go): what the flight calls add, without the rest of the lifecycle.
// load=stock runs the stock binary as a user would: no stage file and no tuning flags, so the
// processes consume all four built-in stages at their default settings, and the unique-key
// burst goes to fleetStage; load=stock-dup10 sends it 10 tasks per key. reads/task is how
// many times Redis read from a client per task (INFO stats total_reads_processed): about the
// round trips, however many commands each carried.
func BenchmarkFleetBurst(b *testing.B) {
	redis.SetLogger(fleetQuiet{}) // go-redis's reconnect lines would split the result lines
	for _, load := range []struct {
		name         string
		perKey, conc int
	}{{"stock", 1, 0}, {"stock-dup10", 10, 0}, {"unique", 1, fleetConcurrency}, {"dup10", 10, fleetConcurrency}, {"unique-c50", 1, 50}, {"dup10-c50", 10, 50}} {
		for _, impl := range []string{"flightdeck", "bare", "floor", "floor-scripts"} {
			if impl != "flightdeck" && (load.perKey > 1 || load.conc == 0) {
				continue // the bare consumer and the floors know no defaults nor shared keys: their figure is the unique one
			}
			b.Run("load="+load.name+"/impl="+impl, func(b *testing.B) {
				fleetBurst(b, impl, load.perKey, load.conc, fleetTasks, 0)
			})
		}
	}
}

// BenchmarkFleetArchive: the fleet burst of unique keys with and without the durable archive
// (a private PostgreSQL on the same machine), with a zero-latency model (5,000 tasks) and a
// 50 ms model (1,000 tasks). With the archive every owner looks its key up before the model
// call and records its outcome (batched, off its path).
func BenchmarkFleetArchive(b *testing.B) {
	redis.SetLogger(fleetQuiet{})
	for _, model := range []struct {
		name      string
		latencyMs int
		tasks     int
	}{{"0ms", 0, fleetTasks}, {"50ms", 50, 1000}} {
		for _, impl := range []string{"flightdeck", "flightdeck-archive"} {
			b.Run("model="+model.name+"/impl="+impl, func(b *testing.B) { fleetBurst(b, impl, 1, fleetConcurrency, model.tasks, model.latencyMs) })
		}
	}
}

// BenchmarkFleetReplicated: the fleet burst of unique keys with 50 handlers per process on a
// master with one replica (both on this machine), with the stage's claims and outcomes
// replicated asynchronously (durability=async, the default) and waited for
// (durability=replicated).
func BenchmarkFleetReplicated(b *testing.B) {
	redis.SetLogger(fleetQuiet{})
	for _, d := range []string{"async", "replicated"} {
		b.Run("durability="+d, func(b *testing.B) {
			master := redistest.Start(b, nil)
			redistest.StartReplica(b, master)
			e := newE2EOn(b, master.Client(), master.URL(), redistest.Prefix())
			fleetBurstOn(b, e, "flightdeck", 1, 50, fleetTasks, 0, "    durability: "+d+"\n")
		})
	}
}

// BenchmarkFleetTracing: the fleet burst of unique keys with tracing off and on, every task
// traced (impl=flightdeck-traced) or one in ten (flightdeck-traced-10pct, the ratio sampler),
// the spans exported over OTLP/HTTP to a receiver in this process that keeps them undecoded
// until the burst is over, as a collector on another host would cost this one nothing.
func BenchmarkFleetTracing(b *testing.B) {
	redis.SetLogger(fleetQuiet{})
	for _, impl := range []string{"flightdeck", "flightdeck-traced", "flightdeck-traced-10pct"} {
		b.Run("impl="+impl, func(b *testing.B) { fleetBurst(b, impl, 1, fleetConcurrency, fleetTasks, 0) })
	}
}

func fleetBurst(b *testing.B, impl string, perKey, conc, nTasks, latencyMs int) {
	fleetBurstOn(b, newE2E(b), impl, perKey, conc, nTasks, latencyMs, "")
}

// fleetBurstOn is fleetBurst on e; stageYAML holds more fields of the stage's policy (lines
// indented by four spaces).
func fleetBurstOn(b *testing.B, e *e2e, impl string, perKey, conc, nTasks, latencyMs int, stageYAML string) {
	e.stages = fleetStage
	stream := e.ks.Tasks(fleetStage)
	var pids []int
	var recv *otlptest.Receiver // the traced consumers' spans
	switch impl {
	case "flightdeck", "flightdeck-archive", "flightdeck-traced", "flightdeck-traced-10pct":
		repUseReleaseBinary(b)
		if conc == 0 {
			e.stock = true
			for i := range fleetProcesses {
				p := e.startWith("fleet-"+strconv.Itoa(i+1), []string{"REDIS_URL=" + e.url}, true)
				pids = append(pids, p.cmd.Process.Pid)
			}
			break
		}
		cfg := e.stageConfig(fmt.Sprintf("stages:\n  %s:\n    concurrency: %d\n%s", fleetStage, conc, stageYAML))
		var extra []string
		env := []string{"REDIS_URL=" + e.url}
		if strings.HasPrefix(impl, "flightdeck-traced") {
			recv = otlptest.Start(b)
			env = append(env, "OTEL_EXPORTER_OTLP_ENDPOINT="+recv.URL)
			if impl == "flightdeck-traced-10pct" {
				env = append(env, "OTEL_TRACES_SAMPLER=parentbased_traceidratio", "OTEL_TRACES_SAMPLER_ARG=0.1")
			}
		}
		if impl == "flightdeck-archive" {
			// The archive on a private PostgreSQL of the same machine: every owner looks its
			// key up before the model call and records its outcome.
			extra = []string{"--archive", pgtest.New(b).URL}
		}
		for i := range fleetProcesses {
			p := e.startWith("fleet-"+strconv.Itoa(i+1), env, true, append([]string{"--config", cfg}, extra...)...)
			pids = append(pids, p.cmd.Process.Pid)
		}
	case "bare":
		for i := range fleetProcesses {
			c := repStartBareN(b, e.url, stream, "bare-"+strconv.Itoa(i+1), "noop", conc)
			pids = append(pids, c.cmd.Process.Pid)
		}
	case "floor", "floor-scripts":
		b.Setenv(repResultsEnv, e.ks.Results(fleetStage))
		b.Setenv(repPrefixEnv, e.ks.Prefix)
		b.Setenv(repStageEnv, fleetStage)
		for i := range fleetProcesses {
			c := repStartBareN(b, e.url, stream, impl+"-"+strconv.Itoa(i+1), impl, conc)
			pids = append(pids, c.cmd.Process.Pid)
		}
	}
	results := e.ks.Results(fleetStage)
	var elapsed time.Duration
	var redisCPU, consumerCPU, reads, switches float64
	cmds := map[string][2]float64{}
	b.ResetTimer()
	for op := range b.N {
		tasks := make([]topics.Task, nTasks)
		for i := range tasks {
			// The sim's latency is 0 unless the input's "sim" member sets one: a zero-latency
			// model gets an input without it, as a real model's input would be.
			sim := ""
			if latencyMs > 0 {
				sim = fmt.Sprintf(`,"sim":{"latencyMs":%d}`, latencyMs)
			}
			tasks[i] = topics.Task{TaskID: fmt.Sprintf("f%d-%d", op, i), Stage: fleetStage, Tenant: "acme",
				Input: json.RawMessage(fmt.Sprintf(`{"question":"q%d-%d","answer":"a"%s}`, op, i/perKey, sim))}
		}
		from := "$"
		if impl != "bare" {
			last, err := e.rdb.XRevRangeN(e.ctx, results, "+", "-", 1).Result()
			if err != nil {
				b.Fatal(err)
			}
			from = "0"
			if len(last) > 0 {
				from = last[0].ID
			}
		}
		cpu0, ccpu0, stats0, reads0 := fleetRedisCPU(b, e.rdb), fleetProcCPU(b, pids), fleetCommandStats(b, e.rdb), fleetReads(b, e.rdb)
		cs0 := fleetProcSwitches(b, pids)
		start := time.Now()
		if _, err := e.w.EnqueueTasks(e.ctx, tasks); err != nil {
			b.Fatal(err)
		}
		switch impl {
		case "flightdeck", "flightdeck-archive", "flightdeck-traced", "flightdeck-traced-10pct", "floor", "floor-scripts":
			fleetAwaitEvents(b, e.rdb, results, from, nTasks)
		case "bare":
			fleetAwaitDrained(b, e.rdb, stream)
		}
		elapsed += time.Since(start)
		redisCPU += fleetRedisCPU(b, e.rdb) - cpu0
		consumerCPU += fleetProcCPU(b, pids) - ccpu0
		switches += fleetProcSwitches(b, pids) - cs0
		reads += fleetReads(b, e.rdb) - reads0
		for name, v := range fleetCommandStats(b, e.rdb) {
			c := cmds[name]
			cmds[name] = [2]float64{c[0] + v[0] - stats0[name][0], c[1] + v[1] - stats0[name][1]}
		}
	}
	b.StopTimer()
	n := float64(b.N * nTasks)
	b.ReportMetric(n/elapsed.Seconds(), "tasks/s")
	b.ReportMetric(redisCPU/n*1e6, "redis-us/task")
	b.ReportMetric(consumerCPU/n*1e6, "consumer-us/task")
	b.ReportMetric(switches/n, "consumer-cs/task")
	b.ReportMetric(cmds["fcall"][1]/n, "fcall-us/task")
	b.ReportMetric(reads/n, "reads/task")
	if recv != nil {
		time.Sleep(6 * time.Second) // the consumers export every 5 s by default
		b.ReportMetric(float64(len(recv.Spans(nil)))/n, "spans/task")
	}
	if os.Getenv("FLEET_COMMANDSTATS") == "1" {
		names := make([]string, 0, len(cmds))
		for name, v := range cmds {
			if v[0] > 0 {
				names = append(names, name)
			}
		}
		sort.Slice(names, func(i, j int) bool { return cmds[names[i]][1] > cmds[names[j]][1] })
		for _, name := range names {
			b.Logf("%-24s %8.3f calls/task %8.2f us/task", name, cmds[name][0]/n, cmds[name][1]/n)
		}
	}
	b.ReportMetric(0, "ns/op")
}

// fleetAwaitEvents reads the result stream after from until n events arrived.
func fleetAwaitEvents(b *testing.B, rdb redis.UniversalClient, results, from string, n int) {
	b.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	seen := 0
	for seen < n {
		res, err := rdb.XRead(ctx, &redis.XReadArgs{Streams: []string{results, from}, Count: 1000, Block: time.Second}).Result()
		if err == redis.Nil {
			continue
		}
		if err != nil {
			b.Fatalf("after %d of %d events: %v", seen, n, err)
		}
		for _, s := range res {
			seen += len(s.Messages)
			from = s.Messages[len(s.Messages)-1].ID
		}
	}
}

// fleetAwaitDrained waits until the group has read every entry of stream and none is pending.
func fleetAwaitDrained(b *testing.B, rdb redis.UniversalClient, stream string) {
	b.Helper()
	deadline := time.Now().Add(2 * time.Minute)
	for {
		groups, err := rdb.XInfoGroups(context.Background(), stream).Result()
		if err != nil {
			b.Fatal(err)
		}
		for _, g := range groups {
			if g.Name == topics.ConsumerGroup && g.Lag == 0 && g.Pending == 0 {
				return
			}
		}
		if time.Now().After(deadline) {
			b.Fatalf("not drained: %+v", groups)
		}
		time.Sleep(time.Millisecond)
	}
}

// fleetRedisCPU is Redis's CPU time so far (user + sys), in seconds.
func fleetRedisCPU(b *testing.B, rdb redis.UniversalClient) float64 {
	b.Helper()
	var total float64
	for _, line := range []string{"used_cpu_sys", "used_cpu_user"} {
		n, err := redistest.InfoNumber(context.Background(), rdb, "cpu", line, "")
		if err != nil {
			b.Fatal(err)
		}
		total += n
	}
	return total
}

// fleetReads is how many times Redis has read from its clients so far (INFO stats
// total_reads_processed): about one per round trip, however many commands it carried.
func fleetReads(b *testing.B, rdb redis.UniversalClient) float64 {
	b.Helper()
	n, err := redistest.InfoNumber(context.Background(), rdb, "stats", "total_reads_processed", "")
	if err != nil {
		b.Fatal(err)
	}
	return n
}

// fleetCommandStats is Redis's INFO commandstats so far: per command, its calls and its µs.
// Commands run from a function count both as FCALL and as themselves.
func fleetCommandStats(b *testing.B, rdb redis.UniversalClient) map[string][2]float64 {
	b.Helper()
	info, err := rdb.Info(context.Background(), "commandstats").Result()
	if err != nil {
		b.Fatal(err)
	}
	out := map[string][2]float64{}
	for _, line := range strings.Split(info, "\n") {
		name, rest, ok := strings.Cut(strings.TrimSpace(line), ":")
		if !ok || !strings.HasPrefix(name, "cmdstat_") {
			continue
		}
		var calls, usec float64
		for _, kv := range strings.Split(rest, ",") {
			k, v, _ := strings.Cut(kv, "=")
			switch k {
			case "calls":
				calls, _ = strconv.ParseFloat(v, 64)
			case "usec":
				usec, _ = strconv.ParseFloat(v, 64)
			}
		}
		out[strings.TrimPrefix(name, "cmdstat_")] = [2]float64{calls, usec}
	}
	return out
}

// fleetProcCPU is the CPU time so far (user + sys) of the processes pids, in seconds.
func fleetProcCPU(b *testing.B, pids []int) float64 {
	b.Helper()
	var total float64
	for _, pid := range pids {
		raw, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
		if err != nil {
			b.Fatal(err)
		}
		// The fields after the command name (which may hold spaces) start after its ')'.
		f := strings.Fields(string(raw[strings.LastIndexByte(string(raw), ')')+1:]))
		utime, _ := strconv.ParseFloat(f[11], 64)
		stime, _ := strconv.ParseFloat(f[12], 64)
		total += (utime + stime) / 100 // clock ticks (USER_HZ is 100 on Linux)
	}
	return total
}

// fleetProcSwitches is how many times the threads of the processes pids have given up their
// CPU so far, waiting (voluntary_ctxt_switches) or preempted (nonvoluntary_ctxt_switches).
// A voluntary one is a sleep and a wake-up of a thread. The count moves far less with the load
// of a shared machine than CPU time does.
func fleetProcSwitches(b *testing.B, pids []int) float64 {
	b.Helper()
	var total float64
	for _, pid := range pids {
		dirs, err := os.ReadDir("/proc/" + strconv.Itoa(pid) + "/task")
		if err != nil {
			b.Fatal(err)
		}
		for _, d := range dirs {
			raw, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/task/" + d.Name() + "/status")
			if err != nil {
				continue // the thread ended meanwhile
			}
			for _, line := range strings.Split(string(raw), "\n") {
				if k, v, ok := strings.Cut(line, ":"); ok && strings.HasSuffix(k, "ctxt_switches") {
					n, _ := strconv.ParseFloat(strings.TrimSpace(v), 64)
					total += n
				}
			}
		}
	}
	return total
}

// fleetQuiet drops go-redis's internal log lines.
type fleetQuiet struct{}

func (fleetQuiet) Printf(context.Context, string, ...any) {}
