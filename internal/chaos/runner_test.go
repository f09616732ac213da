package chaos

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/flightdeck-ai/flightdeck/archive/postgres"
	"github.com/flightdeck-ai/flightdeck/flight"
	"github.com/flightdeck-ai/flightdeck/handlers"
	"github.com/flightdeck-ai/flightdeck/topics"
)

func TestStageYAMLLoads(t *testing.T) {
	path := filepath.Join(t.TempDir(), "stages.yaml")
	if err := os.WriteFile(path, []byte(stageYAML(15*time.Minute, "replicated")), 0o600); err != nil {
		t.Fatal(err)
	}
	stages, err := handlers.LoadStages(path, chaosStages)
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range stages {
		if s.Lease != lease || s.HeartbeatInterval != heartbeatInterval || s.ResultTTL != 15*time.Minute ||
			s.RunningTTL != runningTTL || s.FailureTTL != failureTTL || s.Durability != "replicated" {
			t.Errorf("%s: lease %v heartbeat %v resultTTL %v runningTTL %v failureTTL %v", s.Name, s.Lease,
				s.HeartbeatInterval, s.ResultTTL, s.RunningTTL, s.FailureTTL)
		}
	}
	// An attempt may expire only when its owner stopped: runningTTL outlives the longest
	// simulated call by a second.
	if runningTTL < maxLatency+time.Second {
		t.Errorf("runningTTL %v, longest simulated call %v", runningTTL, maxLatency)
	}
	for id := range 2000 {
		if l := time.Duration(specFor(1, id).LatencyMs) * time.Millisecond; l > maxLatency {
			t.Fatalf("key %d: latency %v above maxLatency %v", id, l, maxLatency)
		}
	}
}

func TestKeysAreSeededAndValid(t *testing.T) {
	slow, fail := 0, 0
	for id := range 400 {
		a, b := specFor(7, id), specFor(7, id)
		if a != b {
			t.Fatalf("key %d: %+v then %+v", id, a, b)
		}
		if a.LatencyMs > lease.Milliseconds() {
			slow++
		}
		if a.Fail != "" {
			fail++
		}
		tk := taskFor(7, id, "t1", time.Now())
		if _, err := handlers.TaskKey(tk); err != nil {
			t.Fatal(err)
		}
		if err := tk.Validate(topics.Limits{}.WithDefaults()); err != nil {
			t.Fatal(err)
		}
	}
	if slow < 30 || fail < 10 {
		t.Errorf("%d slow and %d failing keys of 400; want some of each", slow, fail)
	}
	k1, _ := handlers.TaskKey(taskFor(7, 3, "a", time.Now()))
	k2, _ := handlers.TaskKey(taskFor(7, 3, "b", time.Now().Add(time.Hour)))
	if k1 != k2 {
		t.Error("two tasks of one key id have different flight keys")
	}
}

func TestProducerWindow(t *testing.T) {
	p := &producer{keys: 20, keyLife: 10 * time.Second}
	if got := p.window(0); got != 0 {
		t.Errorf("window(0) = %d", got)
	}
	if got := p.window(10 * time.Second); got != 20 {
		t.Errorf("window(10s) = %d, want 20 (a new key every 500ms)", got)
	}
}

// TestRedisRestartKeepsData: the run's redis-server keeps its data across SIGKILL and
// SIGTERM restarts on the same port (AOF, fsync always); the data-loss restart
// (restartEmpty) leaves it empty on the same port, and it persists again after that.
func TestRedisRestartKeepsData(t *testing.T) {
	if _, err := os.Stat("/proc/self"); err != nil {
		t.Skip("needs Linux")
	}
	rs, err := startRedis(t.TempDir())
	if err != nil {
		t.Skip(err) // no redis-server here; `make deps` installs it
	}
	defer rs.stop(syscall.SIGKILL)
	c := redis.NewClient(&redis.Options{Addr: rs.Addr(), ContextTimeoutEnabled: true})
	defer c.Close()
	ctx := context.Background()
	for i, sig := range []syscall.Signal{syscall.SIGKILL, syscall.SIGTERM} {
		if err := c.Set(ctx, "k", i, 0).Err(); err != nil {
			t.Fatal(err)
		}
		if err := rs.restart(sig, 10*time.Millisecond); err != nil {
			t.Fatal(err)
		}
		if v, err := c.Get(ctx, "k").Int(); err != nil || v != i {
			t.Fatalf("after %v: k = %v, %v; want %d", sig, v, err, i)
		}
	}
	rs.signal(syscall.SIGSTOP)
	pctx, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
	defer cancel()
	if err := c.Ping(pctx).Err(); err == nil {
		t.Error("a paused server answered")
	}
	rs.signal(syscall.SIGCONT)
	if err := c.Ping(ctx).Err(); err != nil {
		t.Fatal(err)
	}

	if err := c.Set(ctx, "k", 1, 0).Err(); err != nil {
		t.Fatal(err)
	}
	if err := rs.restartEmpty(10 * time.Millisecond); err != nil {
		t.Fatal(err)
	}
	if n, err := c.Exists(ctx, "k").Result(); err != nil || n != 0 {
		t.Fatalf("after the data loss: exists k = %d, %v; want 0", n, err)
	}
	if err := c.Set(ctx, "k2", 2, 0).Err(); err != nil {
		t.Fatal(err)
	}
	if err := rs.restart(syscall.SIGKILL, 10*time.Millisecond); err != nil {
		t.Fatal(err)
	}
	if v, err := c.Get(ctx, "k2").Int(); err != nil || v != 2 {
		t.Fatalf("after a restart: k2 = %v, %v; want 2", v, err)
	}
}

// TestPostgresArchive: the run's PostgreSQL takes the archive's schema and rows, and stop
// removes its directory.
func TestPostgresArchive(t *testing.T) {
	if testing.Short() {
		t.Skip("starts PostgreSQL")
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	pg, err := startPostgres(ctx, filepath.Join(t.TempDir(), "postgres.log"))
	if errors.Is(err, ErrNoPostgres) {
		t.Skip(err)
	}
	if err != nil {
		t.Fatal(err)
	}
	defer pg.stop()
	store, err := postgres.Open(ctx, postgres.Config{URL: pg.URL(), Deployment: "test"})
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	a := flight.Archived{Key: "k", Stage: "s", Tenant: "t", Status: flight.StatusSucceeded, Token: 7, Attempts: 1,
		Result: []byte(`{"r":1}`), FinishedAt: time.Now(), Retention: time.Hour}
	if n, err := store.Put(ctx, []flight.Archived{a}); err != nil || n != 1 {
		t.Fatalf("put: %d, %v", n, err)
	}
	got, err := store.GetMany(ctx, []string{"k", "other"})
	if err != nil || len(got) != 1 || got["k"].Token != 7 {
		t.Fatalf("get: %+v, %v", got, err)
	}
	store.Close()
	pg.stop()
	if _, err := os.Stat(pg.dir); !os.IsNotExist(err) {
		t.Errorf("the server's directory is left: %v", err)
	}
}

func TestParseClusterNodes(t *testing.T) {
	const s = `07c3 127.0.0.1:30004@40004 slave e7d1 0 1426238317239 4 connected
67ed 127.0.0.1:30002@40002 master - 0 1426238316232 2 connected 5461-10922
292f 127.0.0.1:30003@40003 master - 0 1426238318243 3 connected 10923-16383
6ec2 127.0.0.1:30005@40005 master,fail - 1426238316232 1426238316232 5 disconnected
824f 127.0.0.1:30006@40006 master - 0 1426238317741 6 connected 0-5460
e7d1 127.0.0.1:30001@40001 myself,master,fail? - 0 0 1 connected 12000
`
	got := liveMasters(parseClusterNodes(s))
	want := []string{"127.0.0.1:30002", "127.0.0.1:30003", "127.0.0.1:30006"}
	if !slices.Equal(got, want) {
		t.Fatalf("live masters %v, want %v", got, want)
	}
}
