package lua_test

import (
	"context"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/flightdeck-ai/flightdeck/internal/testkit/redistest"
	"github.com/flightdeck-ai/flightdeck/lua"
)

// BenchmarkBatcher: 8 and 64 callers each make FCALLs of a function that returns at once,
// through one Batcher, as a consumer's handlers make their flight calls. ns/op is the wall
// time per call of the whole set, with Redis on the same machine; cpu-ns/call is the CPU the
// benchmark's process spent per call (the callers, the batcher, go-redis); calls/pipeline is
// how many calls shared a pipeline.
func BenchmarkBatcher(b *testing.B) {
	r := redistest.New(b)
	ctx := context.Background()
	if err := r.Client.FunctionLoadReplace(ctx, echoLib).Err(); err != nil {
		b.Fatal(err)
	}
	for _, callers := range []int{8, 64} {
		b.Run("callers="+strconv.Itoa(callers), func(b *testing.B) {
			c := redis.NewClient(r.Client.Options())
			h := &countingHook{}
			c.AddHook(h)
			defer func() { _ = c.Close() }()
			bt := lua.NewBatcher(c)
			defer func() { _ = bt.Close() }()
			b.ReportAllocs()
			b.ResetTimer()
			cpu0 := processCPU(b)
			var wg sync.WaitGroup
			per := b.N/callers + 1
			for range callers {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for range per {
						if err := bt.FCall(ctx, "echo", nil, "v").Err(); err != nil {
							b.Error(err)
							return
						}
					}
				}()
			}
			wg.Wait()
			b.StopTimer()
			b.ReportMetric(float64(processCPU(b)-cpu0)/float64(per*callers), "cpu-ns/call")
			if p := h.pipelines.Load(); p > 0 {
				b.ReportMetric(float64(per*callers)/float64(p), "calls/pipeline")
			}
		})
	}
}

// processCPU is the CPU time, user and system, this process has spent so far.
func processCPU(tb testing.TB) time.Duration {
	tb.Helper()
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		tb.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// BenchmarkExplicitPipeline: one goroutine sends the calls of each set of `calls` as one
// pipeline, as an explicit batch would, for comparison with BenchmarkBatcher.
func BenchmarkExplicitPipeline(b *testing.B) {
	r := redistest.New(b)
	ctx := context.Background()
	if err := r.Client.FunctionLoadReplace(ctx, echoLib).Err(); err != nil {
		b.Fatal(err)
	}
	for _, calls := range []int{8, 64} {
		b.Run("calls="+strconv.Itoa(calls), func(b *testing.B) {
			c := redis.NewClient(r.Client.Options())
			defer func() { _ = c.Close() }()
			b.ReportAllocs()
			b.ResetTimer()
			cpu0 := processCPU(b)
			rounds := b.N/calls + 1
			for range rounds {
				cmds, err := c.Pipelined(ctx, func(p redis.Pipeliner) error {
					for range calls {
						p.FCall(ctx, "echo", nil, "v")
					}
					return nil
				})
				if err != nil || len(cmds) != calls {
					b.Fatal(err)
				}
			}
			b.StopTimer()
			b.ReportMetric(float64(processCPU(b)-cpu0)/float64(rounds*calls), "cpu-ns/call")
		})
	}
}
