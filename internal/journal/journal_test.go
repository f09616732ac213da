package journal_test

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/flightdeck-ai/flightdeck/internal/filelock"
	"github.com/flightdeck-ai/flightdeck/internal/journal"
)

// strCodec stores a string s as the line "r:<s>;" (a torn one lacks the ";"); another line
// is corrupt, and a record containing "bad" does not encode.
type strCodec struct{}

func (strCodec) Encode(s string) ([]byte, error) {
	if strings.Contains(s, "bad") {
		return nil, errors.New("unencodable")
	}
	return []byte("r:" + s + ";"), nil
}

func (strCodec) Decode(line []byte) (string, error) {
	s, ok := strings.CutPrefix(string(line), "r:")
	s, ok2 := strings.CutSuffix(s, ";")
	if !ok || !ok2 {
		return "", errors.New("not a record")
	}
	return s, nil
}

func open(t *testing.T, path string) *journal.Journal[string] {
	t.Helper()
	j, err := journal.Open[string](path, strCodec{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = j.Close(false) })
	return j
}

func openDir(t *testing.T, dir, kind, name string) *journal.Journal[string] {
	t.Helper()
	j, err := journal.OpenDir[string](dir, kind, name, strCodec{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = j.Close(false) })
	return j
}

// read returns all of j's records and the count of corrupt lines.
func read(t *testing.T, j *journal.Journal[string]) ([]string, int) {
	t.Helper()
	b, err := j.Read(0)
	if err != nil {
		t.Fatal(err)
	}
	return b.Records, b.Skipped
}

func write(t *testing.T, path, content string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
}

func check(t *testing.T, what string, got, want []string) {
	t.Helper()
	if !slices.Equal(got, want) {
		t.Errorf("%s = %q, want %q", what, got, want)
	}
}

// TestTornLastLine: a crash in the middle of a write leaves a last line without its newline.
// Open ends it, so that it reads as one corrupt line and the next append does not glue onto
// it; a line torn after Open is not read at all.
func TestTornLastLine(t *testing.T) {
	path := filepath.Join(t.TempDir(), "a", "j.jsonl")
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		t.Fatal(err)
	}
	write(t, path, "r:one;\nr:two;\nr:thr")
	j := open(t, path)
	recs, skipped := read(t, j)
	check(t, "after Open", recs, []string{"one", "two"})
	if skipped != 1 {
		t.Errorf("skipped %d, want the torn line", skipped)
	}
	if err := j.Append("four"); err != nil {
		t.Fatal(err)
	}
	recs, skipped = read(t, j)
	check(t, "after Append", recs, []string{"one", "two", "four"})
	if skipped != 1 {
		t.Errorf("skipped %d after Append, want 1", skipped)
	}

	// A whole record whose newline alone was lost is a record.
	path2 := filepath.Join(t.TempDir(), "j.jsonl")
	write(t, path2, "r:one;\nr:two;")
	recs, skipped = read(t, open(t, path2))
	check(t, "newline lost", recs, []string{"one", "two"})
	if skipped != 0 {
		t.Errorf("newline lost: skipped %d, want 0", skipped)
	}

	// Torn after Open (another writer, a failed cut): the last line is left alone.
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		t.Fatal(err)
	}
	_, _ = f.WriteString("r:fi")
	_ = f.Close()
	b, err := j.Read(0)
	if err != nil {
		t.Fatal(err)
	}
	check(t, "torn since Open", b.Records, []string{"one", "two", "four"})
	if b.Skipped != 1 {
		t.Errorf("skipped %d, want 1 (the unterminated line is not read)", b.Skipped)
	}
}

// TestCorruptMiddleLine: a corrupt line amid good ones is skipped and counted, blank lines are
// passed over, and a batch's Drop removes the corrupt line with the records around it.
func TestCorruptMiddleLine(t *testing.T) {
	path := filepath.Join(t.TempDir(), "j.jsonl")
	write(t, path, "r:a;\ngarbage\n\nr:b;\n{\"v\":2}\nr:c;\n")
	j := open(t, path)
	recs, skipped := read(t, j)
	check(t, "records", recs, []string{"a", "b", "c"})
	if skipped != 2 {
		t.Errorf("skipped %d, want 2", skipped)
	}
	b, err := j.Read(2)
	if err != nil {
		t.Fatal(err)
	}
	check(t, "Read(2)", b.Records, []string{"a", "b"})
	if b.Skipped != 1 {
		t.Errorf("Read(2) skipped %d, want 1", b.Skipped)
	}
	if err := j.Drop(b); err != nil {
		t.Fatal(err)
	}
	if data, _ := os.ReadFile(path); string(data) != "{\"v\":2}\nr:c;\n" {
		t.Errorf("file after Drop = %q", data)
	}
	// A record that does not encode adds nothing, not even the others of its call.
	if err := j.Append("d", "bad", "e"); err == nil {
		t.Error("Append of an unencodable record: no error")
	}
	recs, _ = read(t, j)
	check(t, "after a failed Append", recs, []string{"c"})
	// Rewrite leaves exactly what it was given.
	if err := j.Rewrite([]string{"x", "y"}); err != nil {
		t.Fatal(err)
	}
	if data, _ := os.ReadFile(path); string(data) != "r:x;\nr:y;\n" {
		t.Errorf("file after Rewrite = %q", data)
	}
	if fi, err := os.Stat(path); err != nil || fi.Mode().Perm() != 0o600 {
		t.Errorf("mode after Rewrite: %v %v, want 0600", fi.Mode().Perm(), err)
	}
}

// TestAdopt: the journals of dead processes are appended to the adopter's and removed; a live
// process's journal, one of another kind and one the adopter cannot trust are left alone.
func TestAdopt(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "spool")
	dead := openDir(t, dir, "k", "dead")
	if err := dead.Append("d1", "d2"); err != nil {
		t.Fatal(err)
	}
	f, err := os.OpenFile(dead.Path(), os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		t.Fatal(err)
	}
	_, _ = f.WriteString("r:d3;\ngarbage\nr:d4;") // a corrupt line, then one whose newline a crash lost
	_ = f.Close()
	if err := dead.Close(false); err != nil { // the process dies: its lock goes, its file stays
		t.Fatal(err)
	}
	live := openDir(t, dir, "k", "live")
	if err := live.Append("l1"); err != nil {
		t.Fatal(err)
	}
	other := openDir(t, dir, "other", "dead")
	if err := other.Append("o1"); err != nil {
		t.Fatal(err)
	}
	_ = other.Close(false)

	next := openDir(t, dir, "k", "next")
	if err := next.Append("n1"); err != nil {
		t.Fatal(err)
	}
	n, err := next.Adopt()
	if err != nil || n != 4 {
		t.Fatalf("Adopt = %d, %v; want the dead journal's 4", n, err)
	}
	recs, _ := read(t, next)
	check(t, "adopter's records", recs, []string{"n1", "d1", "d2", "d3", "d4"})
	for _, gone := range []string{"k-dead.jsonl", "k-dead.lock"} {
		if _, err := os.Lstat(filepath.Join(dir, gone)); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("%s after adoption: %v, want it removed", gone, err)
		}
	}
	for _, kept := range []string{"k-live.jsonl", "other-dead.jsonl"} {
		if _, err := os.Lstat(filepath.Join(dir, kept)); err != nil {
			t.Errorf("%s: %v, want it left alone", kept, err)
		}
	}
	if recs, _ := read(t, live); !slices.Equal(recs, []string{"l1"}) {
		t.Errorf("live journal = %q", recs)
	}

	// The live one stops; an unsafe dead journal (listed first) does not keep the adopter from
	// the others.
	_ = live.Close(false)
	write(t, filepath.Join(dir, "k-0world.jsonl"), "r:planted;\n")
	if err := os.Chmod(filepath.Join(dir, "k-0world.jsonl"), 0o666); err != nil {
		t.Fatal(err)
	}
	last := openDir(t, dir, "k", "last")
	n, err = last.Adopt()
	if !errors.Is(err, filelock.ErrUnsafe) || !strings.Contains(err.Error(), "k-0world.jsonl") {
		t.Errorf("Adopt with a file others may write: %v, want ErrUnsafe naming it", err)
	}
	recs, _ = read(t, last)
	check(t, "adopted besides the unsafe one", recs, []string{"l1"})
	if n != 1 {
		t.Errorf("adopted %d, want live's 1 (next is alive)", n)
	}
	if _, err := os.Stat(filepath.Join(dir, "k-0world.jsonl")); err != nil {
		t.Errorf("the unsafe journal: %v, want it left where it is", err)
	}
}

// TestDropRacingAppend: records appended while a consumer reads and drops batches from the
// head are each consumed exactly once or still in the file.
func TestDropRacingAppend(t *testing.T) {
	j := open(t, filepath.Join(t.TempDir(), "j.jsonl"))
	const writers, each = 4, 60
	var wg sync.WaitGroup
	for w := range writers {
		wg.Go(func() {
			for i := range each {
				if err := j.Append(fmt.Sprintf("%d-%d", w, i)); err != nil {
					t.Error(err)
				}
			}
		})
	}
	var consumed []string
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			select {
			case <-stop:
				return
			default:
			}
			b, err := j.Read(7)
			if err == nil {
				err = j.Drop(b)
			}
			if err != nil {
				t.Error(err)
				return
			}
			consumed = append(consumed, b.Records...)
		}
	}()
	wg.Wait()
	close(stop)
	<-done
	rest, skipped := read(t, j)
	all := append(consumed, rest...)
	if skipped != 0 || len(all) != writers*each {
		t.Fatalf("consumed %d + left %d (skipped %d), want %d", len(consumed), len(rest), skipped, writers*each)
	}
	seen := map[string]bool{}
	for _, r := range all {
		if seen[r] {
			t.Fatalf("%s consumed twice", r)
		}
		seen[r] = true
	}
	// Every writer's records are in its order.
	for w := range writers {
		var mine []string
		for _, r := range all {
			if strings.HasPrefix(r, fmt.Sprint(w)+"-") {
				mine = append(mine, r)
			}
		}
		for i, r := range mine {
			if r != fmt.Sprintf("%d-%d", w, i) {
				t.Fatalf("writer %d's records out of order: %q", w, mine)
			}
		}
	}
}

// TestDropStale: a batch read before the file last changed is not dropped: its offset may
// fall inside other records.
func TestDropStale(t *testing.T) {
	j := open(t, filepath.Join(t.TempDir(), "j.jsonl"))
	if err := j.Append("a", "b", "c"); err != nil {
		t.Fatal(err)
	}
	b, _ := j.Read(1)
	if err := j.Drop(b); err != nil {
		t.Fatal(err)
	}
	if err := j.Drop(b); !errors.Is(err, journal.ErrStale) {
		t.Errorf("second Drop of one batch: %v, want ErrStale", err)
	}
	b, _ = j.Read(1)
	if err := j.Rewrite([]string{"x"}); err != nil {
		t.Fatal(err)
	}
	if err := j.Drop(b); !errors.Is(err, journal.ErrStale) {
		t.Errorf("Drop after Rewrite: %v, want ErrStale", err)
	}
	recs, _ := read(t, j)
	check(t, "records", recs, []string{"x"})
}

// TestLockAndClose: one process holds a name at a time; another waits a moment for it, then
// gives up with ErrInUse. Close releases the name, removing the files only when told to, and
// Append still reaches the file after Close.
func TestLockAndClose(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "spool")
	a := openDir(t, dir, "k", "a/b") // the name is made safe for a file name
	if filepath.Base(a.Path()) != "k-a_b.jsonl" {
		t.Errorf("path %s, want k-a_b.jsonl", a.Path())
	}
	start := time.Now()
	if _, err := journal.OpenDir[string](dir, "k", "a/b", strCodec{}); !errors.Is(err, journal.ErrInUse) {
		t.Fatalf("second holder: %v, want ErrInUse", err)
	}
	if d := time.Since(start); d < time.Second {
		t.Errorf("ErrInUse after %v, want a wait first", d)
	}
	go func() { time.Sleep(200 * time.Millisecond); _ = a.Close(false) }()
	b := openDir(t, dir, "k", "a/b") // the holder lets go while it waits
	if err := b.Append("r"); err != nil {
		t.Fatal(err)
	}
	if err := b.Close(false); err != nil {
		t.Fatal(err)
	}
	if err := b.Append("after"); err != nil {
		t.Fatalf("Append after Close: %v", err)
	}
	c := openDir(t, dir, "k", "a/b")
	recs, _ := read(t, c)
	check(t, "after reopen", recs, []string{"r", "after"})
	if err := c.Close(true); err != nil {
		t.Fatal(err)
	}
	if err := c.Close(true); err != nil {
		t.Errorf("second Close: %v", err)
	}
	for _, f := range []string{"k-a_b.jsonl", "k-a_b.lock"} {
		if _, err := os.Lstat(filepath.Join(dir, f)); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("%s after Close(true): %v", f, err)
		}
	}
}

// TestRefusesUnsafe: nothing another user could have written is read: a journal file that is
// a symbolic link or that others may write, a directory that others may write.
func TestRefusesUnsafe(t *testing.T) {
	dir := t.TempDir()
	target := filepath.Join(t.TempDir(), "target")
	link := filepath.Join(dir, "k-l.jsonl")
	if err := os.Symlink(target, link); err != nil {
		t.Fatal(err)
	}
	if _, err := journal.Open[string](link, strCodec{}); !errors.Is(err, filelock.ErrUnsafe) {
		t.Errorf("Open of a symbolic link: %v, want ErrUnsafe", err)
	}
	if _, err := journal.OpenDir[string](dir, "k", "l", strCodec{}); !errors.Is(err, filelock.ErrUnsafe) {
		t.Errorf("OpenDir of a symbolic link: %v, want ErrUnsafe", err)
	}
	if _, err := os.Lstat(target); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the link's target: %v, want it never created", err)
	}
	world := filepath.Join(dir, "w.jsonl")
	write(t, world, "r:planted;\n")
	if err := os.Chmod(world, 0o666); err != nil {
		t.Fatal(err)
	}
	if _, err := journal.Open[string](world, strCodec{}); !errors.Is(err, filelock.ErrUnsafe) {
		t.Errorf("Open of a file others may write: %v, want ErrUnsafe", err)
	}
	shared := filepath.Join(t.TempDir(), "shared")
	if err := os.Mkdir(shared, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(shared, 0o777); err != nil {
		t.Fatal(err)
	}
	if _, err := journal.OpenDir[string](shared, "k", "n", strCodec{}); !errors.Is(err, filelock.ErrUnsafe) {
		t.Errorf("OpenDir in a directory others may write: %v, want ErrUnsafe", err)
	}
}
