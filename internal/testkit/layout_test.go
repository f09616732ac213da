package testkit_test

import (
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
)

const module = "github.com/flightdeck-ai/flightdeck/"

// TestNothingImportsUpward: no package's non-test code imports a test fixture
// (internal/testkit/...) or the chaos harness (internal/chaos), except the harness and its
// command; the core packages stay below the binaries.
func TestNothingImportsUpward(t *testing.T) {
	goBin := filepath.Join(runtime.GOROOT(), "bin", "go")
	out, err := exec.Command(goBin, "list", "-f", "{{.ImportPath}} {{join .Imports \" \"}}", module+"...").CombinedOutput()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, out)
	}
	core := []string{"flight", "topics", "lua", "stream", "client", "executor", "handlers", "handlers/model", "archive", "internal/broker"}
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		f := strings.Fields(line)
		pkg := strings.TrimPrefix(f[0], module)
		harness := pkg == "internal/chaos" || pkg == "cmd/chaos" || strings.HasPrefix(pkg, "internal/testkit/")
		for _, imp := range f[1:] {
			dep, ours := strings.CutPrefix(imp, module)
			if !ours {
				continue
			}
			if !harness && (dep == "internal/chaos" || strings.HasPrefix(dep, "internal/testkit/")) {
				t.Errorf("%s imports the test fixture or harness %s", pkg, dep)
			}
			for _, c := range core {
				if pkg == c && (strings.HasPrefix(dep, "cmd/") || dep == "admin" || strings.HasPrefix(dep, "examples/")) {
					t.Errorf("core package %s imports %s", pkg, dep)
				}
			}
		}
	}
}

// TestTopicsIsWireTypesOnly: topics holds names and wire types, so it links only the standard
// library; Redis I/O lives in internal/broker.
func TestTopicsIsWireTypesOnly(t *testing.T) {
	goBin := filepath.Join(runtime.GOROOT(), "bin", "go")
	out, err := exec.Command(goBin, "list", "-deps", "-f", "{{if not .Standard}}{{.ImportPath}}{{end}}", module+"topics").CombinedOutput()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, out)
	}
	for _, dep := range strings.Fields(string(out)) {
		if dep != module+"topics" {
			t.Errorf("topics links %s", dep)
		}
	}
}
