package postgres

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/flightdeck-ai/flightdeck/flight"
	"github.com/flightdeck-ai/flightdeck/internal/testkit/pgtest"
)

// TestStoreEdges runs, on one private server: a purge racing an upsert of the same key, a
// failure arriving after a result, and a read-only role reading the archive.
func TestStoreEdges(t *testing.T) {
	srv := pgtest.Start(t)
	ctx := context.Background()
	open := func(t *testing.T) *Store {
		s, err := Open(ctx, Config{URL: srv.NewDatabase(t), Deployment: "test"})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(s.Close)
		return s
	}

	// A purge that picked an expired row must not delete it once an upsert made it fresh.
	t.Run("purge keeps a row written again", func(t *testing.T) {
		s := open(t)
		old := row("k", 1, `"old"`)
		old.FinishedAt, old.Retention = time.Now().Add(-2*time.Hour), time.Hour
		if _, err := s.Put(ctx, []flight.Archived{old}); err != nil {
			t.Fatal(err)
		}
		tx, err := s.pool.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		now := time.Now()
		if _, err := tx.Exec(ctx, upsert, s.deployment, []string{"k"}, []string{"s"}, []string{"acme"}, []string{"SUCCEEDED"},
			[]int64{2}, []int32{1}, [][]byte{[]byte(`"fresh"`)}, []string{""}, []string{""}, []string{""},
			[]time.Time{now}, []time.Time{now.Add(30 * 24 * time.Hour)}); err != nil {
			t.Fatal(err)
		}
		done := make(chan error, 1)
		go func() { _, err := s.Purge(ctx, 100); done <- err }()
		time.Sleep(500 * time.Millisecond) // the purge selected k and waits for the row lock
		if err := tx.Commit(ctx); err != nil {
			t.Fatal(err)
		}
		if err := <-done; err != nil {
			t.Fatal(err)
		}
		if a, ok, _ := s.Get(ctx, "k"); !ok || string(a.Result) != `"fresh"` {
			t.Errorf("the row written again was purged: %+v %v", a, ok)
		}
	})

	// A run that should not have happened (a lookup failed) and then expired or failed must
	// not replace the stored result; a newer result does.
	t.Run("a result is never replaced by a failure", func(t *testing.T) {
		s := open(t)
		if _, err := s.Put(ctx, []flight.Archived{row("r", 10, `"R1"`)}); err != nil {
			t.Fatal(err)
		}
		for i, st := range []flight.Status{flight.StatusExpired, flight.StatusFailed, flight.StatusCancelled} {
			bad := row("r", int64(20+i), "")
			bad.Status, bad.Result, bad.ErrorCode = st, nil, "x"
			if n, err := s.Put(ctx, []flight.Archived{bad}); err != nil || n != 0 {
				t.Errorf("%s over a result: wrote %d, %v", st, n, err)
			}
		}
		if n, err := s.Put(ctx, []flight.Archived{row("r", 30, `"R2"`)}); err != nil || n != 1 {
			t.Errorf("a newer result: wrote %d, %v", n, err)
		}
		if a, _, _ := s.Get(ctx, "r"); a.Status != flight.StatusSucceeded || string(a.Result) != `"R2"` {
			t.Errorf("after all: %s %s", a.Status, a.Result)
		}
	})

	// producer inspect may run with a role that can only read.
	t.Run("read-only role", func(t *testing.T) {
		s := open(t)
		if _, err := s.Put(ctx, []flight.Archived{row("k", 1, `1`)}); err != nil {
			t.Fatal(err)
		}
		for _, q := range []string{`CREATE ROLE flightdeck_ro LOGIN PASSWORD 'ro'`,
			`GRANT SELECT ON flightdeck_outcomes, flightdeck_schema_migrations TO flightdeck_ro`} {
			if _, err := s.pool.Exec(ctx, q); err != nil {
				t.Fatal(err)
			}
		}
		t.Cleanup(func() { _, _ = s.pool.Exec(ctx, `DROP OWNED BY flightdeck_ro; DROP ROLE flightdeck_ro`) })
		var dsn string
		_ = s.pool.QueryRow(ctx, `SELECT current_database()`).Scan(&dsn)
		url := strings.Replace(srv.URL(dsn), "postgres://postgres@", "postgres://flightdeck_ro:ro@", 1)
		ro, err := New(Config{URL: url, Deployment: "test"})
		if err != nil {
			t.Fatal(err)
		}
		defer ro.Close()
		if r, ok, err := ro.Inspect(ctx, "k"); err != nil || !ok || string(r.Result) != "1" {
			t.Errorf("read-only Inspect: %+v %v %v", r, ok, err)
		}
		if got, err := ro.GetMany(ctx, []string{"k"}); err != nil || len(got) != 1 {
			t.Errorf("read-only GetMany: %v %v", got, err)
		}
	})

	// A database nobody migrated yet holds nothing: reads say so instead of failing.
	t.Run("no table yet", func(t *testing.T) {
		s, err := New(Config{URL: srv.NewDatabase(t), Deployment: "test"})
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close()
		if _, ok, err := s.Inspect(ctx, "k"); ok || err != nil {
			t.Errorf("Inspect: %v %v", ok, err)
		}
		if got, err := s.GetMany(ctx, []string{"k"}); err != nil || len(got) != 0 {
			t.Errorf("GetMany: %v %v", got, err)
		}
	})
}
