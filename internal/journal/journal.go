// Package journal keeps records on disk, one fsynced line each, in a file that a live
// process may guard with an exclusive lock. The next process can so tell a dead process's
// journal from a live one's and adopt it. Both spools are journals, as docs/DESIGN.md
// sections 6 and 9 describe. What a record means stays with its caller.
package journal

import (
	"bufio"
	"bytes"
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

	"github.com/flightdeck-ai/flightdeck/internal/filelock"
)

// ErrInUse reports a journal whose lock another live process holds.
var ErrInUse = errors.New("journal: locked by another process")

// ErrStale reports a Drop of a Batch read before the file was last dropped from or
// rewritten. Its lines may no longer be the first ones, so nothing is dropped.
var ErrStale = errors.New("journal: batch read before the file last changed")

// Codec turns a record into one line without a newline, as JSON has none, and back. A line
// that Decode refuses is corrupt, such as a torn write or another version's record. It is
// skipped and counted.
type Codec[T any] interface {
	Encode(T) ([]byte, error)
	Decode([]byte) (T, error)
}

// Journal is a file of records, one line each. It is safe for concurrent use. One Journal
// owns its file. OpenDir's lock sees to that, and Open's caller must.
type Journal[T any] struct {
	path      string
	codec     Codec[T]
	dir, kind string // OpenDir's, for Adopt. Empty for Open's journals.

	mu   sync.Mutex // serialises the file's reads and writes, and guards lock and gen
	lock *os.File   // the lock file OpenDir holds, nil for Open's journals and after Close
	gen  uint64     // counts drops and rewrites. A Batch of an older gen is stale.
}

// Batch is what Read found at the head of the file: its records in file order, and how
// many corrupt lines among them it skipped. Drop removes its lines.
type Batch[T any] struct {
	Records []T
	Skipped int
	gen     uint64
	end     int64 // the offset just past the last line read
}

// Open opens the journal file at path, creating it with mode 0600 and its directories with
// 0700 when missing. It refuses with filelock.ErrUnsafe a symbolic link, or a file of
// another user or that others may write. A last line that a crash left without its newline
// is ended, so that the next Append starts a line of its own. Open takes no lock.
func Open[T any](path string, c Codec[T]) (_ *Journal[T], err error) {
	defer wrap(&err, "open", path)
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return nil, err
	}
	f, err := filelock.OpenOwned(path, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	if err := endTornLine(f); err != nil {
		return nil, err
	}
	if err := syncDir(filepath.Dir(path)); err != nil { // the file's creation is durable too
		return nil, err
	}
	return &Journal[T]{path: path, codec: c}, nil
}

// OpenDir opens <kind>-<name>.jsonl in dir with Open, and holds an exclusive lock on
// <kind>-<name>.lock until Close. Each character of name outside [A-Za-z0-9._-] becomes
// "_". dir is created with mode 0700 when missing and must pass filelock.SecureDir. A lock
// another process holds, as an adopter does for a moment, is waited for up to 2 s. After
// that OpenDir returns ErrInUse.
func OpenDir[T any](dir, kind, name string, c Codec[T]) (*Journal[T], error) {
	if err := filelock.SecureDir(dir); err != nil {
		return nil, fmt.Errorf("journal: %w", err)
	}
	base := filepath.Join(dir, kind+"-"+regexp.MustCompile(`[^A-Za-z0-9._-]`).ReplaceAllString(name, "_"))
	deadline := time.Now().Add(2 * time.Second)
	lock, err := filelock.TryLock(base + ".lock")
	for ; err == nil && lock == nil; lock, err = filelock.TryLock(base + ".lock") {
		if time.Now().After(deadline) {
			return nil, fmt.Errorf("%w: %s.lock", ErrInUse, base)
		}
		time.Sleep(50 * time.Millisecond)
	}
	if err != nil {
		return nil, fmt.Errorf("journal: lock %s.lock: %w", base, err)
	}
	j, err := Open(base+".jsonl", c)
	if err != nil {
		_ = lock.Close()
		return nil, err
	}
	j.dir, j.kind, j.lock = dir, kind, lock
	return j, nil
}

// Path is the journal file's path.
func (j *Journal[T]) Path() string { return j.path }

// Append writes recs at the end of the file, one line each, and fsyncs it before it returns.
// On error none was added, because a partial write is cut off again. Append works after
// Close too, without the lock's guard, for a caller that has nowhere else to put a record.
func (j *Journal[T]) Append(recs ...T) (err error) {
	if len(recs) == 0 {
		return nil
	}
	defer wrap(&err, "append to", j.path)
	lines, err := j.encode(recs)
	if err != nil {
		return err
	}
	j.mu.Lock()
	defer j.mu.Unlock()
	f, err := filelock.OpenOwned(j.path, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o600)
	if err != nil {
		return err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return err
	}
	if _, err = f.Write(lines); err == nil {
		err = f.Sync()
	}
	if err != nil {
		_ = f.Truncate(st.Size()) // so that a partial line cannot glue onto the next one
	}
	return err
}

// Read returns the first limit records of the file, or all of them when limit is 0. Blank
// lines are passed over. Lines that do not decode are skipped and counted. A last line
// without its newline, from a write torn since Open, is not read.
func (j *Journal[T]) Read(limit int) (b Batch[T], err error) {
	defer wrap(&err, "read", j.path)
	j.mu.Lock()
	defer j.mu.Unlock()
	b.gen = j.gen
	f, err := filelock.OpenOwned(j.path, os.O_RDONLY, 0)
	if errors.Is(err, os.ErrNotExist) {
		return b, nil
	} else if err != nil {
		return b, err
	}
	defer f.Close()
	r := bufio.NewReaderSize(f, 64<<10)
	for limit == 0 || len(b.Records) < limit {
		line, err := r.ReadBytes('\n')
		if errors.Is(err, io.EOF) {
			break // the end, or a torn last line
		} else if err != nil {
			return b, err
		}
		b.end += int64(len(line))
		if len(bytes.TrimSpace(line)) == 0 {
			continue
		}
		if rec, err := j.codec.Decode(line[:len(line)-1]); err != nil {
			b.Skipped++
		} else {
			b.Records = append(b.Records, rec)
		}
	}
	return b, nil
}

// Drop removes the lines b was read from with replaceLocked, and keeps the rest of the
// file, including whatever was appended since. A stale b is refused with ErrStale.
func (j *Journal[T]) Drop(b Batch[T]) (err error) {
	defer wrap(&err, "drop from", j.path)
	j.mu.Lock()
	defer j.mu.Unlock()
	if b.gen != j.gen {
		return ErrStale
	} else if b.end == 0 {
		return nil
	}
	src, err := filelock.OpenOwned(j.path, os.O_RDONLY, 0)
	if err != nil {
		return err
	}
	defer src.Close()
	if _, err := src.Seek(b.end, io.SeekStart); err != nil {
		return err
	}
	return j.replaceLocked(src)
}

// Rewrite replaces what the file holds with recs, using replaceLocked.
func (j *Journal[T]) Rewrite(recs []T) (err error) {
	defer wrap(&err, "rewrite", j.path)
	lines, err := j.encode(recs)
	if err != nil {
		return err
	}
	j.mu.Lock()
	defer j.mu.Unlock()
	return j.replaceLocked(bytes.NewReader(lines))
}

// Adopt appends to j's file the records of every other journal of its kind in its directory
// that no live process holds, removes their files, and returns how many records it took. A
// crash in the middle leaves records in two journals at worst. A journal it cannot take,
// such as an unsafe or unreadable file, stays, and its error is joined to the one returned.
// The records taken are in j's file all the same. Open's journals adopt nothing.
func (j *Journal[T]) Adopt() (took int, err error) {
	if j.dir == "" {
		return 0, nil
	}
	entries, err := os.ReadDir(j.dir)
	var errs []error
	for _, e := range entries {
		name := e.Name()
		if strings.HasPrefix(name, j.kind+"-") && strings.HasSuffix(name, ".jsonl") && name != filepath.Base(j.path) {
			n, err := j.adoptFile(filepath.Join(j.dir, name))
			took, errs = took+n, append(errs, err)
		}
	}
	if err == nil {
		err = syncDir(j.dir)
	}
	wrap(&err, "adopt into", j.dir)
	return took, errors.Join(append(errs, err)...)
}

// adoptFile appends the records of the journal file at path to j, then removes it and its
// lock file, unless a live process holds that lock.
func (j *Journal[T]) adoptFile(path string) (int, error) {
	lockPath := strings.TrimSuffix(path, ".jsonl") + ".lock"
	l, err := filelock.TryLock(lockPath)
	if err != nil || l == nil {
		return 0, err // 0 and nil when a live process holds it
	}
	defer l.Close()
	other, err := Open(path, j.codec) // empty if another adopter was first
	var b Batch[T]
	if err == nil {
		b, err = other.Read(0)
	}
	if err == nil {
		err = j.Append(b.Records...)
	}
	if err != nil {
		return 0, err
	}
	if err := os.Remove(path); err != nil {
		return len(b.Records), fmt.Errorf("journal: adopt: %w", err)
	}
	_ = os.Remove(lockPath)
	return len(b.Records), nil
}

// Close releases the lock OpenDir took. When discard is set, because the caller wants
// nothing in them, it first removes the journal's files. Open's journals have no lock, and
// Close leaves their file. Closing twice is a no-op.
func (j *Journal[T]) Close(discard bool) (err error) {
	defer wrap(&err, "close", j.path)
	j.mu.Lock()
	defer j.mu.Unlock()
	l := j.lock
	if l == nil {
		return nil
	}
	j.lock = nil
	if discard {
		_ = os.Remove(j.path)
		_ = os.Remove(l.Name())
	}
	return l.Close()
}

// encode returns recs as lines, each ended by a newline.
func (j *Journal[T]) encode(recs []T) ([]byte, error) {
	var buf bytes.Buffer
	for _, r := range recs {
		line, err := j.codec.Encode(r)
		if err != nil {
			return nil, err
		}
		buf.Write(append(line, '\n'))
	}
	return buf.Bytes(), nil
}

// replaceLocked replaces the file with what r reads. It writes a temporary file next to it,
// fsyncs it, renames it over the file, then fsyncs the directory.
func (j *Journal[T]) replaceLocked(r io.Reader) error {
	tmp := j.path + ".tmp"
	_ = os.Remove(tmp) // left by a crash in the middle of a replace
	f, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_EXCL|syscall.O_NOFOLLOW, 0o600)
	if err != nil {
		return err
	}
	if _, err = io.Copy(f, r); err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp, j.path)
	}
	if err != nil {
		_ = os.Remove(tmp)
		return err
	}
	j.gen++
	return syncDir(filepath.Dir(j.path))
}

// endTornLine ends a last line that a crash or a full disk left without its newline, so
// that the next append starts a line of its own. The torn line reads as a corrupt one.
func endTornLine(f *os.File) error {
	st, err := f.Stat()
	if err != nil || st.Size() == 0 {
		return err
	}
	last := make([]byte, 1)
	if _, err := f.ReadAt(last, st.Size()-1); err != nil || last[0] == '\n' {
		return err
	}
	if _, err := f.WriteAt([]byte{'\n'}, st.Size()); err != nil {
		return err
	}
	return f.Sync()
}

// syncDir fsyncs dir, so that a file created, renamed or removed in it stays so after a crash.
func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}

// wrap prefixes a non-nil *err with the operation and the file it was on.
func wrap(err *error, op, path string) {
	if *err != nil {
		*err = fmt.Errorf("journal: %s %s: %w", op, path, *err)
	}
}
