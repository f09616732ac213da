package client

import (
	"testing"
)

// TestGapFreeFailureNotFinal: a free failure (a limiter's wait) with its attempts at
// maxAttempts is still retrying, not the task's final outcome.
func TestGapFreeFailureNotFinal(t *testing.T) {
	m := map[string]string{"status": "FAILED", "retryable": "1", "free": "1", "attempts": "1",
		"policy": "5000 120000 0 600000 60000 1", "errorType": "rate_limited", "errorCode": "limiter_requests",
		"retryAt": "99999999999999"}
	ev, final := finalEvent(Receipt{TaskID: "t", RequestKey: "k", Stage: "s"}, m, nil, "ref")
	if final {
		t.Errorf("a free limiter wait is reported final: %+v", ev)
	}
}
