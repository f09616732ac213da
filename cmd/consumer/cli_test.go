package main_test

import (
	"net/http"
	"os/exec"
	"strings"
	"testing"
)

// TestCommandLine: --help and --version exit 0, a usage mistake exits 2 with a one-line reason
// (and no "defaulting" message that suggests the process goes on), and GET / on the dashboard
// listener redirects to the dashboard.
func TestCommandLine(t *testing.T) {
	run := func(args ...string) (string, int) {
		out, err := exec.Command(binary, args...).CombinedOutput()
		code := 0
		if ee, ok := err.(*exec.ExitError); ok {
			code = ee.ExitCode()
		} else if err != nil {
			t.Fatal(err)
		}
		return string(out), code
	}
	if out, code := run("--help"); code != 0 || !strings.Contains(out, "-stages") {
		t.Errorf("--help: exit %d, output %q", code, out)
	}
	if out, err := exec.Command(binary, "--help").Output(); err != nil || !strings.Contains(string(out), "-stages") {
		t.Errorf("--help: the usage is not on stdout (err %v, stdout %q)", err, out)
	}
	if out, code := run("--version"); code != 0 || !strings.HasPrefix(out, "consumer github.com/flightdeck-ai/flightdeck ") {
		t.Errorf("--version: exit %d, output %q", code, out)
	}
	for _, args := range [][]string{{"--log-level", "loud"}, {"--log-format", "xml"}, {"--tenants", "ACME"},
		{"--http", "[]:9999"}, {"stray-argument"}, {"--redis", "127.0.0.1:6390"}} {
		out, code := run(args...)
		if code != 2 || strings.Count(strings.TrimSpace(out), "\n") != 0 || strings.Contains(out, "defaulting") {
			t.Errorf("%v: exit %d, output %q; want exit 2 and one line", args, code, out)
		}
	}
	if out, code := run("--stages", "interview-evalution"); code != 2 || !strings.Contains(out, "known: interview-demeanor, interview-evaluation") {
		t.Errorf("--stages with a typo: exit %d, output %q; want exit 2 and the known stages", code, out)
	}
	if _, code := run("--no-such-flag"); code != 2 {
		t.Errorf("--no-such-flag: exit %d, want 2", code)
	}

	e := newE2E(t)
	p := e.start("root")
	c := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	resp, err := c.Get("http://" + p.http + "/")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusFound || resp.Header.Get("Location") != "/ui/" {
		t.Errorf("GET /: %s, Location %q; want a redirect to /ui/", resp.Status, resp.Header.Get("Location"))
	}
}
