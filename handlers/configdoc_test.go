package handlers

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/flightdeck-ai/flightdeck/internal/testkit/configdoc"
)

// TestConfigurationDocStageFile: the stage file table of docs/CONFIGURATION.md has one row per
// yaml field of StageConfig (nested ones as retry.initial, openai.model), with the generic
// default WithDefaults and the retry policy give it, and no row for a field that does not
// exist. The example stage file of that section loads.
func TestConfigurationDocStageFile(t *testing.T) {
	path := filepath.Join("..", "docs", "CONFIGURATION.md")
	doc, err := configdoc.Load(path)
	if err != nil {
		t.Fatal(err)
	}
	const title = "The stage file"
	s := doc.Section(title)
	if s == nil {
		t.Fatalf("%s has no section titled %q", path, title)
	}
	c := StageConfig{Name: "any-stage"}.WithDefaults()
	c.Retry = c.Retry.withDefaults()
	// Defaults derived from the lease: the document says so in words.
	derived := map[string]bool{"waitTimeout": c.WaitTimeout == c.Lease, "parkCheck": c.ParkCheck == 2*c.Lease}
	for name, ok := range derived {
		if !ok {
			t.Errorf("%s is no longer derived from the lease as %s says: fix the row and this test", name, path)
		}
	}
	fields, err := configdoc.YAMLFields(c)
	if err != nil {
		t.Fatal(err)
	}
	var entries []configdoc.Entry
	for _, f := range fields {
		e := configdoc.Entry{Name: f.Path, Default: f.Value}
		if _, ok := derived[f.Path]; ok {
			e.Default = nil
		}
		entries = append(entries, e)
	}
	for _, err := range configdoc.CheckRows(doc, s, entries) {
		t.Error(err)
	}

	_, example, ok := strings.Cut(s.Text, "```yaml\n")
	if !ok {
		t.Fatalf("section %q has no yaml example", title)
	}
	example, _, _ = strings.Cut(example, "```")
	file := filepath.Join(t.TempDir(), "stages.yaml")
	if err := os.WriteFile(file, []byte(example), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := LoadStages(file, nil); err != nil {
		t.Errorf("the example stage file of %s does not load: %v", path, err)
	}
}
