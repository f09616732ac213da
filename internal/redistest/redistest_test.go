package redistest_test

import (
	"context"
	"testing"
	"time"

	"github.com/flightdeck-ai/flightdeck/internal/redistest"
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
