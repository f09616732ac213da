package handlers_test

import (
	"context"
	"fmt"
	"os"
	"sync"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/flightdeck-ai/flightdeck/internal/redistest"
)

// TestMain runs the package's tests and examples with the spool directory default
// (FLIGHTDECK_SPOOL_DIR, read by a Config without SpoolDir) in a private temporary directory
// rather than the user's home, then stops the examples' Redis (redisURL).
func TestMain(m *testing.M) {
	code := run(m)
	os.Exit(code)
}

// run is TestMain up to the exit, so that its deferred cleanups run.
func run(m *testing.M) int {
	spool, err := os.MkdirTemp("", "flightdeck-handlers-test")
	if err != nil {
		fmt.Fprintln(os.Stderr, "spool directory:", err)
		return 1
	}
	defer os.RemoveAll(spool)
	if err := os.Setenv("FLIGHTDECK_SPOOL_DIR", spool); err != nil {
		fmt.Fprintln(os.Stderr, "FLIGHTDECK_SPOOL_DIR:", err)
		return 1
	}
	defer examples.cleanup()
	return m.Run()
}

// examples holds the Redis server the examples share: an Example has no *testing.T to hand
// redistest.Start, so they use this process-long stand-in.
var examples exampleTB

// redisURL returns the URL of a private redis-server for the examples, started on first use
// on a free loopback port (never the REDIS_URL server: the examples empty it) and emptied
// with FLUSHALL on every call, so that each example starts from nothing: no stored result of
// an earlier run (go test -count) answers its tasks, and no stream holds earlier events.
// Examples run one at a time, each stopping its consumers before it returns.
func redisURL() string {
	examples.once.Do(func() {
		examples.srv = redistest.Start(&examples, nil)
		examples.rdb = examples.srv.Client()
	})
	if err := examples.rdb.FlushAll(context.Background()).Err(); err != nil {
		panic(fmt.Sprintf("examples: FLUSHALL: %v", err))
	}
	return examples.srv.URL()
}

// exampleTB is the testing.TB of the examples' Redis server. It implements what
// redistest.Start and its Server use (Helper, Fatalf, TempDir, Cleanup); any other method
// panics on the embedded nil TB. Its cleanups run when TestMain calls cleanup.
type exampleTB struct {
	testing.TB

	once sync.Once
	srv  *redistest.Server
	rdb  *redis.Client

	mu       sync.Mutex
	cleanups []func()
}

// Helper does nothing: there is no test to attribute lines to.
func (*exampleTB) Helper() {}

// Fatalf panics: the example that asked for Redis fails with the message.
func (*exampleTB) Fatalf(format string, args ...any) { panic(fmt.Sprintf(format, args...)) }

// TempDir returns a new temporary directory, removed by cleanup.
func (tb *exampleTB) TempDir() string {
	dir, err := os.MkdirTemp("", "flightdeck-example")
	if err != nil {
		tb.Fatalf("examples: temporary directory: %v", err)
	}
	tb.Cleanup(func() { _ = os.RemoveAll(dir) })
	return dir
}

// Cleanup registers f to run in cleanup, last registered first.
func (tb *exampleTB) Cleanup(f func()) {
	tb.mu.Lock()
	defer tb.mu.Unlock()
	tb.cleanups = append(tb.cleanups, f)
}

// cleanup runs the registered functions, last registered first.
func (tb *exampleTB) cleanup() {
	tb.mu.Lock()
	fs := tb.cleanups
	tb.cleanups = nil
	tb.mu.Unlock()
	for i := len(fs) - 1; i >= 0; i-- {
		fs[i]()
	}
}
