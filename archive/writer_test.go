package archive_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/flightdeck-ai/flightdeck/archive"
	"github.com/flightdeck-ai/flightdeck/archive/postgres"
)

// TestLookupWithoutRun: a writer that is not running answers lookups at once, unavailable.
func TestLookupWithoutRun(t *testing.T) {
	st, err := postgres.New(postgres.Config{URL: "postgres://u:p@127.0.0.1:1/db", Deployment: "test"})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	w, err := archive.NewWriter(archive.WriterConfig{Store: st, SpoolDir: t.TempDir(), Name: "n"})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close(context.Background())
	start := time.Now()
	if _, _, err := w.Lookup(context.Background(), "k"); !errors.Is(err, archive.ErrUnavailable) || time.Since(start) > 100*time.Millisecond {
		t.Errorf("Lookup without Run: %v after %v", err, time.Since(start))
	}
}
