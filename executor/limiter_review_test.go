package executor_test

import (
	"context"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/flightdeck-ai/flightdeck/flight"
	"github.com/flightdeck-ai/flightdeck/internal/testkit/redistest"
	"github.com/flightdeck-ai/flightdeck/topics"
)

func sideLimiter(t *testing.T, srv *redistest.Server, prefix string, name string, l flight.Limit) *flight.Limiter {
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr()})
	t.Cleanup(func() { _ = rdb.Close() })
	c, err := flight.NewCoordinator(flight.Config{Client: rdb, Keyspace: topics.Keyspace{Prefix: prefix}})
	if err != nil {
		t.Fatal(err)
	}
	lim, err := c.NewLimiter(name, l)
	if err != nil {
		t.Fatal(err)
	}
	return lim
}

// TestExecutorWaitsOutALimiterHold: behind a limiter hold longer than the lease the owner
// records a free failure, and the caller waits for the flight's retryAt without spinning
// acquire and follow against Redis.
func TestExecutorWaitsOutALimiterHold(t *testing.T) {
	srv := redistest.Start(t, nil)
	prefix := redistest.Prefix()
	opt := fastPolicy()
	l := flight.Limit{RequestsPerMinute: 600}
	opt.Limiter, opt.Limit = "exec", &l
	n := newNode(t, srv, prefix, "n1", opt)
	side := sideLimiter(t, srv, prefix, "exec", l)
	res, th, err := side.Take(context.Background(), "x", 0, time.Minute)
	if err != nil || th.Wait != 0 {
		t.Fatal(th, err)
	}
	if err := side.Settle(context.Background(), res, nil, flight.Remaining{Requests: -1, Tokens: -1}, flight.CallLimited, 3*time.Second); err != nil {
		t.Fatal(err)
	}
	before := n.cmds.n.Load()
	start := time.Now()
	fn := func(ctx context.Context, _ func()) ([]byte, error) { return []byte(`"ok"`), nil }
	out, err := n.e.Do(context.Background(), stage, "k1", fn)
	cmds := n.cmds.n.Load() - before
	t.Logf("Do: %s %v after %v, %d Redis commands", out.Value, err, time.Since(start), cmds)
	if cmds > 200 {
		t.Errorf("%d Redis commands for one call that waited out a 3 s limiter hold", cmds)
	}
}
