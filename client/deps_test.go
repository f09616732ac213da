package client_test

import (
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
)

// TestClientLinksNoServerLibraries: a service that only enqueues and awaits imports client,
// which must not link the metrics, breaker, logging, watermill or PostgreSQL libraries the
// consumer uses.
func TestClientLinksNoServerLibraries(t *testing.T) {
	goBin := filepath.Join(runtime.GOROOT(), "bin", "go")
	if _, err := exec.LookPath(goBin); err != nil {
		if goBin, err = exec.LookPath("go"); err != nil {
			t.Skip("no go command to list the dependencies with")
		}
	}
	out, err := exec.Command(goBin, "list", "-deps", ".").CombinedOutput()
	if err != nil {
		t.Fatalf("go list -deps: %v\n%s", err, out)
	}
	banned := []string{"github.com/prometheus/", "github.com/sony/gobreaker", "github.com/jackc/pgx",
		"github.com/rs/zerolog", "github.com/ThreeDotsLabs/", "gopkg.in/yaml"}
	for _, dep := range strings.Fields(string(out)) {
		for _, b := range banned {
			if strings.HasPrefix(dep, b) {
				t.Errorf("client links %s", dep)
			}
		}
	}
}
