package chaos

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
)

// buildBinary builds the package pkg, such as "./cmd/consumer", of the module the working
// directory is in, to bin.
func buildBinary(ctx context.Context, pkg, bin string) error {
	gomod, err := exec.CommandContext(ctx, "go", "env", "GOMOD").Output()
	if err != nil {
		return fmt.Errorf("chaos: go env GOMOD: %w", err)
	}
	mod := strings.TrimSpace(string(gomod))
	root := filepath.Dir(mod)
	if root == "." || root == "" || mod == os.DevNull {
		return errors.New("chaos: run inside the flightdeck module (or pass the consumer and producer binaries)")
	}
	cmd := exec.CommandContext(ctx, "go", "build", "-o", bin, pkg)
	cmd.Dir = root
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("chaos: go build %s: %w\n%s", pkg, err, out)
	}
	return nil
}
