package archive

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/flightdeck-ai/flightdeck/flight"
	"github.com/flightdeck-ai/flightdeck/internal/filelock"
)

// ErrSpoolInUse: another live process holds the archive spool of this name.
var ErrSpoolInUse = errors.New("archive: spool in use by another process")

// spool keeps outcomes the database could not take yet, one JSON line each, fsynced, in
// archive-<name>.jsonl, locked by archive-<name>.lock while its process lives. Methods are
// safe for concurrent use.
type spool struct {
	path string
	lock *os.File

	mu sync.Mutex
	n  int // outcomes in the file
}

var unsafeName = regexp.MustCompile(`[^A-Za-z0-9._-]`)

func spoolPaths(dir, name string) (data, lock string) {
	base := "archive-" + unsafeName.ReplaceAllString(name, "_")
	return filepath.Join(dir, base+".jsonl"), filepath.Join(dir, base+".lock")
}

// openSpool opens (creating) the archive spool of name in dir, then adopts the archive
// spools in dir that no live process holds: their outcomes are appended to this one and
// their files removed (an outcome written twice is refused by the token fence).
func openSpool(dir, name string) (*spool, error) {
	if err := filelock.SecureDir(dir); err != nil {
		return nil, fmt.Errorf("archive: spool dir: %w", err)
	}
	data, lockPath := spoolPaths(dir, name)
	// Another process may hold the lock for a moment while it adopts this name's spool of a
	// stopped process: wait a little before calling the name taken.
	var lock *os.File
	for try := 0; ; try++ {
		l, err := filelock.TryLock(lockPath)
		if err != nil {
			return nil, fmt.Errorf("archive: spool lock: %w", err)
		}
		if l != nil {
			lock = l
			break
		}
		if try == 20 {
			return nil, fmt.Errorf("%w: %s", ErrSpoolInUse, lockPath)
		}
		time.Sleep(100 * time.Millisecond)
	}
	s := &spool{path: data, lock: lock}
	if err := endTornLine(data); err != nil {
		_ = lock.Close()
		return nil, err
	}
	outs, err := readSpool(data)
	if err != nil {
		_ = lock.Close()
		return nil, err
	}
	s.n = len(outs)
	others, _ := filepath.Glob(filepath.Join(dir, "archive-*.jsonl"))
	for _, other := range others {
		if other == data {
			continue
		}
		l, err := filelock.TryLock(strings.TrimSuffix(other, ".jsonl") + ".lock")
		if err != nil || l == nil {
			continue // alive, or not ours to take
		}
		outs, err := readSpool(other)
		if err == nil {
			err = s.add(outs)
		}
		if err == nil {
			_ = os.Remove(other)
			_ = os.Remove(l.Name())
		}
		_ = l.Close()
	}
	return s, nil
}

// endTornLine ends a last line that a crash or a full disk left without its newline, so that
// the next append starts a line of its own (the torn one is skipped when read).
func endTornLine(path string) error {
	f, err := filelock.OpenOwned(path, os.O_RDWR, 0)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("archive: spool: %w", err)
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil || st.Size() == 0 {
		return err
	}
	last := make([]byte, 1)
	if _, err := f.ReadAt(last, st.Size()-1); err != nil {
		return fmt.Errorf("archive: spool: %w", err)
	}
	if last[0] == '\n' {
		return nil
	}
	if _, err := f.WriteAt([]byte{'\n'}, st.Size()); err != nil {
		return fmt.Errorf("archive: spool: %w", err)
	}
	return f.Sync()
}

// readSpool returns every outcome of a spool file (none when it does not exist).
func readSpool(path string) ([]flight.Archived, error) {
	outs, _, err := readSpoolHead(path, 0)
	return outs, err
}

// readSpoolHead returns the first limit outcomes of a spool file (0: all; none when it does
// not exist) and the byte offset just past the last line it read. A line that does not decode
// (a torn write) is skipped; a last line without its newline is not read.
func readSpoolHead(path string, limit int) ([]flight.Archived, int64, error) {
	f, err := filelock.OpenOwned(path, os.O_RDONLY, 0)
	if errors.Is(err, os.ErrNotExist) {
		return nil, 0, nil
	}
	if err != nil {
		return nil, 0, fmt.Errorf("archive: spool: %w", err)
	}
	defer f.Close()
	var outs []flight.Archived
	var off int64
	r := bufio.NewReaderSize(f, 64<<10)
	for limit == 0 || len(outs) < limit {
		line, err := r.ReadBytes('\n')
		if err != nil {
			break // the end, or a torn last line (no newline): not counted as read
		}
		off += int64(len(line))
		var a flight.Archived
		if json.Unmarshal(line, &a) == nil && a.Key != "" {
			outs = append(outs, a)
		}
	}
	return outs, off, nil
}

// add appends outcomes and fsyncs the file.
func (s *spool) add(outs []flight.Archived) error {
	if len(outs) == 0 {
		return nil
	}
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	for _, a := range outs {
		if err := enc.Encode(a); err != nil {
			return fmt.Errorf("archive: spool: %w", err)
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	f, err := filelock.OpenOwned(s.path, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o600)
	if err != nil {
		return fmt.Errorf("archive: spool: %w", err)
	}
	if _, err := f.Write(buf.Bytes()); err != nil {
		_ = f.Close()
		return fmt.Errorf("archive: spool: %w", err)
	}
	if err := f.Sync(); err != nil {
		_ = f.Close()
		return fmt.Errorf("archive: spool: %w", err)
	}
	s.n += len(outs)
	return f.Close()
}

// take returns up to limit of the oldest spooled outcomes; done(true) removes them from the
// file (outcomes added meanwhile stay), done(false) keeps them.
func (s *spool) take(limit int) (outs []flight.Archived, done func(written bool) error, err error) {
	s.mu.Lock()
	outs, off, err := readSpoolHead(s.path, limit)
	s.mu.Unlock()
	if err != nil || len(outs) == 0 {
		return nil, func(bool) error { return nil }, err
	}
	return outs, func(written bool) error {
		if !written {
			return nil
		}
		s.mu.Lock()
		defer s.mu.Unlock()
		return s.dropHeadLocked(off, len(outs))
	}, nil
}

// dropHeadLocked removes the first off bytes (n outcomes) of the file: the rest is copied to
// a temporary file, fsynced and renamed over it.
func (s *spool) dropHeadLocked(off int64, n int) error {
	src, err := filelock.OpenOwned(s.path, os.O_RDONLY, 0)
	if err != nil {
		return fmt.Errorf("archive: spool: %w", err)
	}
	defer src.Close()
	if _, err := src.Seek(off, io.SeekStart); err != nil {
		return fmt.Errorf("archive: spool: %w", err)
	}
	tmp := s.path + ".tmp"
	_ = os.Remove(tmp) // left by a crash in the middle of a copy
	dst, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_EXCL|syscall.O_NOFOLLOW, 0o600)
	if err != nil {
		return fmt.Errorf("archive: spool: %w", err)
	}
	_, cerr := io.Copy(dst, src)
	serr := dst.Sync()
	clerr := dst.Close()
	if err := errors.Join(cerr, serr, clerr); err != nil {
		return fmt.Errorf("archive: spool: %w", err)
	}
	if err := os.Rename(tmp, s.path); err != nil {
		return fmt.Errorf("archive: spool: %w", err)
	}
	s.n = max(s.n-n, 0)
	if d, err := os.Open(filepath.Dir(s.path)); err == nil {
		_ = d.Sync()
		_ = d.Close()
	}
	return nil
}

// len returns how many outcomes wait in the spool.
func (s *spool) len() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.n
}

// close releases the spool's lock; the file stays for the next process of this name, or
// for any process that adopts it.
func (s *spool) close() error { return s.lock.Close() }
