package flight_test

import (
	"path/filepath"
	"strconv"
	"sync/atomic"
	"testing"

	"github.com/flightdeck-ai/flightdeck/flight"
)

// BenchmarkHeldOwnerPath measures what the held set costs one owner task that runs the model
// and whose complete Redis takes: Spooled (run), Enter, Held (own), Hold, release, leave. Keys
// are unique per task; spooledOthers outcomes of other keys wait in the spool (an outage's
// backlog).
func BenchmarkHeldOwnerPath(b *testing.B) {
	for _, bc := range []struct {
		name          string
		size          int
		spooledOthers int
	}{{"1KiB", 1 << 10, 0}, {"64KiB", 64 << 10, 0}, {"1KiB-1000spooled", 1 << 10, 1000}} {
		b.Run(bc.name, func(b *testing.B) {
			sp, err := flight.OpenSpool(filepath.Join(b.TempDir(), "s.jsonl"))
			if err != nil {
				b.Fatal(err)
			}
			defer sp.Close()
			for i := range bc.spooledOthers {
				o := flight.Outcome{Stage: "s", Key: "other-" + strconv.Itoa(i), Token: 1, Result: []byte(`"x"`)}
				if err := sp.Add(o); err != nil {
					b.Fatal(err)
				}
			}
			result := make([]byte, bc.size)
			b.ReportAllocs()
			b.ResetTimer()
			var n atomic.Int64
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					key := "k-" + strconv.FormatInt(n.Add(1), 10)
					_ = sp.Spooled(key)
					leave := sp.Enter(key)
					if _, _, ok := sp.Held(key); ok {
						b.Fatal("held")
					}
					sp.Hold(key, 1, result)(true)
					leave()
				}
			})
		})
	}
}
