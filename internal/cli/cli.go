// Package cli holds what the project's commands share about their command lines: the version
// they print, where their usage goes, and the exit code an error maps to.
package cli

import (
	"bytes"
	"errors"
	"flag"
	"fmt"
	"io"
	"runtime/debug"
	"strings"
)

// SplitList splits a comma-separated flag value, trimming white space around the items and
// dropping empty ones.
func SplitList(s string) []string {
	var out []string
	for _, e := range strings.Split(s, ",") {
		if e = strings.TrimSpace(e); e != "" {
			out = append(out, e)
		}
	}
	return out
}

// UsageError is a mistake on the command line, such as a bad flag value. Commands exit 2
// for it.
type UsageError struct {
	// Err says what is wrong, in one line.
	Err error
}

// Error implements error.
func (e *UsageError) Error() string { return e.Err.Error() }

// Unwrap returns the underlying error.
func (e *UsageError) Unwrap() error { return e.Err }

// Usagef returns a *UsageError with a formatted message. %w wraps as in fmt.Errorf.
func Usagef(format string, args ...any) error {
	return &UsageError{Err: fmt.Errorf(format, args...)}
}

// ExitCode maps the error a command's run returned to its exit code. It returns 0 for nil
// and for flag.ErrHelp, since asking for the usage with --help is not a failure. It returns
// 2 for a *UsageError, in which a command wraps the flag package's parse errors, and 1 for
// anything else.
func ExitCode(err error) int {
	var ue *UsageError
	switch {
	case err == nil, errors.Is(err, flag.ErrHelp):
		return 0
	case errors.As(err, &ue):
		return 2
	}
	return 1
}

// Parse parses args with fs. What the flag package prints, an error or the usage, goes to
// stdout when --help asked for it and Parse returns flag.ErrHelp, so that the usage can go
// to a pager. Otherwise it goes to stderr. fs's Usage function must print to fs.Output.
func Parse(fs *flag.FlagSet, args []string, stdout, stderr io.Writer) error {
	var buf bytes.Buffer
	fs.SetOutput(&buf)
	err := fs.Parse(args)
	w := stderr
	if errors.Is(err, flag.ErrHelp) {
		w = stdout
	}
	_, _ = w.Write(buf.Bytes())
	fs.SetOutput(stderr)
	return err
}

// Version describes the running binary: the main module's version, or "(devel)", and the
// VCS revision and time it was built from, when the build recorded them.
func Version(command string) string {
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return command + " (no build information)"
	}
	v := bi.Main.Version
	if v == "" {
		v = "(devel)"
	}
	var rev, at, dirty string
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			rev = s.Value
		case "vcs.time":
			at = s.Value
		case "vcs.modified":
			if s.Value == "true" {
				dirty = "+modified"
			}
		}
	}
	out := fmt.Sprintf("%s %s %s", command, bi.Main.Path, v)
	if rev != "" {
		if len(rev) > 12 {
			rev = rev[:12]
		}
		out += " commit " + rev + dirty
		if at != "" {
			out += " " + at
		}
	}
	return out + " " + bi.GoVersion
}
