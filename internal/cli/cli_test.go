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
