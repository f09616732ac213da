package archive

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"testing"

	"github.com/flightdeck-ai/flightdeck/flight"
)

// TestSpoolFormat: the spool's lines are what json.Encoder writes for each outcome, as the
// spools of earlier versions hold, so their files are still read and adopted.
func TestSpoolFormat(t *testing.T) {
	dir := t.TempDir()
	outs := []flight.Archived{row("a", 1, `{"x":"<&>"}`), row("b", 2, `"b"`)}
	var want bytes.Buffer
	for _, a := range outs {
		if err := json.NewEncoder(&want).Encode(a); err != nil {
			t.Fatal(err)
		}
	}
	// An earlier version's spool of a stopped process, adopted by this one.
	if err := os.WriteFile(filepath.Join(dir, "archive-old.jsonl"), want.Bytes(), 0o600); err != nil {
		t.Fatal(err)
	}
	sp, err := openSpool(dir, "new")
	if err != nil {
		t.Fatal(err)
	}
	defer sp.close()
	if got, err := os.ReadFile(filepath.Join(dir, "archive-new.jsonl")); err != nil || !bytes.Equal(got, want.Bytes()) {
		t.Errorf("adopted spool file = %q (%v), want %q", got, err, want.Bytes())
	}
	if err := sp.add(outs); err != nil {
		t.Fatal(err)
	}
	got, _ := os.ReadFile(filepath.Join(dir, "archive-new.jsonl"))
	if !bytes.Equal(got, append(want.Bytes(), want.Bytes()...)) {
		t.Errorf("spool file after add = %q, want the earlier format twice", got)
	}
	if sp.len() != 4 {
		t.Errorf("len = %d, want 4", sp.len())
	}
}
