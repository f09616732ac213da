package archive

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"

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
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("archive: spool dir: %w", err)
	}
	data, lockPath := spoolPaths(dir, name)
	lock, err := filelock.TryLock(lockPath)
	if err != nil {
		return nil, fmt.Errorf("archive: spool lock: %w", err)
	}
	if lock == nil {
		return nil, fmt.Errorf("%w: %s", ErrSpoolInUse, lockPath)
	}
	s := &spool{path: data, lock: lock}
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

// readSpool returns the outcomes of a spool file (none when it does not exist); a line that
// does not decode (a torn last write) is skipped.
func readSpool(path string) ([]flight.Archived, error) {
	f, err := os.Open(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("archive: spool: %w", err)
	}
	defer f.Close()
	var outs []flight.Archived
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 0, 64<<10), 64<<20)
	for sc.Scan() {
		var a flight.Archived
		if json.Unmarshal(sc.Bytes(), &a) == nil && a.Key != "" {
			outs = append(outs, a)
		}
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("archive: spool: %w", err)
	}
	return outs, nil
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
	f, err := os.OpenFile(s.path, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o600)
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

// take returns the spooled outcomes; done(true) removes them from the file (outcomes added
// meanwhile stay), done(false) keeps them.
func (s *spool) take() (outs []flight.Archived, done func(written bool) error, err error) {
	s.mu.Lock()
	outs, err = readSpool(s.path)
	if err != nil || len(outs) == 0 {
		s.mu.Unlock()
		return nil, func(bool) error { return nil }, err
	}
	taken := len(outs)
	s.mu.Unlock()
	return outs, func(written bool) error {
		if !written {
			return nil
		}
		s.mu.Lock()
		defer s.mu.Unlock()
		all, err := readSpool(s.path)
		if err != nil {
			return err
		}
		return s.rewriteLocked(all[min(taken, len(all)):])
	}, nil
}

// rewriteLocked replaces the file with outs (write a temporary file, fsync, rename).
func (s *spool) rewriteLocked(outs []flight.Archived) error {
	tmp := s.path + ".tmp"
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	for _, a := range outs {
		if err := enc.Encode(a); err != nil {
			return fmt.Errorf("archive: spool: %w", err)
		}
	}
	f, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		return fmt.Errorf("archive: spool: %w", err)
	}
	_, werr := f.Write(buf.Bytes())
	serr := f.Sync()
	cerr := f.Close()
	if err := errors.Join(werr, serr, cerr); err != nil {
		return fmt.Errorf("archive: spool: %w", err)
	}
	if err := os.Rename(tmp, s.path); err != nil {
		return fmt.Errorf("archive: spool: %w", err)
	}
	s.n = len(outs)
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
