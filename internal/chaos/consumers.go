package chaos

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/flightdeck-ai/flightdeck/internal/faults"
)

// supervisor runs N consumer slots. Each slot runs one consumer process at a time, named
// "c<slot>-<incarnation>". A fresh start after a sigkill-consumer fault or an unexpected exit
// is a new incarnation with a new name. A restart under the same name keeps it, as a process
// supervisor restarting a unit would. The restart-same-name and all-down-past-ttl faults and
// the restart after an injected crash do this. Every start has its own log file. A process
// that exits without being told to is recorded as an Exit and restarted. One that a fault
// knob made exit with status 86 is recorded as an injected crash and restarted under its name.
type supervisor struct {
	bin, config, redisURL string
	logDir, tmpDir        string
	// spoolDir is the uncertain-outcome spool directory every consumer shares. This is the
	// production layout: a restarted process adopts the spools of dead ones.
	spoolDir string
	grace    time.Duration
	// waitRedis blocks until Redis answers or it gives up. Restarts wait for it, since a
	// consumer exits at once when its first Redis call fails.
	waitRedis func(time.Duration) bool
	logf      func(format string, args ...any)
	// archiveURL is the PostgreSQL archive every consumer gets with --archive. Empty means none.
	archiveURL string

	mu       sync.Mutex
	slots    []*slot
	exits    []Exit
	injected []Exit
	logs     []string // every start's log file
	closing  bool
	wg       sync.WaitGroup
}

type slot struct {
	idx, inc  int
	name      string
	starts    int // starts under the current name
	cmd       *exec.Cmd
	done      chan struct{}
	started   time.Time
	logPath   string
	env       []string // fault knobs of the current process, nil for none
	expectEnd bool     // the runner killed or stopped it on purpose
	stopped   bool     // SIGSTOPped
	busy      bool     // a fault is acting on it
	held      bool     // kept down by a fault: no automatic restart
}

func (s *supervisor) stagesArg() string { return strings.Join(chaosStages, ",") }

// crashKnobs reports whether env sets a crash knob, so that the process may exit 86 on purpose.
func crashKnobs(env []string) bool {
	for _, kv := range env {
		if strings.HasPrefix(kv, "FLIGHTDECK_FAULT_CRASH_AFTER=") {
			return true
		}
	}
	return false
}

// startLocked starts slot i's next process: under a new name when fresh, else under the
// current one, with the fault knobs env. Call with s.mu held.
func (s *supervisor) startLocked(i int, fresh bool, env []string) error {
	sl := s.slots[i]
	if fresh || sl.name == "" {
		sl.inc++
		sl.name = fmt.Sprintf("c%d-%d", i+1, sl.inc)
		sl.starts = 0
	}
	sl.starts++
	sl.logPath = filepath.Join(s.logDir, sl.name+".log")
	if sl.starts > 1 {
		sl.logPath = filepath.Join(s.logDir, fmt.Sprintf("%s.start%d.log", sl.name, sl.starts))
	}
	logf, err := os.Create(sl.logPath)
	if err != nil {
		return fmt.Errorf("chaos: consumer log: %w", err)
	}
	args := []string{"--config", s.config, "--stages", s.stagesArg(), "--name", sl.name,
		"--grace", s.grace.String(), "--liveness-interval", "200ms", "--claim-interval", "200ms",
		"--spool-dir", s.spoolDir, "--log-level", "debug", "--log-format", "json"}
	if s.archiveURL != "" {
		args = append(args, "--archive", s.archiveURL)
	}
	cmd := exec.Command(s.bin, args...)
	cmd.Env = append(filterEnv(os.Environ(), "REDIS_URL", "REDIS_URL_FILE", "TMPDIR", "FLIGHTDECK_HTTP",
		"FLIGHTDECK_SPOOL_DIR", "FLIGHTDECK_FAULT_ANSWER_AFTER_SCRIPT", "FLIGHTDECK_FAULT_CRASH_AFTER",
		"FLIGHTDECK_ARCHIVE_URL", "FLIGHTDECK_ARCHIVE_URL_FILE"),
		"REDIS_URL="+s.redisURL, "TMPDIR="+s.tmpDir)
	cmd.Env = append(cmd.Env, env...)
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		logf.Close()
		return fmt.Errorf("chaos: start consumer %s: %w", sl.name, err)
	}
	done := make(chan struct{})
	sl.cmd, sl.done, sl.started, sl.env, sl.expectEnd, sl.stopped = cmd, done, time.Now(), env, false, false
	s.logs = append(s.logs, sl.logPath)
	s.wg.Add(1)
	go s.watch(sl, cmd, done, logf, sl.name, sl.logPath, crashKnobs(env))
	return nil
}

// watch waits for one process of slot sl and accounts for its end. An expected end is one a
// fault caused. An injected crash is status 86 of a process with a crash knob: it is
// restarted under its name without knobs. An unexpected exit is recorded and restarted
// under a new name.
func (s *supervisor) watch(sl *slot, cmd *exec.Cmd, done chan struct{}, logf *os.File, name, logPath string, knobs bool) {
	defer s.wg.Done()
	err := cmd.Wait()
	logf.Close()
	close(done)
	s.mu.Lock()
	defer s.mu.Unlock()
	code := -1
	if cmd.ProcessState != nil {
		code = cmd.ProcessState.ExitCode()
	}
	status := "exit 0"
	if err != nil {
		status = err.Error()
	}
	if knobs && code == faults.CrashExitCode {
		s.injected = append(s.injected, Exit{Process: name, At: time.Now(), Status: status, Tail: tail(logPath, 1)})
		if sl.cmd != cmd || sl.expectEnd || s.closing {
			return
		}
		s.logf("consumer %s exited %d after a script (injected crash); restarting it under its name", name, code)
		s.restartLater(sl, cmd, 0, false)
		return
	}
	if sl.cmd != cmd || sl.expectEnd || s.closing {
		return
	}
	s.exits = append(s.exits, Exit{Process: name, At: time.Now(), Status: status, Tail: tail(logPath, 12)})
	s.restartLater(sl, cmd, 500*time.Millisecond, true)
}

// restartLater starts slot sl again after pause once Redis answers, unless its process
// changed meanwhile, the slot is held down or the supervisor is closing. Call with s.mu held.
func (s *supervisor) restartLater(sl *slot, cmd *exec.Cmd, pause time.Duration, fresh bool) {
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		time.Sleep(pause)
		s.waitRedis(30 * time.Second)
		s.mu.Lock()
		defer s.mu.Unlock()
		if sl.cmd == cmd && !s.closing && !sl.held {
			if err := s.startLocked(sl.idx, fresh, nil); err != nil {
				s.logf("restart consumer slot %d: %v", sl.idx+1, err)
			}
		}
	}()
}

// start starts n consumers.
func (s *supervisor) start(n int) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	for i := range n {
		s.slots = append(s.slots, &slot{idx: i})
		if err := s.startLocked(i, true, nil); err != nil {
			return err
		}
	}
	return nil
}

// waitRunning waits until every slot's current process logged "consumer running".
func (s *supervisor) waitRunning(timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for {
		s.mu.Lock()
		var missing []string
		for _, sl := range s.slots {
			b, _ := os.ReadFile(sl.logPath)
			if !bytes.Contains(b, []byte(`"message":"consumer running"`)) {
				missing = append(missing, sl.name)
			}
		}
		s.mu.Unlock()
		if len(missing) == 0 {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("chaos: consumers %v not running after %v", missing, timeout)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// reserve marks slot i busy for a fault when it is free and at least one other slot stays
// free and running. It returns the slot's current name.
func (s *supervisor) reserve(i int) (string, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if i < 0 || i >= len(s.slots) || s.slots[i].busy {
		return "", false
	}
	free := 0
	for _, sl := range s.slots {
		if !sl.busy && !sl.stopped {
			free++
		}
	}
	if free < 2 {
		return "", false
	}
	s.slots[i].busy = true
	return s.slots[i].name, true
}

// reserveAll waits up to timeout until no slot is busy, then marks every slot busy. It
// returns false when some stayed busy.
func (s *supervisor) reserveAll(timeout time.Duration) bool {
	deadline := time.Now().Add(timeout)
	for {
		s.mu.Lock()
		free := true
		for _, sl := range s.slots {
			free = free && !sl.busy && !sl.stopped
		}
		if free {
			for _, sl := range s.slots {
				sl.busy = true
			}
			s.mu.Unlock()
			return true
		}
		s.mu.Unlock()
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func (s *supervisor) release(i int) {
	s.mu.Lock()
	s.slots[i].busy = false
	s.mu.Unlock()
}

// releaseAll frees every slot after reserveAll.
func (s *supervisor) releaseAll() {
	s.mu.Lock()
	for _, sl := range s.slots {
		sl.busy = false
	}
	s.mu.Unlock()
}

// killAll SIGKILLs every slot's process at once, waits for them to exit and holds the slots
// down with no automatic restart. It returns their names.
func (s *supervisor) killAll() []string {
	s.mu.Lock()
	var names []string
	var dones []chan struct{}
	for _, sl := range s.slots {
		sl.expectEnd, sl.held = true, true
		names = append(names, sl.name)
		if sl.cmd != nil {
			_ = sl.cmd.Process.Signal(syscall.SIGKILL)
			dones = append(dones, sl.done)
		}
	}
	s.mu.Unlock()
	for _, d := range dones {
		<-d
	}
	return names
}

// restartAllSame starts every slot again under its name, once Redis answers.
func (s *supervisor) restartAllSame() error {
	var errs []error
	for i := range s.slots {
		errs = append(errs, s.restartSame(i, nil))
	}
	return errors.Join(errs...)
}

// slotOf returns the slot running the process named name, or -1.
func (s *supervisor) slotOf(name string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, sl := range s.slots {
		if sl.name == name {
			return sl.idx
		}
	}
	return -1
}

// name returns slot i's current process name.
func (s *supervisor) name(i int) string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.slots[i].name
}

// kill SIGKILLs slot i's process and waits for it to exit. The slot stays held, with no
// automatic restart, until restart or restartSame.
func (s *supervisor) kill(i int) {
	s.end(i, syscall.SIGKILL)
}

// end signals slot i's process and waits for it to exit. It sends SIGCONT first, so that a
// stopped process can act on the signal. Past the grace period plus 10 s the process is
// killed. The slot is held down.
func (s *supervisor) end(i int, sig syscall.Signal) {
	s.mu.Lock()
	sl := s.slots[i]
	sl.expectEnd, sl.held = true, true
	cmd, done := sl.cmd, sl.done
	s.mu.Unlock()
	_ = cmd.Process.Signal(syscall.SIGCONT)
	_ = cmd.Process.Signal(sig)
	select {
	case <-done:
	case <-time.After(s.grace + 10*time.Second):
		_ = cmd.Process.Kill()
		<-done
	}
}

// restart starts a new incarnation with a new name in slot i, once Redis answers.
func (s *supervisor) restart(i int) error { return s.restartWith(i, true, nil) }

// restartSame starts slot i again under its current name with the fault knobs env, once
// Redis answers.
func (s *supervisor) restartSame(i int, env []string) error { return s.restartWith(i, false, env) }

func (s *supervisor) restartWith(i int, fresh bool, env []string) error {
	s.waitRedis(30 * time.Second)
	s.mu.Lock()
	defer s.mu.Unlock()
	s.slots[i].held = false
	if s.closing {
		return nil
	}
	return s.startLocked(i, fresh, env)
}

// running returns slot i's current process, to tell later whether it was replaced.
func (s *supervisor) running(i int) *exec.Cmd {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.slots[i].cmd
}

// stop and cont send SIGSTOP / SIGCONT to slot i's process.
func (s *supervisor) stop(i int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.slots[i].stopped = true
	_ = s.slots[i].cmd.Process.Signal(syscall.SIGSTOP)
}

func (s *supervisor) cont(i int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.slots[i].stopped = false
	_ = s.slots[i].cmd.Process.Signal(syscall.SIGCONT)
}

// shutdown ends every consumer: SIGCONT, SIGTERM, and SIGKILL after the grace period.
func (s *supervisor) shutdown() {
	s.mu.Lock()
	s.closing = true
	var dones []chan struct{}
	var cmds []*exec.Cmd
	for _, sl := range s.slots {
		if sl.cmd == nil {
			continue
		}
		sl.expectEnd = true
		_ = sl.cmd.Process.Signal(syscall.SIGCONT)
		_ = sl.cmd.Process.Signal(syscall.SIGTERM)
		dones = append(dones, sl.done)
		cmds = append(cmds, sl.cmd)
	}
	s.mu.Unlock()
	for i, d := range dones {
		select {
		case <-d:
		case <-time.After(s.grace + 10*time.Second):
			_ = cmds[i].Process.Kill()
			<-d
		}
	}
	s.wg.Wait()
}

func (s *supervisor) logFiles() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string(nil), s.logs...)
}

func (s *supervisor) exitList() []Exit {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]Exit(nil), s.exits...)
}

func (s *supervisor) injectedList() []Exit {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]Exit(nil), s.injected...)
}

func filterEnv(env []string, drop ...string) []string {
	out := env[:0:0]
	for _, kv := range env {
		keep := true
		for _, d := range drop {
			if strings.HasPrefix(kv, d+"=") {
				keep = false
			}
		}
		if keep {
			out = append(out, kv)
		}
	}
	return out
}

func tail(path string, n int) string {
	b, _ := os.ReadFile(path)
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}
