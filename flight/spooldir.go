package flight

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"path/filepath"
	"regexp"
	"strings"

	"github.com/flightdeck-ai/flightdeck/internal/journal"
	"github.com/flightdeck-ai/flightdeck/topics"
)

// ErrSpoolInUse: another live process holds the spool of this name, so two processes were
// given the same name. It is journal.ErrInUse, as archive.ErrSpoolInUse is.
var ErrSpoolInUse = journal.ErrInUse

// ErrNoSpoolDir: no spool directory is configured and none can be derived, since $HOME and
// $XDG_STATE_HOME are unset. There is no shared fallback such as /tmp: another user could
// plant outcomes there.
var ErrNoSpoolDir = errors.New("flight: no spool directory: set --spool-dir or $FLIGHTDECK_SPOOL_DIR (or $XDG_STATE_HOME, $HOME)")

// DefaultSpoolDir returns the base spool directory used when none is configured:
// $FLIGHTDECK_SPOOL_DIR, else $XDG_STATE_HOME/flightdeck/spool, else
// $HOME/.local/state/flightdeck/spool, else "". With "", OpenSpoolDir fails with ErrNoSpoolDir.
// Give every process of a host the same directory on a durable volume: a restarted process
// writes back whatever any earlier process of its deployment left there. See DeploymentSpoolDir.
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

// DeploymentSpoolDir returns the spool directory of one deployment under base. It is the
// subdirectory named after its keyspace prefix and, when redisID is not "", the Redis it
// serves, see RedisDeployment. Processes of two deployments on one host thus never share a
// spool or a name lock, while a restart of the same deployment finds its own. It returns ""
// when base is "". An empty prefix is the default one. The Redis part is cleaned for a file
// name and followed by a hash of the exact pair, so that two pairs never share a directory.
func DeploymentSpoolDir(base, prefix, redisID string) string {
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
	if redisID != "" && len(name) > 64 {
		name = name[:64]
	}
	if redisID != "" {
		sum := sha256.Sum256([]byte(prefix + "\x00" + redisID))
		readable := unsafeName.ReplaceAllString(redisID, "_")
		if len(readable) > 64 { // a file name has at most 255 bytes, and the hash tells pairs apart
			readable = readable[:64]
		}
		name += "@" + readable + "-" + hex.EncodeToString(sum[:8])
	}
	return filepath.Join(base, name)
}

var unsafeName = regexp.MustCompile(`[^A-Za-z0-9._-]`)

// OpenSpoolDir opens, creating it if needed, the spool of the process called name in dir: the
// file spool-<name>.jsonl, guarded by an exclusive lock on spool-<name>.lock that the spool
// holds until Close. dir is created with mode 0700 when missing. It must be this process's
// user's own and writable by nobody else, and its files must be regular files of that user,
// see filelock.SecureDir and filelock.ErrUnsafe. Symbolic links are not followed. A name whose
// lock another live process holds is refused with ErrSpoolInUse.
// It then adopts every other spool file in dir that no live process holds, whatever name
// wrote it. Their outcomes are appended to this spool and fsynced, and their files removed, so
// that the next Flush writes them back. A crash in the middle of an adoption leaves an
// outcome in two spools at worst. The second write-back is refused as settled.
func OpenSpoolDir(dir, name string) (*Spool, error) {
	if name == "" {
		return nil, errors.New("flight: open spool: empty name")
	}
	if dir == "" {
		return nil, ErrNoSpoolDir
	}
	j, err := journal.OpenDir[Outcome](dir, "spool", name, outcomeCodec{})
	if err != nil {
		return nil, fmt.Errorf("flight: open spool: %w", err)
	}
	adopted, aerr := j.Adopt()
	s, err := loadSpool(j) // the adopted outcomes too, even after an error: Close keeps them
	if err != nil {
		_ = j.Close(false)
		return nil, err
	}
	s.adopted = adopted
	if aerr != nil {
		_ = s.Close()
		return nil, fmt.Errorf("flight: open spool: %w", aerr)
	}
	return s, nil
}

// Adopted is the number of outcomes OpenSpoolDir took over from spools of dead processes.
func (s *Spool) Adopted() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.adopted
}
