package filelock

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"syscall"
)

// ErrUnsafe reports a directory or file that another user could have written. A spool is
// written back to Redis as this process's own outcomes, so it is trusted only when nobody
// else can change it.
var ErrUnsafe = errors.New("filelock: not safe to trust")

// SecureDir creates dir with mode 0700 and any missing parents when it does not exist. It
// checks that dir is a directory, not a symbolic link, owned by this process's effective
// user and not writable by group or others. It also checks that every directory above it
// is owned by this user or root, and is not writable by group or others unless it has the
// sticky bit as /tmp does, so that nobody else can swap it. The error wraps ErrUnsafe and
// names the directory, its owner and its mode.
func SecureDir(dir string) error {
	dir, err := filepath.Abs(dir)
	if err != nil {
		return fmt.Errorf("filelock: %w", err)
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("filelock: %w", err)
	}
	fi, err := os.Lstat(dir)
	if err != nil {
		return fmt.Errorf("filelock: %w", err)
	}
	uid := os.Geteuid()
	unsafe := func(p string, fi fs.FileInfo, why string) error {
		return fmt.Errorf("%w: %s (owner uid %d, mode %04o): %s", ErrUnsafe, p, ownerOf(fi), fi.Mode().Perm(), why)
	}
	switch owner := ownerOf(fi); {
	case fi.Mode()&fs.ModeSymlink != 0:
		return unsafe(dir, fi, "a symbolic link; name the directory itself")
	case !fi.IsDir():
		return unsafe(dir, fi, "not a directory")
	case owner != uid:
		return unsafe(dir, fi, fmt.Sprintf("not owned by this process's uid %d", uid))
	case fi.Mode().Perm()&0o022 != 0:
		return unsafe(dir, fi, "group or others may write it (chmod 700 it)")
	}
	for p := filepath.Dir(dir); ; p = filepath.Dir(p) {
		fi, err := os.Stat(p)
		if err != nil {
			return fmt.Errorf("filelock: %w", err)
		}
		if owner := ownerOf(fi); owner != uid && owner != 0 {
			return unsafe(p, fi, fmt.Sprintf("above %s, owned neither by this process's uid %d nor by root", dir, uid))
		}
		if fi.Mode().Perm()&0o022 != 0 && fi.Mode()&fs.ModeSticky == 0 {
			return unsafe(p, fi, fmt.Sprintf("above %s, group or others may replace what is in it", dir))
		}
		if p == filepath.Dir(p) {
			return nil
		}
	}
}

// OpenOwned opens path with flag and perm, adding O_NOFOLLOW so that a symbolic link is
// refused. It checks that path is a regular file owned by this process's effective user and
// not writable by group or others. The error wraps ErrUnsafe for a file that fails the
// checks.
func OpenOwned(path string, flag int, perm os.FileMode) (*os.File, error) {
	f, err := os.OpenFile(path, flag|syscall.O_NOFOLLOW, perm)
	if err != nil {
		if errors.Is(err, syscall.ELOOP) {
			return nil, fmt.Errorf("%w: %s is a symbolic link", ErrUnsafe, path)
		}
		return nil, err
	}
	fi, err := f.Stat()
	if err == nil {
		err = checkOwned(path, fi)
	}
	if err != nil {
		_ = f.Close()
		return nil, err
	}
	return f, nil
}

func checkOwned(path string, fi fs.FileInfo) error {
	switch owner, uid := ownerOf(fi), os.Geteuid(); {
	case !fi.Mode().IsRegular():
		return fmt.Errorf("%w: %s is not a regular file", ErrUnsafe, path)
	case owner != uid:
		return fmt.Errorf("%w: %s is owned by uid %d, not by this process's uid %d", ErrUnsafe, path, owner, uid)
	case fi.Mode().Perm()&0o022 != 0:
		return fmt.Errorf("%w: %s has mode %04o: group or others may write it", ErrUnsafe, path, fi.Mode().Perm())
	}
	return nil
}

// ownerOf returns the uid that owns fi's file, or -1 when the platform does not say.
func ownerOf(fi fs.FileInfo) int {
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		return int(st.Uid)
	}
	return -1
}
