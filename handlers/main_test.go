package handlers_test

import (
	"fmt"
	"os"
	"testing"

	"github.com/flightdeck-ai/flightdeck/internal/testkit/redistest"
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
	defer examples.Stop()
	return m.Run()
}

// examples is the Redis server the examples share (an Example has no *testing.T).
var examples redistest.Shared

// redisURL returns the examples' private redis-server, emptied, so that each example starts
// from nothing (never the REDIS_URL server: the examples empty it).
func redisURL() string { return examples.URL() }
