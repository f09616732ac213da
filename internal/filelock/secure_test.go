package filelock_test

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/flightdeck-ai/flightdeck/internal/filelock"
)

// nobody is the uid the tests give files another user owns (root can chown).
const nobody = 65534

func asRoot(t *testing.T) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root to give a file to another user")
	}
}

// TestSecureDir: a spool directory is trusted only when nobody but this user can have written
// it or swapped it.
func TestSecureDir(t *testing.T) {
	t.Run("CreatedPrivate", func(t *testing.T) {
		dir := filepath.Join(t.TempDir(), "a", "b")
		if err := filelock.SecureDir(dir); err != nil {
			t.Fatal(err)
		}
		fi, err := os.Stat(dir)
		if err != nil || fi.Mode().Perm() != 0o700 {
			t.Fatalf("created %v, %v; want mode 0700", fi.Mode(), err)
		}
	})
	t.Run("WritableByOthers", func(t *testing.T) {
		dir := filepath.Join(t.TempDir(), "spool")
		if err := os.Mkdir(dir, 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(dir, 0o777); err != nil {
			t.Fatal(err)
		}
		err := filelock.SecureDir(dir)
		if !errors.Is(err, filelock.ErrUnsafe) || !strings.Contains(err.Error(), dir) || !strings.Contains(err.Error(), "0777") {
			t.Fatalf("err = %v, want ErrUnsafe naming %s and its mode 0777", err, dir)
		}
	})
	t.Run("Symlink", func(t *testing.T) {
		base := t.TempDir()
		real := filepath.Join(base, "real")
		if err := os.Mkdir(real, 0o700); err != nil {
			t.Fatal(err)
		}
		link := filepath.Join(base, "link")
		if err := os.Symlink(real, link); err != nil {
			t.Fatal(err)
		}
		if err := filelock.SecureDir(link); !errors.Is(err, filelock.ErrUnsafe) {
			t.Fatalf("err = %v, want ErrUnsafe for a symbolic link", err)
		}
	})
	t.Run("OwnedByAnotherUser", func(t *testing.T) {
		asRoot(t)
		dir := filepath.Join(t.TempDir(), "spool")
		if err := os.Mkdir(dir, 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.Chown(dir, nobody, nobody); err != nil {
			t.Fatal(err)
		}
		err := filelock.SecureDir(dir)
		if !errors.Is(err, filelock.ErrUnsafe) || !strings.Contains(err.Error(), "uid 65534") {
			t.Fatalf("err = %v, want ErrUnsafe naming the owner", err)
		}
	})
	t.Run("ParentWritableByOthers", func(t *testing.T) {
		parent := filepath.Join(t.TempDir(), "shared")
		if err := os.Mkdir(parent, 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(parent, 0o777); err != nil { // no sticky bit: anyone may rename its entries
			t.Fatal(err)
		}
		if err := filelock.SecureDir(filepath.Join(parent, "spool")); !errors.Is(err, filelock.ErrUnsafe) {
			t.Fatalf("err = %v, want ErrUnsafe for a parent others may write", err)
		}
		if err := os.Chmod(parent, os.ModeSticky|0o777); err != nil { // sticky, as /tmp
			t.Fatal(err)
		}
		if err := filelock.SecureDir(filepath.Join(parent, "spool")); err != nil {
			t.Fatalf("under a sticky parent: %v", err)
		}
	})
}

// TestOpenOwned: spool files are opened without following links, and only when they are
// this user's own regular files that nobody else may write.
func TestOpenOwned(t *testing.T) {
	dir := t.TempDir()
	own := filepath.Join(dir, "own.jsonl")
	f, err := filelock.OpenOwned(own, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	f.Close()

	target := filepath.Join(dir, "elsewhere")
	link := filepath.Join(dir, "spool-x.lock")
	if err := os.Symlink(target, link); err != nil {
		t.Fatal(err)
	}
	if _, err := filelock.OpenOwned(link, os.O_RDWR|os.O_CREATE, 0o600); !errors.Is(err, filelock.ErrUnsafe) {
		t.Fatalf("a symbolic link: %v, want ErrUnsafe", err)
	}
	if _, err := os.Lstat(target); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("the link's target was created: %v", err)
	}
	if _, err := filelock.TryLock(link); !errors.Is(err, filelock.ErrUnsafe) {
		t.Fatalf("TryLock of a symbolic link: %v, want ErrUnsafe", err)
	}

	wide := filepath.Join(dir, "wide.jsonl")
	if err := os.WriteFile(wide, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(wide, 0o666); err != nil {
		t.Fatal(err)
	}
	if _, err := filelock.OpenOwned(wide, os.O_RDONLY, 0); !errors.Is(err, filelock.ErrUnsafe) {
		t.Fatalf("a file others may write: %v, want ErrUnsafe", err)
	}

	t.Run("OwnedByAnotherUser", func(t *testing.T) {
		asRoot(t)
		other := filepath.Join(dir, "other.jsonl")
		if err := os.WriteFile(other, nil, 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Chown(other, nobody, nobody); err != nil {
			t.Fatal(err)
		}
		if _, err := filelock.OpenOwned(other, os.O_RDONLY, 0); !errors.Is(err, filelock.ErrUnsafe) {
			t.Fatalf("another user's file: %v, want ErrUnsafe", err)
		}
	})
}
