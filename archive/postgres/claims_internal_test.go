package postgres

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/flightdeck-ai/flightdeck/archive"
	"github.com/flightdeck-ai/flightdeck/flight"
	"github.com/flightdeck-ai/flightdeck/internal/testkit/pgtest"
)

// TestClaims: a claim is replaced only by a larger token; the fence is the larger of a key's
// claim and its archived outcome, expired or not; expired claims are purged, live ones kept.
func TestClaims(t *testing.T) {
	ctx := context.Background()
	s, err := Open(ctx, Config{URL: pgtest.New(t).URL, Deployment: "test"})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	fence := func(key string, want int64) {
		t.Helper()
		tok, ok, err := s.Fence(ctx, key)
		if err != nil || ok != (want > 0) || tok != want {
			t.Fatalf("fence of %s: %d %v %v, want %d", key, tok, ok, err, want)
		}
	}
	fence("k", 0)
	if err := s.Claim(ctx, "k", 100, time.Hour); err != nil {
		t.Fatal(err)
	}
	fence("k", 100)
	if err := s.Claim(ctx, "k", 50, time.Hour); err != nil { // an older claim arriving late
		t.Fatal(err)
	}
	fence("k", 100)
	if _, err := s.Put(ctx, []flight.Archived{row("k", 150, `"v"`)}); err != nil {
		t.Fatal(err)
	}
	fence("k", 150)
	if err := s.Claim(ctx, "k", 200, time.Hour); err != nil {
		t.Fatal(err)
	}
	fence("k", 200)

	// An outcome past its retention still fences: its token was issued.
	old := row("old", 300, `"v"`)
	old.FinishedAt, old.Retention = time.Now().Add(-2*time.Hour), time.Hour
	if _, err := s.Put(ctx, []flight.Archived{old}); err != nil {
		t.Fatal(err)
	}
	fence("old", 300)

	if err := s.Claim(ctx, "short", 7, time.Millisecond); err != nil {
		t.Fatal(err)
	}
	time.Sleep(10 * time.Millisecond)
	if n, err := s.PurgeClaims(ctx, 100); err != nil || n != 1 {
		t.Fatalf("purge: %d %v, want the expired claim only", n, err)
	}
	fence("short", 0)
	fence("k", 200)

	// An outcome under a token below the key's claim (the owner that was taken over) is not
	// archived; the claimant's own outcome is.
	if err := s.Claim(ctx, "c", 500, time.Hour); err != nil {
		t.Fatal(err)
	}
	if n, err := s.Put(ctx, []flight.Archived{row("c", 400, `"zombie"`)}); err != nil || n != 0 {
		t.Fatalf("an outcome below the claim: wrote %d, %v", n, err)
	}
	if n, err := s.Put(ctx, []flight.Archived{row("c", 500, `"taker"`)}); err != nil || n != 1 {
		t.Fatalf("the claimant's outcome: wrote %d, %v", n, err)
	}
	if a, ok, err := s.Get(ctx, "c"); err != nil || !ok || string(a.Result) != `"taker"` {
		t.Fatalf("get: %+v %v %v", a, ok, err)
	}

	// The writer answers Fence and Claim before Run (a consumer writes its spool back first),
	// and a call its caller cancelled does not mark the archive away.
	w, err := archive.NewWriter(archive.WriterConfig{Store: s, SpoolDir: t.TempDir(), Name: "w"})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = w.Close(ctx) }()
	if tok, ok, err := w.Fence(ctx, "k"); err != nil || !ok || tok != 200 {
		t.Fatalf("writer fence before Run: %d %v %v", tok, ok, err)
	}
	cut, cancel := context.WithCancel(ctx)
	cancel()
	if err := w.Claim(cut, "k", 900, time.Hour); err == nil {
		t.Fatal("a claim under an ended context succeeded")
	}
	if h := w.Health(); h != "ok" {
		t.Fatalf("health after a claim its caller cancelled: %s", h)
	}
	tiny, cancelTiny := context.WithTimeout(ctx, time.Nanosecond)
	defer cancelTiny()
	time.Sleep(time.Millisecond)
	if _, _, err := w.Fence(tiny, "k"); err == nil {
		t.Fatal("a fence question with no time left succeeded")
	}
	if err := w.Claim(ctx, "k", 901, time.Hour); err != nil || w.Health() != "ok" {
		t.Fatalf("after a question out of a too short bound: claim %v, health %s (the archive is fine)", err, w.Health())
	}

	for _, bad := range []struct {
		key string
		tok int64
	}{{"", 1}, {"k", 0}, {"k", -1}} {
		if err := s.Claim(ctx, bad.key, bad.tok, time.Hour); !errors.Is(err, archive.ErrInvalid) {
			t.Errorf("claim %q %d: %v, want archive.ErrInvalid", bad.key, bad.tok, err)
		}
	}
}
