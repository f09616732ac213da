// Package asynq_test measures asynq (github.com/hibiken/asynq) on the same kind of burst that
// flightdeck's own benchmarks use, so that the two can be read side by side: N small tasks
// enqueued at once by a few producers and drained by in-process asynq servers with a no-op
// handler, on a private redis-server.
package asynq_test

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hibiken/asynq"
	"github.com/redis/go-redis/v9"

	"github.com/flightdeck-ai/flightdeck/internal/testkit/redistest"
)

const (
	burstTasks  = 5000    // tasks per op
	enqueuers   = 8       // producer goroutines per op
	concurrency = 50      // asynq workers per server
	taskType    = "bench" // the one task type the mux serves
	queueName   = "default"
)

// burst is the completion state of one op: the handler counts tasks done and closes done,
// noting the time, when the last one finishes.
type burst struct {
	n    atomic.Int64
	last time.Time // set before done is closed
	done chan struct{}
}

// ran counts one task done, and closes done, noting the time, when it is the last of the op.
func (bu *burst) ran() {
	if bu.n.Add(1) == burstTasks {
		bu.last = time.Now()
		close(bu.done)
	}
}

// startServers starts n asynq servers of workers each on mux, in this process, with the
// settings both benchmarks share: a 10 ms check of empty queues and no logging.
func startServers(b *testing.B, conn asynq.RedisClientOpt, mux *asynq.ServeMux, n, workers int) []*asynq.Server {
	var servers []*asynq.Server
	for range n {
		srv := asynq.NewServer(conn, asynq.Config{
			Concurrency:       workers,
			TaskCheckInterval: 10 * time.Millisecond,
			LogLevel:          asynq.FatalLevel,
		})
		if err := srv.Start(mux); err != nil {
			b.Fatalf("start asynq server: %v", err)
		}
		servers = append(servers, srv)
	}
	return servers
}

// BenchmarkAsynqBurst enqueues burstTasks tasks with enqueuers goroutines per op and waits
// until asynq has run them all. It reports tasks/s (first Enqueue to last handler return),
// and Redis CPU time and Redis write events per task over the op (INFO cpu and stats, read
// before the first Enqueue and after asynq has finished its bookkeeping for the last task).
// servers=1 runs one asynq.Server, servers=2 two in the same process, each with
// concurrency workers.
func BenchmarkAsynqBurst(b *testing.B) {
	rs := redistest.Start(b, nil)
	for _, servers := range []int{1, 2} {
		b.Run("servers="+strconv.Itoa(servers), func(b *testing.B) {
			benchBurst(b, rs, servers)
		})
	}
}

// benchBurst runs the ops of one sub-benchmark against asynq servers started for it.
func benchBurst(b *testing.B, rs *redistest.Server, servers int) {
	ctx := context.Background()
	conn := asynq.RedisClientOpt{Addr: rs.Addr()}
	rdb := rs.Client()

	var cur atomic.Pointer[burst]
	mux := asynq.NewServeMux()
	mux.HandleFunc(taskType, func(context.Context, *asynq.Task) error {
		if bu := cur.Load(); bu != nil {
			bu.ran()
		}
		return nil
	})
	for _, srv := range startServers(b, conn, mux, servers, concurrency) {
		defer srv.Shutdown()
	}
	client := asynq.NewClient(conn) // goroutine safe: shared by the enqueuers
	defer client.Close()
	insp := asynq.NewInspector(conn)
	defer insp.Close()

	processed, err := processedTotal(insp) // the queue's cumulative count after the last op
	if err != nil {
		b.Fatal(err)
	}
	var wall, cpu time.Duration
	var writes int64
	op := 0
	for b.Loop() {
		op++
		payloads := make([][]byte, burstTasks)
		for i := range payloads {
			payloads[i] = fmt.Appendf(nil,
				`{"id":"op%d-task-%05d","tenant":"acme","prompt":"summarise the ticket in one short line"}`, op, i)
		}
		bu := &burst{done: make(chan struct{})}
		cur.Store(bu)
		before, err := redisUsage(ctx, rdb)
		if err != nil {
			b.Fatal(err)
		}

		start := time.Now()
		errs := make(chan error, enqueuers)
		var wg sync.WaitGroup
		for g := range enqueuers {
			wg.Go(func() {
				for i := g; i < burstTasks; i += enqueuers {
					if _, err := client.Enqueue(asynq.NewTask(taskType, payloads[i]), asynq.MaxRetry(0)); err != nil {
						errs <- fmt.Errorf("enqueue task %d: %w", i, err)
						return
					}
				}
			})
		}
		wg.Wait()
		close(errs)
		if err := <-errs; err != nil {
			b.Fatal(err)
		}
		select {
		case <-bu.done:
		case <-time.After(2 * time.Minute):
			b.Fatalf("op %d: %d of %d tasks done after 2m", op, bu.n.Load(), burstTasks)
		}
		wall += bu.last.Sub(start)

		processed += burstTasks
		if err := waitDrained(insp, processed); err != nil {
			b.Fatalf("op %d: %v", op, err)
		}
		after, err := redisUsage(ctx, rdb)
		if err != nil {
			b.Fatal(err)
		}
		cpu += after.cpu - before.cpu
		writes += after.writes - before.writes
	}
	tasks := float64(burstTasks * b.N)
	b.ReportMetric(0, "ns/op")
	b.ReportMetric(tasks/wall.Seconds(), "tasks/s")
	b.ReportMetric(float64(cpu.Microseconds())/tasks, "redis-us/task")
	b.ReportMetric(float64(writes)/tasks, "redis-writes/task")
}

// waitDrained waits until the queue holds no task (pending, active, retry, archived...) and
// asynq has counted processed tasks in all, so that its bookkeeping for the op is over and
// the next op starts from an empty queue.
func waitDrained(insp *asynq.Inspector, processed int) error {
	deadline := time.Now().Add(30 * time.Second)
	for {
		qi, err := insp.GetQueueInfo(queueName)
		if err != nil {
			return fmt.Errorf("queue info: %w", err)
		}
		if qi.Size == 0 && qi.ProcessedTotal >= processed {
			if qi.ProcessedTotal > processed || qi.FailedTotal > 0 {
				return fmt.Errorf("processed %d (want %d), failed %d", qi.ProcessedTotal, processed, qi.FailedTotal)
			}
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("queue not drained after 30s: size %d, processed %d of %d", qi.Size, qi.ProcessedTotal, processed)
		}
		time.Sleep(2 * time.Millisecond)
	}
}

// processedTotal returns how many tasks the queue has processed so far, 0 before it exists
// (an earlier sub-benchmark may have used it).
func processedTotal(insp *asynq.Inspector) (int, error) {
	queues, err := insp.Queues()
	if err != nil {
		return 0, fmt.Errorf("list queues: %w", err)
	}
	if !slices.Contains(queues, queueName) {
		return 0, nil
	}
	qi, err := insp.GetQueueInfo(queueName)
	if err != nil {
		return 0, fmt.Errorf("queue info: %w", err)
	}
	return qi.ProcessedTotal, nil
}

// usage is a reading of the Redis server's own cost counters.
type usage struct {
	cpu    time.Duration // used_cpu_sys + used_cpu_user
	writes int64         // total_writes_processed (write events to clients)
}

// redisUsage reads INFO cpu and stats.
func redisUsage(ctx context.Context, rdb *redis.Client) (usage, error) {
	info, err := rdb.Info(ctx, "cpu", "stats").Result()
	if err != nil {
		return usage{}, fmt.Errorf("INFO cpu stats: %w", err)
	}
	var u usage
	var seen int
	for line := range strings.Lines(info) {
		k, v, ok := strings.Cut(strings.TrimSpace(line), ":")
		if !ok {
			continue
		}
		switch k {
		case "used_cpu_sys", "used_cpu_user":
			s, err := strconv.ParseFloat(v, 64)
			if err != nil {
				return usage{}, fmt.Errorf("INFO %s: %w", k, err)
			}
			u.cpu += time.Duration(s * float64(time.Second))
			seen++
		case "total_writes_processed":
			n, err := strconv.ParseInt(v, 10, 64)
			if err != nil {
				return usage{}, fmt.Errorf("INFO %s: %w", k, err)
			}
			u.writes = n
			seen++
		}
	}
	if seen != 3 {
		return usage{}, fmt.Errorf("INFO cpu stats: %d of 3 fields found", seen)
	}
	return u, nil
}
