package handlers

import (
	"testing"

	"github.com/flightdeck-ai/flightdeck/stream"
)

// TestClaimKeepsAFreeFailure: a parked entry on a flight waiting out a limiter (a free
// failure, attempts at maxAttempts) is kept, not claimed as if the flight had ended.
func TestClaimKeepsAFreeFailure(t *testing.T) {
	m := map[string]string{"status": "FAILED", "retryable": "1", "free": "1", "attempts": "1",
		"policy": "5000 120000 0 600000 60000 1", "updatedAt": "1000", "heartbeatAt": "1000"}
	if v := verdict(stream.Candidate{Parked: true, ID: "1-0", Stream: "s"}, m, 1500); v != stream.Keep {
		t.Errorf("verdict %v, want Keep (the flight retries after its limiter wait)", v)
	}
}
