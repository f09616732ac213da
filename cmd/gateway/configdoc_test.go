package main

import (
	"path/filepath"
	"testing"

	"github.com/flightdeck-ai/flightdeck/internal/testkit/configdoc"
)

// TestConfigurationDocGatewayFlags: the gateway table of docs/CONFIGURATION.md has one row per
// flag of the flag set run parses (newFlags), with the flag's default taken with an empty
// environment, and no row or mention of a flag the gateway does not have.
func TestConfigurationDocGatewayFlags(t *testing.T) {
	path := filepath.Join("..", "..", "docs", "CONFIGURATION.md")
	doc, err := configdoc.Load(path)
	if err != nil {
		t.Fatal(err)
	}
	s := doc.Section("gateway")
	if s == nil {
		t.Fatalf("%s has no section titled gateway", path)
	}
	fs, _ := newFlags(func(string) string { return "" })
	errs := configdoc.CheckFlags(doc, s, fs, nil)
	errs = append(errs, configdoc.CheckMentions(doc, s, func(name string) bool { return fs.Lookup(name) != nil })...)
	for _, err := range errs {
		t.Error(err)
	}
}
