package asynq_test

import (
	"context"
	"fmt"
	"runtime"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/hibiken/asynq"

	"github.com/flightdeck-ai/flightdeck/internal/testkit/redistest"
)

// BenchmarkAsynqDrain measures what asynq's workers cost per task, to set beside flightdeck's
// consumer-us/task. Each op enqueues burstTasks tasks while no server runs, then starts two
// asynq servers of workers each (in this process, as BenchmarkAsynqBurst runs them) and
// waits until they have run every task. worker-us/task is this process's CPU time (user +
// sys, getrusage) from just before the servers start, after a GC, until the last handler
// returns, per task: the servers' workers and their Redis clients, with nothing else
// running. tasks/s is the drain's rate and redis-us/task Redis's CPU time over the drain.
func BenchmarkAsynqDrain(b *testing.B) {
	rs := redistest.Start(b, nil)
	for _, workers := range []int{8, concurrency} {
		b.Run("servers=2/workers="+strconv.Itoa(workers), func(b *testing.B) {
			benchDrain(b, rs, workers)
		})
	}
}

// benchDrain runs the ops of one sub-benchmark: enqueue, then drain with fresh servers.
func benchDrain(b *testing.B, rs *redistest.Server, workers int) {
	ctx := context.Background()
	conn := asynq.RedisClientOpt{Addr: rs.Addr()}
	rdb := rs.Client()
	client := asynq.NewClient(conn)
	defer client.Close()
	insp := asynq.NewInspector(conn)
	defer insp.Close()
	processed, err := processedTotal(insp)
	if err != nil {
		b.Fatal(err)
	}
	var wall, worker, redisCPU time.Duration
	op := 0
	for b.Loop() {
		op++
		for i := range burstTasks {
			payload := fmt.Appendf(nil, `{"id":"drain%d-%d-task-%05d","tenant":"acme","prompt":"summarise the ticket in one short line"}`, workers, op, i)
			if _, err := client.Enqueue(asynq.NewTask(taskType, payload), asynq.MaxRetry(0)); err != nil {
				b.Fatalf("enqueue task %d: %v", i, err)
			}
		}
		bu := &burst{done: make(chan struct{})}
		mux := asynq.NewServeMux()
		mux.HandleFunc(taskType, func(context.Context, *asynq.Task) error { bu.ran(); return nil })
		before, err := redisUsage(ctx, rdb)
		if err != nil {
			b.Fatal(err)
		}
		runtime.GC() // the enqueue's garbage is not the workers' to collect
		cpu0 := processCPU(b)
		start := time.Now()
		servers := startServers(b, conn, mux, 2, workers)
		select {
		case <-bu.done:
		case <-time.After(2 * time.Minute):
			b.Fatalf("op %d: %d of %d tasks done after 2m", op, bu.n.Load(), burstTasks)
		}
		worker += processCPU(b) - cpu0
		wall += bu.last.Sub(start)
		processed += burstTasks
		if err := waitDrained(insp, processed); err != nil {
			b.Fatalf("op %d: %v", op, err)
		}
		after, err := redisUsage(ctx, rdb)
		if err != nil {
			b.Fatal(err)
		}
		redisCPU += after.cpu - before.cpu
		for _, srv := range servers {
			srv.Shutdown()
		}
	}
	tasks := float64(burstTasks * b.N)
	b.ReportMetric(0, "ns/op")
	b.ReportMetric(tasks/wall.Seconds(), "tasks/s")
	b.ReportMetric(float64(worker.Microseconds())/tasks, "worker-us/task")
	b.ReportMetric(float64(redisCPU.Microseconds())/tasks, "redis-us/task")
}

// processCPU is the CPU time this process has used so far, user and system.
func processCPU(b *testing.B) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatalf("getrusage: %v", err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
