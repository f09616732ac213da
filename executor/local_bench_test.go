package executor_test

import (
	"context"
	"strconv"
	"testing"

	"github.com/flightdeck-ai/flightdeck/executor"
	"golang.org/x/sync/singleflight"
)

// BenchmarkLocal measures one Do on a small set of hot keys with a trivial fn, for executor.Local
// (level 1) beside x/sync's singleflight.Group.Do (no context, no panic safety) and
// singleflight.Group.DoChan (what Local builds on), in the same run, so that the ratio is the
// overhead of level 1.
func BenchmarkLocal(b *testing.B) {
	keys := make([]string, 8)
	for i := range keys {
		keys[i] = "key-" + strconv.Itoa(i)
	}
	ctx := context.Background()

	b.Run("executor.Local", func(b *testing.B) {
		var l executor.Local[int]
		fn := func(context.Context) (int, error) { return 1, nil }
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			i := 0
			for pb.Next() {
				if _, err := l.Do(ctx, keys[i%len(keys)], fn); err != nil {
					b.Error(err)
				}
				i++
			}
		})
	})
	b.Run("x/sync.singleflight", func(b *testing.B) {
		var g singleflight.Group
		fn := func() (any, error) { return 1, nil }
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			i := 0
			for pb.Next() {
				if _, err, _ := g.Do(keys[i%len(keys)], fn); err != nil {
					b.Error(err)
				}
				i++
			}
		})
	})
	b.Run("x/sync.singleflight.DoChan", func(b *testing.B) {
		var g singleflight.Group
		fn := func() (any, error) { return 1, nil }
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			i := 0
			for pb.Next() {
				if r := <-g.DoChan(keys[i%len(keys)], fn); r.Err != nil {
					b.Error(r.Err)
				}
				i++
			}
		})
	})
}
