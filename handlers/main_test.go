package handlers_test

import (
	"os"
	"testing"

	"github.com/flightdeck-ai/flightdeck/internal/testkit/redistest"
)

// TestMain runs the package's tests and examples (redistest.Shared.RunMain).
func TestMain(m *testing.M) { os.Exit(examples.RunMain(m)) }

// examples is the Redis server the examples share (an Example has no *testing.T).
var examples redistest.Shared

// redisURL returns the examples' private redis-server, emptied, so that each example starts
// from nothing (never the REDIS_URL server: the examples empty it).
func redisURL() string { return examples.URL() }
