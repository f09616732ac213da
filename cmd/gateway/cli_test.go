package main_test

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"gopkg.in/yaml.v3"
)

// TestComposeGateway: docker-compose.yml's gateway service runs the image's gateway binary
// with flags it has, in a profile of its own, with Redis from the redis service, and the
// Dockerfile builds and installs that binary.
func TestComposeGateway(t *testing.T) {
	raw, err := os.ReadFile(filepath.Join("..", "..", "docker-compose.yml"))
	if err != nil {
		t.Fatal(err)
	}
	var f struct {
		Services map[string]struct {
			Command     []string          `yaml:"command"`
			Profiles    []string          `yaml:"profiles"`
			Environment map[string]string `yaml:"environment"`
		} `yaml:"services"`
	}
	if err := yaml.Unmarshal(raw, &f); err != nil {
		t.Fatal(err)
	}
	svc, ok := f.Services["gateway"]
	if !ok || len(svc.Command) == 0 || svc.Command[0] != "/usr/local/bin/gateway" {
		t.Fatalf("no gateway service running /usr/local/bin/gateway: %+v", svc)
	}
	if len(svc.Profiles) != 1 || svc.Profiles[0] != "gateway" || svc.Environment["REDIS_URL"] != "redis://redis:6379/0" {
		t.Errorf("gateway service: profiles %v, REDIS_URL %q", svc.Profiles, svc.Environment["REDIS_URL"])
	}
	help, _ := exec.Command(gatewayBin, "--help").CombinedOutput()
	for _, arg := range svc.Command[1:] {
		if name, ok := strings.CutPrefix(arg, "--"); ok && !strings.Contains(string(help), "  -"+name+" ") {
			t.Errorf("the gateway service passes %s, which the gateway does not have", arg)
		}
	}
	dockerfile, err := os.ReadFile(filepath.Join("..", "..", "Dockerfile"))
	if err != nil {
		t.Fatal(err)
	}
	if !regexp.MustCompile(`go build [^\n]*-o /out/gateway \./cmd/gateway`).Match(dockerfile) ||
		!strings.Contains(string(dockerfile), "/out/gateway /usr/local/bin/") {
		t.Error("the Dockerfile does not build ./cmd/gateway into /usr/local/bin")
	}
}

// TestCommandLine: the gateway refuses to start without a tokens file, with a malformed one,
// with half a TLS pair or one that does not load, or with a bad flag value, with exit status
// 2 and a message naming the problem.
func TestCommandLine(t *testing.T) {
	dir := t.TempDir()
	bad := filepath.Join(dir, "bad.yaml")
	if err := os.WriteFile(bad, []byte("tokens:\n  - tenant: acme\n    sha256: nothex\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	good := newFleet(t).tokens
	for _, tc := range []struct {
		args []string
		want string
	}{
		{nil, "--tokens"},
		{[]string{"--tokens", filepath.Join(dir, "missing.yaml")}, "tokens file"},
		{[]string{"--tokens", bad}, "sha256 is not 64 hex digits"},
		{[]string{"--tokens", good, "--tls-cert", "c.pem"}, "--tls-cert and --tls-key"},
		{[]string{"--tokens", good, "--tls-cert", bad, "--tls-key", bad}, "--tls-cert, --tls-key"},
		{[]string{"--tokens", good, "--log-level", "loud"}, "--log-level"},
	} {
		cmd := exec.Command(gatewayBin, tc.args...)
		cmd.Env = []string{"PATH=/usr/bin:/bin"}
		out, err := cmd.CombinedOutput()
		var ee *exec.ExitError
		if !errors.As(err, &ee) || ee.ExitCode() != 2 || !strings.Contains(string(out), tc.want) {
			t.Errorf("gateway %v: %v, output %q; want exit 2 naming %q", tc.args, err, out, tc.want)
		}
	}
}
