// Package filelock takes exclusive advisory flock locks on files. That is how the spool
// files of one host tell a live process's spool from a dead one's. It also opens spool
// directories and files only when nobody but this process's user can have written them.
package filelock

import (
	"errors"
	"os"
	"syscall"
)

// TryLock opens path, creating it with mode 0600, and takes an exclusive, non-blocking
// flock on it. Closing the file or the process's death releases the lock. It returns nil
// and no error when another process holds the lock. Like OpenOwned, it refuses a symbolic
// link, or a file of another user or that others may write.
func TryLock(path string) (*os.File, error) {
	f, err := OpenOwned(path, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, err
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		_ = f.Close()
		if errors.Is(err, syscall.EWOULDBLOCK) {
			return nil, nil
		}
		return nil, err
	}
	return f, nil
}
