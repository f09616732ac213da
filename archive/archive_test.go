package archive_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/flightdeck-ai/flightdeck/archive"
	"github.com/flightdeck-ai/flightdeck/archive/postgres"
	"github.com/flightdeck-ai/flightdeck/flight"
	"github.com/flightdeck-ai/flightdeck/internal/testkit/pgtest"
)

func outcome(key string, token int64, result string) flight.Archived {
	return flight.Archived{Key: key, Stage: "s", Tenant: "acme", Status: flight.StatusSucceeded, Token: token,
		Attempts: 1, Result: []byte(result), FinishedAt: time.Now()}
}

func open(t *testing.T, url string) *postgres.Store {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	s, err := postgres.Open(ctx, postgres.Config{URL: url, Deployment: "test"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Close)
	return s
}

// TestStore runs the store's tests on one private server, a database each.
func TestStore(t *testing.T) {
	srv := pgtest.Start(t)
	ctx := context.Background()

	t.Run("newer token wins", func(t *testing.T) {
		s := open(t, srv.NewDatabase(t))
		if n, err := s.Put(ctx, []flight.Archived{outcome("k", 200, `"new"`)}); err != nil || n != 1 {
			t.Fatalf("put: %d %v", n, err)
		}
		// An older token arriving later (a zombie's write, a slow spool) is refused.
		if n, err := s.Put(ctx, []flight.Archived{outcome("k", 100, `"zombie"`)}); err != nil || n != 0 {
			t.Fatalf("older token: wrote %d, %v", n, err)
		}
		// The same token again (a retried write) changes nothing.
		if n, err := s.Put(ctx, []flight.Archived{outcome("k", 200, `"again"`)}); err != nil || n != 0 {
			t.Fatalf("same token: wrote %d, %v", n, err)
		}
		a, ok, err := s.Get(ctx, "k")
		if err != nil || !ok || string(a.Result) != `"new"` || a.Token != 200 {
			t.Fatalf("get: %+v %v %v", a, ok, err)
		}
		// A newer token replaces the row, and within one batch the newest of a key wins.
		n, err := s.Put(ctx, []flight.Archived{outcome("k", 300, `"b"`), outcome("k", 400, `"c"`), outcome("k", 250, `"a"`)})
		if err != nil || n != 1 {
			t.Fatalf("batch: %d %v", n, err)
		}
		if a, _, _ := s.Get(ctx, "k"); string(a.Result) != `"c"` {
			t.Fatalf("after batch: %s", a.Result)
		}
	})

	t.Run("concurrent writers", func(t *testing.T) {
		s := open(t, srv.NewDatabase(t))
		var wg sync.WaitGroup
		for tok := int64(1); tok <= 40; tok++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				if _, err := s.Put(ctx, []flight.Archived{outcome("k", tok, fmt.Sprint(tok))}); err != nil {
					t.Error(err)
				}
			}()
		}
		wg.Wait()
		if a, _, _ := s.Get(ctx, "k"); a.Token != 40 || string(a.Result) != "40" {
			t.Fatalf("after 40 racing writers: token %d result %s, want 40", a.Token, a.Result)
		}
	})

	t.Run("retention and purge", func(t *testing.T) {
		url := srv.NewDatabase(t)
		s := open(t, url)
		old := outcome("old", 1, "1")
		old.FinishedAt, old.Retention = time.Now().Add(-2*time.Hour), time.Hour
		fresh := outcome("fresh", 1, "1")
		fresh.Retention = time.Hour
		failed := fresh
		failed.Key, failed.Status, failed.Result, failed.ErrorType, failed.ErrorCode = "failed", flight.StatusFailed, nil, "bad_request", "x"
		if _, err := s.Put(ctx, []flight.Archived{old, fresh, failed}); err != nil {
			t.Fatal(err)
		}
		if _, ok, _ := s.Get(ctx, "old"); ok {
			t.Error("an outcome past its retention still answers")
		}
		if r, ok, _ := s.Inspect(ctx, "old"); !ok || !r.Expired {
			t.Errorf("inspect of the expired row: %+v %v", r, ok)
		}
		if a, ok, _ := s.Get(ctx, "failed"); !ok || a.Status != flight.StatusFailed || a.ErrorCode != "x" || a.Result != nil {
			t.Errorf("failed outcome: %+v %v", a, ok)
		}
		if n, err := s.Purge(ctx, 10); err != nil || n != 1 {
			t.Fatalf("purge: %d %v", n, err)
		}
		if _, ok, _ := s.Inspect(ctx, "old"); ok {
			t.Error("purged row still there")
		}
		if _, ok, _ := s.Get(ctx, "fresh"); !ok {
			t.Error("purge deleted a live row")
		}
		// Opening again applies no migration twice.
		s2 := open(t, url)
		conn, err := pgx.Connect(ctx, url)
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close(ctx)
		var n int
		files, _ := filepath.Glob("postgres/migrations/*.sql")
		if err := conn.QueryRow(ctx, `SELECT count(*) FROM flightdeck_schema_migrations`).Scan(&n); err != nil || n != len(files) {
			t.Errorf("migrations recorded: %d %v, want one per file (%d)", n, err, len(files))
		}
		_ = s2
	})

	t.Run("invalid outcomes", func(t *testing.T) {
		s := open(t, srv.NewDatabase(t))
		bad := outcome("k", 1, "1")
		bad.Status = flight.StatusRunning
		if _, err := s.Put(ctx, []flight.Archived{bad}); err == nil {
			t.Error("a RUNNING outcome was accepted")
		}
		if _, err := postgres.Open(ctx, postgres.Config{URL: "postgres://u:topsecret@127.0.0.1:1/x?connect_timeout=1", Deployment: "test"}); err == nil ||
			strings.Contains(err.Error(), "topsecret") {
			t.Errorf("open of an unreachable archive: %v", err)
		}
	})
}

// TestWriterOutage: outcomes recorded while the archive is down are spooled (fsynced) and
// written when it answers again; nothing is lost, and a writer started on the spool of a
// stopped process writes that spool back.
func TestWriterOutage(t *testing.T) {
	srv := pgtest.Start(t)
	url := srv.NewDatabase(t)
	s := open(t, url)
	dir := t.TempDir()
	reg := prometheus.NewRegistry()
	w, err := archive.NewWriter(archive.WriterConfig{Store: s, SpoolDir: dir, Name: "c1", Retry: 200 * time.Millisecond,
		WriteTimeout: time.Second, Registry: reg})
	if err != nil {
		t.Fatal(err)
	}
	ctx, stop := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { w.Run(ctx); close(done) }()

	w.Record(outcome("before", 1, "1"))
	waitFor(t, "the first outcome written", func() bool { _, ok, _ := s.Get(context.Background(), "before"); return ok })

	srv.Stop()
	for i := range 50 {
		w.Record(outcome(fmt.Sprintf("during-%d", i), 1, fmt.Sprint(i)))
	}
	waitFor(t, "50 outcomes spooled", func() bool { return w.Spooled() == 50 })
	if h := w.Health(); !strings.Contains(h, "down (50 outcomes spooled)") {
		t.Errorf("health while down: %q", h)
	}
	if _, _, err := w.Lookup(context.Background(), "before"); err == nil {
		t.Error("lookup while the archive is down answered")
	}
	srv.Restart()
	waitFor(t, "the spool written back", func() bool { return w.Spooled() == 0 && w.Health() == "ok" })
	for i := range 50 {
		if a, ok, err := s.Get(context.Background(), fmt.Sprintf("during-%d", i)); !ok || string(a.Result) != fmt.Sprint(i) {
			t.Fatalf("during-%d: %+v %v %v", i, a, ok, err)
		}
	}
	if v := counter(t, reg, "flightdeck_archive_writes_total", "spooled"); v != 50 {
		t.Errorf("spooled counter %v, want 50", v)
	}

	// A process that stops with outcomes spooled leaves them for the next writer on the dir.
	srv.Stop()
	w.Record(outcome("left-behind", 1, "x"))
	waitFor(t, "spooled", func() bool { return w.Spooled() == 1 })
	stop()
	<-done
	if err := w.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	if b, err := os.ReadFile(filepath.Join(dir, "archive-c1.jsonl")); err != nil || !strings.Contains(string(b), "left-behind") {
		t.Fatalf("spool file after close: %q %v", b, err)
	}
	srv.Restart()
	w2, err := archive.NewWriter(archive.WriterConfig{Store: s, SpoolDir: dir, Name: "c2", Retry: 200 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	ctx2, stop2 := context.WithCancel(context.Background())
	defer stop2()
	go w2.Run(ctx2)
	waitFor(t, "the adopted spool written back", func() bool { _, ok, _ := s.Get(context.Background(), "left-behind"); return ok })
	if _, err := os.Stat(filepath.Join(dir, "archive-c1.jsonl")); err == nil {
		t.Error("the adopted spool file is still there")
	}
}

// counter returns the value of the counter name whose label has value label in reg.
func counter(t *testing.T, reg *prometheus.Registry, name, label string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if mf.GetName() == name && l.GetValue() == label {
					return m.GetCounter().GetValue()
				}
			}
		}
	}
	t.Fatalf("no %s{%s}", name, label)
	return 0
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(20 * time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		if cond() {
			return
		}
	}
	t.Fatalf("timed out waiting for %s", what)
}
