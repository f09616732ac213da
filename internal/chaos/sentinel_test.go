package chaos

import (
	"context"
	"syscall"
	"testing"
	"time"
)

// TestSentinelKillPromotes: the run's Sentinel deployment serves writes through its failover
// client; KillMaster leaves every sentinel naming the other server, which answers as master
// and kept the writes; RestartMaster brings the killed server back as its replica, in sync.
func TestSentinelKillPromotes(t *testing.T) {
	s, err := startSentinel(t.TempDir(), t.Logf)
	if err != nil {
		t.Skip(err) // no redis-server here; `make deps` installs it
	}
	defer s.stop(syscall.SIGKILL)
	c := sentinelFailoverClient(s)
	defer c.Close()
	ctx := context.Background()
	if err := c.Set(ctx, "k", 1, 0).Err(); err != nil {
		t.Fatal(err)
	}
	if n, err := c.Wait(ctx, 1, 2*time.Second).Result(); err != nil || n != 1 {
		t.Fatalf("WAIT: %d %v", n, err)
	}
	before := s.named(ctx)
	if err := s.KillMaster(0); err != nil {
		t.Fatal(err)
	}
	after := s.named(ctx)
	if after == "" || after == before {
		t.Fatalf("master %q before the kill, %q after", before, after)
	}
	if !s.ready(10 * time.Second) {
		t.Fatal("no master answers after the promotion")
	}
	if v, err := c.Get(ctx, "k").Int(); err != nil || v != 1 {
		t.Errorf("after the promotion: k = %v, %v", v, err)
	}
	if err := s.RestartMaster(0); err != nil {
		t.Fatal(err)
	}
	if why := s.replicaUp(ctx); why != "" {
		t.Errorf("after the restart: %s", why)
	}
}
