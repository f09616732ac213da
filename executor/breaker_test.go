package executor_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/flightdeck-ai/flightdeck/executor"
	"github.com/flightdeck-ai/flightdeck/flight"
)

// TestBreakerIgnoresUnreplicatedCalls: calls that no replica acknowledged (Redis answered
// them) never open the breaker, however many; calls that fail to reach Redis do.
func TestBreakerIgnoresUnreplicatedCalls(t *testing.T) {
	b := executor.NewBreaker(executor.BreakerConfig{FailureThreshold: 3, OpenTimeout: time.Minute}, nil)
	for range 10 {
		_, err := executor.Guard(b, func() (int, error) {
			return 0, &flight.NotReplicatedError{Op: "acquire", Key: "k", Token: 1}
		})
		if !errors.Is(err, flight.ErrNotReplicated) || !errors.Is(err, flight.ErrCoordinationUnavailable) {
			t.Fatalf("guarded call: %v, want ErrNotReplicated as a coordination failure", err)
		}
	}
	if s := b.State(); s != "closed" {
		t.Fatalf("breaker %s after 10 unreplicated calls, want closed", s)
	}
	for range 3 {
		_, _ = executor.Guard(b, func() (int, error) { return 0, errors.New("dial tcp: connection refused") })
	}
	if s := b.State(); s != "open" {
		t.Errorf("breaker %s after 3 failed calls, want open", s)
	}
}

// TestReplicatedStageBudgets: a replicated stage's default coordination budget leaves room for
// the replica's acknowledgement; a budget no longer than the replication timeout is refused.
func TestReplicatedStageBudgets(t *testing.T) {
	rdb := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"}) // never dialled: New only checks
	t.Cleanup(func() { _ = rdb.Close() })
	coord, err := flight.NewCoordinator(flight.Config{Client: rdb})
	if err != nil {
		t.Fatal(err)
	}
	pol := flight.Policy{Durability: flight.DurabilityReplicated, ReplicationTimeout: time.Second}
	newExec := func(b executor.Budget) error {
		e, err := executor.New(executor.Config{Coordinator: coord, SpoolDir: t.TempDir(),
			Stages: map[string]executor.StageOptions{"s": {Mode: executor.ModeDistributedOnly, Policy: pol, Budget: b}}})
		if err == nil {
			_ = e.Close()
		}
		return err
	}
	if err := newExec(executor.Budget{}); err != nil {
		t.Errorf("defaults: %v", err)
	}
	if err := newExec(executor.Budget{Coordination: 500 * time.Millisecond}); err == nil || !strings.Contains(err.Error(), "budget.coordination") {
		t.Errorf("a 500ms coordination budget beside a 1s replication timeout: %v, want a refusal", err)
	}
	if err := newExec(executor.Budget{Result: time.Second}); err == nil || !strings.Contains(err.Error(), "budget.result") {
		t.Errorf("a 1s result budget beside a 1s replication timeout: %v, want a refusal", err)
	}
}
