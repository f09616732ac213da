package main_test

import (
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestDuplicateName: a consumer process started under the name of a live one (on another
// host: its own spool directory) exits 1 with one line naming the problem, and the live one
// runs on; a process SIGKILLed and restarted at once under its name starts (within the
// liveness timeout) and becomes ready.
func TestDuplicateName(t *testing.T) {
	e := newE2E(t)
	live := e.start("twin")
	dup := e.startWith("twin", []string{"REDIS_URL=" + e.url}, false, "--spool-dir", filepath.Join(t.TempDir(), "spool"))
	if code := dup.exitCode(t, 15*time.Second); code != 1 {
		t.Errorf("exit %d, want 1", code)
	}
	b, _ := os.ReadFile(dup.logPath)
	out := strings.TrimSpace(string(b))
	last := out[strings.LastIndexByte(out, '\n')+1:]
	if strings.Count(out, "name in use") != 1 || !strings.HasPrefix(last, `consumer: handlers: consumer name in use: a live process named "twin" beat `) {
		t.Errorf("output %q; want one last line naming the live process", out)
	}
	select {
	case <-live.done:
		t.Fatal("the live consumer exited")
	default:
	}

	_ = live.cmd.Process.Signal(syscall.SIGKILL)
	<-live.done
	e.start("twin") // fails the test if it exits, or is not ready within 20 s
}
