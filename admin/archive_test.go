package admin_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/flightdeck-ai/flightdeck/admin"
	"github.com/flightdeck-ai/flightdeck/archive/postgres"
	"github.com/flightdeck-ai/flightdeck/flight"
	"github.com/flightdeck-ai/flightdeck/internal/testkit/pgtest"
	"github.com/flightdeck-ai/flightdeck/internal/testkit/redistest"
	"github.com/flightdeck-ai/flightdeck/topics"
)

// TestFlightShowsArchivedRow: with the archive, a flight's detail carries its archived row,
// also for a key that Redis no longer knows; a key neither knows is not found.
func TestFlightShowsArchivedRow(t *testing.T) {
	r := redistest.New(t)
	ctx := context.Background()
	store, err := postgres.Open(ctx, postgres.Config{URL: pgtest.New(t).URL, Deployment: "test"})
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	const key = "ai:interview-evaluation:v1:acme:gone"
	if _, err := store.Put(ctx, []flight.Archived{{Key: key, Stage: "interview-evaluation", Tenant: "acme",
		Status: flight.StatusSucceeded, Token: 42, Attempts: 2, Result: []byte(`{"score":7}`), FinishedAt: time.Now(),
		Retention: time.Hour}}); err != nil {
		t.Fatal(err)
	}
	in, err := admin.New(admin.Config{Client: r.Client, Keyspace: topics.Keyspace{Prefix: r.Prefix},
		Stages: []string{"interview-evaluation"}, Archive: store})
	if err != nil {
		t.Fatal(err)
	}
	d, err := in.Flight(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	if a := d.Archived; a == nil || a.Status != "SUCCEEDED" || a.Token != 42 || a.Attempts != 2 ||
		a.Result != `{"score":7}` || a.Expired || d.Meta.Status != "" {
		t.Errorf("detail %+v, archived %+v", d, d.Archived)
	}
	if d.Claim != nil {
		t.Errorf("claim %+v of a key nobody took over", d.Claim)
	}
	if _, err := in.Flight(ctx, "ai:interview-evaluation:v1:acme:never"); !errors.Is(err, flight.ErrNotFound) {
		t.Errorf("a key nobody knows: %v, want ErrNotFound", err)
	}
	// A key only a takeover claim knows (Redis lost the flight of the owner that took over,
	// before its outcome): its detail shows the claim.
	const claimed = "ai:interview-evaluation:v1:acme:claimed"
	if err := store.Claim(ctx, claimed, 77, time.Hour); err != nil {
		t.Fatal(err)
	}
	d, err = in.Flight(ctx, claimed)
	if err != nil {
		t.Fatal(err)
	}
	if c := d.Claim; c == nil || c.Token != 77 || c.Expired || c.ExpiresAt <= c.ClaimedAt || d.Archived != nil {
		t.Errorf("detail %+v, claim %+v", d, d.Claim)
	}
}
