package flight

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"time"

	"github.com/flightdeck-ai/flightdeck/internal/filelock"
	"github.com/flightdeck-ai/flightdeck/topics"
)

// ErrSpoolInUse: another live process holds the spool of this name (two processes were given
// the same name).
var ErrSpoolInUse = errors.New("flight: spool in use by another process")

// ErrNoSpoolDir: no spool directory is configured and none can be derived ($HOME and
// $XDG_STATE_HOME are unset). There is no shared fallback such as /tmp: another user could
// plant outcomes there.
var ErrNoSpoolDir = errors.New("flight: no spool directory: set --spool-dir or $FLIGHTDECK_SPOOL_DIR (or $XDG_STATE_HOME, $HOME)")

// DefaultSpoolDir returns the base spool directory used when none is configured:
// $FLIGHTDECK_SPOOL_DIR, else $XDG_STATE_HOME/flightdeck/spool, else
// $HOME/.local/state/flightdeck/spool, else "" (OpenSpoolDir then fails with ErrNoSpoolDir).
// Give every process of a host the same directory on a durable volume: a restarted process
// writes back whatever any earlier process of its deployment left there (DeploymentSpoolDir).
func DefaultSpoolDir(getenv func(string) string) string {
	if d := getenv("FLIGHTDECK_SPOOL_DIR"); d != "" {
		return d
	}
	if d := getenv("XDG_STATE_HOME"); d != "" {
		return filepath.Join(d, "flightdeck", "spool")
	}
	if d := getenv("HOME"); d != "" {
		return filepath.Join(d, ".local", "state", "flightdeck", "spool")
	}
	return ""
}

// DeploymentSpoolDir returns the spool directory of one deployment under base: the
// subdirectory named after its keyspace prefix, so that processes of two deployments on one
// host never adopt each other's outcomes ("" when base is ""; an empty prefix is the default
// one).
func DeploymentSpoolDir(base, prefix string) string {
	if base == "" {
		return ""
	}
	if prefix == "" {
		prefix = topics.DefaultPrefix
	}
	name := unsafeName.ReplaceAllString(prefix, "_")
	if name == "" || strings.Trim(name, ".") == "" {
		name = "_" + name
	}
	return filepath.Join(base, name)
}

var unsafeName = regexp.MustCompile(`[^A-Za-z0-9._-]`)

// spoolFiles returns the data and lock file of name in dir.
func spoolFiles(dir, name string) (data, lock string) {
	base := "spool-" + unsafeName.ReplaceAllString(name, "_")
	return filepath.Join(dir, base+".jsonl"), filepath.Join(dir, base+".lock")
}

// lockFile takes the spool lock at path (filelock.TryLock).
func lockFile(path string) (*os.File, error) { return filelock.TryLock(path) }

// OpenSpoolDir opens (creating) the spool of the process called name in dir: the file
// spool-<name>.jsonl, guarded by an exclusive lock on spool-<name>.lock that the spool holds
// until Close. dir is created (0700) when missing, and must be this process's user's own,
// writable by nobody else, and its files regular files of that user (filelock.SecureDir,
// filelock.ErrUnsafe; symbolic links are not followed). A name whose lock another live
// process holds is refused with ErrSpoolInUse.
// It then adopts every other spool file in dir that no live process holds, whatever name
// wrote it: their outcomes are appended to this spool (fsynced) and their files removed, so
// that the next Flush writes them back. A crash in the middle of an adoption leaves an
// outcome in two spools at worst; the second write-back is refused as settled.
func OpenSpoolDir(dir, name string) (*Spool, error) {
	if name == "" {
		return nil, errors.New("flight: open spool: empty name")
	}
	if dir == "" {
		return nil, ErrNoSpoolDir
	}
	if err := filelock.SecureDir(dir); err != nil {
		return nil, fmt.Errorf("flight: open spool: %w", err)
	}
	data, lockPath := spoolFiles(dir, name)
	var lock *os.File
	// An adopting process holds a dead name's lock for a moment: wait that out.
	for deadline := time.Now().Add(2 * time.Second); ; {
		l, err := lockFile(lockPath)
		if err != nil {
			return nil, fmt.Errorf("flight: open spool: %w", err)
		}
		if l != nil {
			lock = l
			break
		}
		if time.Now().After(deadline) {
			return nil, fmt.Errorf("%w: %s (name %q)", ErrSpoolInUse, lockPath, name)
		}
		time.Sleep(50 * time.Millisecond)
	}
	s, err := OpenSpool(data)
	if err != nil {
		_ = lock.Close()
		return nil, err
	}
	s.lock, s.lockPath = lock, lockPath
	if err := s.adopt(dir, data); err != nil {
		_ = s.Close()
		return nil, err
	}
	return s, nil
}

// adopt appends the outcomes of every unheld spool file in dir (but own) to s.
func (s *Spool) adopt(dir, own string) error {
	files, err := filepath.Glob(filepath.Join(dir, "spool-*.jsonl"))
	if err != nil {
		return fmt.Errorf("flight: adopt spools: %w", err)
	}
	for _, data := range files {
		if data == own {
			continue
		}
		lockPath := strings.TrimSuffix(data, ".jsonl") + ".lock"
		l, err := lockFile(lockPath)
		if err != nil {
			return fmt.Errorf("flight: adopt spool %s: %w", data, err)
		}
		if l == nil {
			continue // a live process holds it
		}
		err = s.adoptFile(data)
		if err == nil {
			err = os.Remove(data)
		}
		if err == nil || errors.Is(err, os.ErrNotExist) {
			_ = os.Remove(lockPath)
			err = nil
		}
		_ = l.Close()
		if err != nil {
			return fmt.Errorf("flight: adopt spool %s: %w", data, err)
		}
	}
	return syncDir(dir)
}

// adoptFile appends the valid outcomes of the spool file at path to s.
func (s *Spool) adoptFile(path string) error {
	f, err := filelock.OpenOwned(path, os.O_RDONLY, 0)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	b, err := io.ReadAll(f)
	_ = f.Close()
	if err != nil {
		return err
	}
	for _, line := range strings.Split(string(b), "\n") {
		if strings.TrimSpace(line) == "" {
			continue
		}
		o, err := decodeOutcome([]byte(line))
		if err != nil {
			continue
		}
		if err := s.Add(o); err != nil {
			return err
		}
		s.mu.Lock()
		s.adopted++
		s.mu.Unlock()
	}
	return nil
}

// Adopted is the number of outcomes OpenSpoolDir took over from spools of dead processes.
func (s *Spool) Adopted() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.adopted
}
