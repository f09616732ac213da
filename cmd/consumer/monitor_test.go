package main_test

import (
	"bytes"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"
)

// TestRuntimeMonitorAwake: a consumer started as a user starts it runs, under its own process
// id and name, with schedtrace added to the GODEBUG it was given, and its Go runtime's system monitor
// then naps (a thread in nanosleep) instead of sleeping deeply while the process is idle; a
// consumer given GODEBUG=schedtrace=0 keeps it, and its monitor sleeps deeply.
func TestRuntimeMonitorAwake(t *testing.T) {
	if _, err := os.Stat("/proc/self/task"); err != nil {
		t.Skip("needs Linux's /proc")
	}
	e := newE2E(t)
	awake := e.startWith("awake", []string{"REDIS_URL=" + e.url, "GODEBUG=http2client=0"}, true)
	kept := e.startWith("kept", []string{"REDIS_URL=" + e.url, "GODEBUG=schedtrace=0"}, true)

	for _, c := range []struct {
		p    *proc
		want string
	}{{awake, "GODEBUG=http2client=0,schedtrace=2147483647"}, {kept, "GODEBUG=schedtrace=0"}} {
		b, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(c.p.cmd.Process.Pid), "environ"))
		if err != nil {
			t.Fatal(err)
		}
		var godebug []string
		for _, kv := range bytes.Split(b, []byte{0}) {
			if bytes.HasPrefix(kv, []byte("GODEBUG=")) {
				godebug = append(godebug, string(kv))
			}
		}
		if len(godebug) != 1 || godebug[0] != c.want {
			t.Errorf("consumer %s runs with %q, want [%q]", c.p.name, godebug, c.want)
		}
		// The process keeps its name: the binary's, as the kernel keeps it (15 bytes at most).
		comm, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(c.p.cmd.Process.Pid), "comm"))
		if err != nil {
			t.Fatal(err)
		}
		if want := filepath.Base(binary); string(bytes.TrimSpace(comm)) != want[:min(len(want), 15)] {
			t.Errorf("consumer %s runs as %q, want %q", c.p.name, bytes.TrimSpace(comm), want[:min(len(want), 15)])
		}
	}

	// Sample each idle process's threads: the monitor of the awake one naps between its
	// checks (at most 10 ms at a time), the other's sleeps on a futex until its next timer.
	const samples = 40
	napping := func(p *proc) int {
		n := 0
		for range samples {
			dirs, _ := filepath.Glob(filepath.Join("/proc", strconv.Itoa(p.cmd.Process.Pid), "task", "*", "wchan"))
			for _, d := range dirs {
				if b, _ := os.ReadFile(d); string(b) == "hrtimer_nanosleep" {
					n++
					break
				}
			}
			time.Sleep(25 * time.Millisecond)
		}
		return n
	}
	a, k := napping(awake), napping(kept)
	t.Logf("samples with a thread in nanosleep: awake %d, kept %d, of %d", a, k, samples)
	if a < samples*3/4 {
		t.Errorf("the awake consumer's monitor napped in %d of %d samples, want at least %d", a, samples, samples*3/4)
	}
	if k >= samples/2 {
		t.Errorf("the consumer with schedtrace=0 had a thread in nanosleep in %d of %d samples, want fewer than %d", k, samples, samples/2)
	}
}
