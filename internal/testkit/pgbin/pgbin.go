// Package pgbin finds PostgreSQL's server programs initdb, postgres and pg_ctl, for the test
// helper and the chaos run that start private servers.
package pgbin

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
)

// ErrNotFound is returned when this machine has no PostgreSQL server programs.
var ErrNotFound = errors.New("pgbin: initdb not found (run `make deps`, which installs postgresql)")

// Dir returns the directory holding initdb and postgres: $FLIGHTDECK_TEST_PG_BIN when set,
// else the newest Debian /usr/lib/postgresql/<version>/bin, else the directory of initdb on
// PATH.
func Dir() (string, error) {
	if d := os.Getenv("FLIGHTDECK_TEST_PG_BIN"); d != "" {
		return d, nil
	}
	dirs, _ := filepath.Glob("/usr/lib/postgresql/*/bin")
	sort.Slice(dirs, func(i, j int) bool { return version(dirs[i]) > version(dirs[j]) })
	for _, d := range dirs {
		if _, err := os.Stat(filepath.Join(d, "initdb")); err == nil {
			return d, nil
		}
	}
	p, err := exec.LookPath("initdb")
	if err != nil {
		return "", ErrNotFound
	}
	return filepath.Dir(p), nil
}

// version is the major version in a /usr/lib/postgresql/<version>/bin path.
func version(dir string) int {
	v, _ := strconv.Atoi(filepath.Base(filepath.Dir(dir)))
	return v
}
