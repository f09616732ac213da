package redistest_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/flightdeck-ai/flightdeck/internal/testkit/redistest"
)

func TestStopRestartPause(t *testing.T) {
	s := redistest.Start(t, nil)
	c := s.Client()
	ctx := context.Background()
	if err := c.Set(ctx, "k", "v", 0).Err(); err != nil {
		t.Fatal(err)
	}
	s.Stop()
	if err := c.Ping(ctx).Err(); err == nil {
		t.Fatal("ping answered after Stop")
	}
	s.Restart()
	if err := c.Ping(ctx).Err(); err != nil {
		t.Fatalf("ping after Restart: %v", err)
	}
	if n := c.Exists(ctx, "k").Val(); n != 0 {
		t.Error("data survived a restart of a server without persistence")
	}
	s.Pause()
	pctx, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
	defer cancel()
	if err := c.Ping(pctx).Err(); err == nil {
		t.Error("a paused server answered")
	}
	s.Resume()
	if err := c.Ping(ctx).Err(); err != nil {
		t.Fatalf("ping after Resume: %v", err)
	}
}

func TestTLSAndACL(t *testing.T) {
	s := redistest.Start(t, &redistest.Options{TLS: true, ACL: []string{"user app on >s3cret ~app:* +@all"}})
	ctx := context.Background()
	if got := s.URL(); got != "rediss://"+s.Addr() {
		t.Errorf("URL %q", got)
	}
	if err := s.Client().Set(ctx, "k", "v", 0).Err(); err != nil {
		t.Fatalf("default user over TLS: %v", err)
	}
	cfg, err := s.TLS().ClientConfig(true)
	if err != nil {
		t.Fatal(err)
	}
	app := redis.NewClient(&redis.Options{Addr: s.Addr(), Username: "app", Password: "s3cret", TLSConfig: cfg})
	defer app.Close()
	if err := app.Set(ctx, "app:k", "v", 0).Err(); err != nil {
		t.Fatalf("ACL user with a client certificate: %v", err)
	}
	if err := app.Get(ctx, "k").Err(); err == nil || !strings.Contains(err.Error(), "NOPERM") {
		t.Errorf("ACL user read a key outside its pattern: %v", err)
	}
	plain := redis.NewClient(&redis.Options{Addr: s.Addr(), MaxRetries: -1})
	defer plain.Close()
	if err := plain.Ping(ctx).Err(); err == nil {
		t.Error("a TLS-only server answered plain TCP")
	}
	s.Restart()
	if err := app.Ping(ctx).Err(); err != nil {
		t.Fatalf("ACL user after Restart: %v", err)
	}
}
