package handlers

import (
	"context"
	"errors"
	"fmt"
	"net"
	"syscall"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/flightdeck-ai/flightdeck/flight"
)

// TestRedisUnavailableIsNeverPoison: errors caused by Redis being away keep the message
// pending; errors of the task itself (a panic, a bad result) may end in the DLQ.
func TestRedisUnavailableIsNeverPoison(t *testing.T) {
	away := []error{
		&flight.CoordinationError{Err: errors.New("circuit breaker open"), BreakerOpen: true},
		fmt.Errorf("handlers: task t: %w", &net.OpError{Op: "dial", Err: syscall.ECONNREFUSED}),
		fmt.Errorf("handlers: task t: topics: publish 2 events: %w", redis.ErrClosed),
		fmt.Errorf("x: %w", context.DeadlineExceeded),
		errors.New("LOADING Redis is loading the dataset in memory"),
		errors.New("CLUSTERDOWN The cluster is down"),
	}
	for _, err := range away {
		if !redisUnavailable(err) {
			t.Errorf("%v: not recognised as Redis being away", err)
		}
	}
	own := []error{
		errors.New("panic occurred: runtime error: index out of range"),
		fmt.Errorf("handlers: task t: %w", flight.ErrProtocol),
		errors.New("json: cannot unmarshal"),
	}
	for _, err := range own {
		if redisUnavailable(err) {
			t.Errorf("%v: taken for Redis being away (it would never reach the DLQ)", err)
		}
	}
}
