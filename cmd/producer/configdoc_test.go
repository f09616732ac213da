package main

import (
	"context"
	"errors"
	"flag"
	"io"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/flightdeck-ai/flightdeck/internal/testkit/configdoc"
)

// TestConfigurationDocProducerFlags: docs/CONFIGURATION.md has a table for the global options
// and one for each subcommand, each with one row per flag of the flag set the command parses
// (with its default) and no row or mention of a flag it does not have. A subcommand's flag set
// is the one it builds itself, read back after it parsed -h; its global options are documented
// once, in the producer table. Every command of the usage text has its section, and every
// "producer ..." section is a command checked here.
func TestConfigurationDocProducerFlags(t *testing.T) {
	// inspect reads these for its defaults; the document writes them as $NAME.
	t.Setenv("FLIGHTDECK_ARCHIVE_URL", "")
	t.Setenv("FLIGHTDECK_ARCHIVE_DEPLOYMENT", "")
	path := filepath.Join("..", "..", "docs", "CONFIGURATION.md")
	doc, err := configdoc.Load(path)
	if err != nil {
		t.Fatal(err)
	}
	a, err := newApp(func(string) string { return "" }, strings.NewReader(""), io.Discard, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	global, _ := a.mainFlags()
	globals := map[string]bool{}
	global.VisitAll(func(f *flag.Flag) { globals[f.Name] = f.Name != "version" })
	every := map[string]bool{} // every flag of any producer command
	for n := range globals {
		every[n] = true
	}
	check := func(title string, fs *flag.FlagSet, skip map[string]bool, known func(string) bool) {
		s := doc.Section(title)
		if s == nil {
			t.Errorf("%s has no section titled %q", path, title)
			return
		}
		errs := configdoc.CheckFlags(doc, s, fs, skip)
		errs = append(errs, configdoc.CheckMentions(doc, s, known)...)
		for _, err := range errs {
			t.Error(err)
		}
	}

	ctx := context.Background()
	commands := []struct {
		name string
		run  func(context.Context, []string) error
		args []string
	}{
		{"enqueue", a.enqueue, nil},
		{"load", a.load, nil},
		{"stages", a.stages, nil},
		{"stats", a.stats, nil},
		{"tail", a.tail, nil},
		{"inspect", a.inspect, nil},
		{"cancel", a.cancel, nil},
		{"dlq ls", a.dlq, []string{"ls"}},
		{"dlq show", a.dlq, []string{"show"}},
		{"dlq requeue", a.dlq, []string{"requeue"}},
		{"dlq purge", a.dlq, []string{"purge"}},
	}
	checked := map[string]bool{"producer": true}
	for _, c := range commands {
		a.lastFlags = nil
		if err := c.run(ctx, append(c.args, "-h")); !errors.Is(err, flag.ErrHelp) || a.lastFlags == nil {
			t.Fatalf("producer %s -h: %v, want flag.ErrHelp from its own flag set", c.name, err)
		}
		fs := a.lastFlags
		fs.VisitAll(func(f *flag.Flag) { every[f.Name] = true })
		check("producer "+c.name, fs, globals, func(n string) bool { return fs.Lookup(n) != nil })
		checked["producer "+c.name] = true
	}
	// The global section's prose may name any command's flag (--wait in the exit status).
	check("producer", global, nil, func(n string) bool { return every[n] })

	for _, s := range doc.Sections() {
		if strings.HasPrefix(s.Title, "producer") && !checked[s.Title] {
			t.Errorf("%s: section %q is not a producer command this test checks", doc.At(s.Line), s.Title)
		}
	}
	for _, cmd := range usageCommands(t) {
		found := false
		for title := range checked {
			found = found || title == "producer "+cmd || strings.HasPrefix(title, "producer "+cmd+" ")
		}
		if !found {
			t.Errorf("the usage lists command %s, which has no section in %s (add it here too)", cmd, path)
		}
	}
}

// usageCommands returns the commands the usage text lists under "Commands:".
func usageCommands(t *testing.T) []string {
	t.Helper()
	_, block, ok := strings.Cut(usageText, "\nCommands:\n")
	if !ok {
		t.Fatal("usageText has no Commands: block")
	}
	block, _, _ = strings.Cut(block, "\n\n")
	var out []string
	for _, m := range regexp.MustCompile(`(?m)^  ([a-z]+) {2,}`).FindAllStringSubmatch(block, -1) {
		out = append(out, m[1])
	}
	if len(out) == 0 {
		t.Fatal("usageText lists no commands")
	}
	return out
}
