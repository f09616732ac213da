package cli_test

import (
	"errors"
	"flag"
	"fmt"
	"strings"
	"testing"

	"github.com/flightdeck-ai/flightdeck/internal/cli"
)

func TestExitCode(t *testing.T) {
	for _, c := range []struct {
		err  error
		want int
	}{
		{nil, 0},
		{flag.ErrHelp, 0},
		{fmt.Errorf("parse: %w", flag.ErrHelp), 0},
		{cli.Usagef("--log-level %q: want info", "loud"), 2},
		{fmt.Errorf("start: %w", cli.Usagef("bad")), 2},
		{errors.New("redis down"), 1},
	} {
		if got := cli.ExitCode(c.err); got != c.want {
			t.Errorf("ExitCode(%v) = %d, want %d", c.err, got, c.want)
		}
	}
}

func TestVersion(t *testing.T) {
	v := cli.Version("consumer")
	if !strings.HasPrefix(v, "consumer ") || !strings.Contains(v, "go1.") {
		t.Errorf("Version = %q", v)
	}
}

// TestParse: --help's usage goes to stdout (it is the output asked for); a mistake's message
// and usage go to stderr.
func TestParse(t *testing.T) {
	newFS := func() *flag.FlagSet {
		fs := flag.NewFlagSet("cmd", flag.ContinueOnError)
		fs.Usage = func() { fmt.Fprintln(fs.Output(), "Usage: cmd [options]") }
		fs.Int("n", 1, "how many")
		return fs
	}
	for _, c := range []struct {
		args              []string
		wantErr           error
		wantOut, wantErr2 string
	}{
		{[]string{"--help"}, flag.ErrHelp, "Usage: cmd", ""},
		{[]string{"-h"}, flag.ErrHelp, "Usage: cmd", ""},
		{[]string{"--nope"}, nil, "", "flag provided but not defined: -nope"},
		{[]string{"-n", "2"}, nil, "", ""},
	} {
		var stdout, stderr strings.Builder
		fs := newFS()
		err := cli.Parse(fs, c.args, &stdout, &stderr)
		if c.wantErr != nil && !errors.Is(err, c.wantErr) {
			t.Errorf("%v: err %v, want %v", c.args, err, c.wantErr)
		}
		if c.wantErr2 != "" && err == nil {
			t.Errorf("%v: no error", c.args)
		}
		if !strings.Contains(stdout.String(), c.wantOut) || (c.wantOut == "" && stdout.Len() > 0) {
			t.Errorf("%v: stdout %q, want %q", c.args, stdout.String(), c.wantOut)
		}
		if !strings.Contains(stderr.String(), c.wantErr2) || (c.wantErr2 == "" && stderr.Len() > 0) {
			t.Errorf("%v: stderr %q, want %q", c.args, stderr.String(), c.wantErr2)
		}
		if fs.Output() != &stderr {
			t.Errorf("%v: the flag set's output is not stderr after Parse", c.args)
		}
	}
}
