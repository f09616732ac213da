package archive

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/flightdeck-ai/flightdeck/flight"
)

func row(key string, token int64, result string) flight.Archived {
	return flight.Archived{Key: key, Stage: "s", Tenant: "acme", Status: flight.StatusSucceeded, Token: token,
		Attempts: 1, Result: []byte(result), FinishedAt: time.Now()}
}

// TestSpoolTornTail: a line torn by a crash does not swallow the next outcome.
func TestSpoolTornTail(t *testing.T) {
	dir := t.TempDir()
	data := filepath.Join(dir, "archive-c1.jsonl")
	if err := os.WriteFile(data, []byte(`{"Key":"a","Stage":"s","Ten`), 0o600); err != nil {
		t.Fatal(err)
	}
	sp, err := openSpool(dir, "c1")
	if err != nil {
		t.Fatal(err)
	}
	defer sp.close()
	if err := sp.add([]flight.Archived{row("b", 5, `"b"`), row("c", 6, `"c"`)}); err != nil {
		t.Fatal(err)
	}
	outs, done, err := sp.take(1)
	if err != nil || len(outs) != 1 || outs[0].Key != "b" {
		t.Fatalf("first take: %+v %v", outs, err)
	}
	if err := done(true); err != nil {
		t.Fatal(err)
	}
	if outs, _, err := sp.take(10); err != nil || len(outs) != 1 || outs[0].Key != "c" {
		t.Fatalf("second take: %+v %v", outs, err)
	}
}
