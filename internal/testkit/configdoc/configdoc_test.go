package configdoc

import (
	"flag"
	"strings"
	"testing"
	"time"
)

// TestCheckDefault: a default is the first literal code span of its cell; $NAME spans name the
// environment; an empty default wants no literal first; durations compare as durations.
func TestCheckDefault(t *testing.T) {
	for _, c := range []struct {
		cell string
		def  any
		ok   bool
	}{
		{"`10s`", 10 * time.Second, true},
		{"`1m`", time.Minute, true},
		{"`2m`", time.Minute, false},
		{"`$REDIS_URL`, else `redis://h:1/0`", "redis://h:1/0", true},
		{"`$REDIS_URL`, else `redis://h:1/0`", "", true},
		{"none", "", true},
		{"`ai`", "", false},
		{"none", "ai", false},
		{"`$`", "$", true},
		{"`0`, off", 0, true},
		{"`false`", false, true},
		{"`true`", false, false},
		{"`0.2`", 0.2, true},
		{"the lease", nil, true},
	} {
		if err := CheckDefault(c.cell, c.def); (err == nil) != c.ok {
			t.Errorf("CheckDefault(%q, %v) = %v, want ok %v", c.cell, c.def, err, c.ok)
		}
	}
}

// TestCheckFlags: a missing row, a row of no flag, a wrong default and a mention of an unknown
// flag are each reported; rows are read outside code fences only, with \| escapes.
func TestCheckFlags(t *testing.T) {
	doc := Parse("doc.md", strings.Join([]string{
		"# `cmd`",
		"| flag | default | meaning |",
		"|---|---|---|",
		"| `--a` | `1` | A. |",
		"| `--b` | `x` | B, `p\\|q`. |",
		"| `--gone` | none | Not there. |",
		"See `--nope`.",
		"```sh",
		"| `--in-code` | `1` | not a row |",
		"```",
		"# other",
		"| `--c` | `2` | elsewhere |",
	}, "\n"))
	s := doc.Section("cmd")
	if s == nil || len(s.Rows) != 3 || s.Rows[1].Meaning() != "B, `p|q`." {
		t.Fatalf("section %+v", s)
	}
	fs := flag.NewFlagSet("cmd", flag.ContinueOnError)
	fs.Int("a", 1, "")
	fs.String("b", "y", "")
	fs.Bool("c", false, "")
	errs := CheckFlags(doc, s, fs, nil)
	errs = append(errs, CheckMentions(doc, s, func(n string) bool { return fs.Lookup(n) != nil })...)
	var got []string
	for _, err := range errs {
		got = append(got, err.Error())
	}
	all := strings.Join(got, "\n")
	for _, want := range []string{"documents gone", "the default is y", "no row for c", "mentions --nope"} {
		if !strings.Contains(all, want) {
			t.Errorf("errors do not say %q:\n%s", want, all)
		}
	}
	// --gone is a row of no flag and a mention of one; --in-code is no row (fenced) but a
	// mention: code blocks name flags too.
	if len(errs) != 6 || !strings.Contains(all, "mentions --in-code") {
		t.Errorf("%d errors, want 6:\n%s", len(errs), all)
	}
}
