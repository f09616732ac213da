package chaos

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"
)

// supervisor runs N consumer slots. Each slot runs one consumer process at a time; every
// (re)start is a new incarnation with a new name ("c<slot>-<incarnation>") and its own log
// file. A process that exits without being told to is recorded as an Exit and restarted.
type supervisor struct {
	bin, config, redisURL string
	logDir, tmpDir        string
	grace                 time.Duration
	// waitRedis blocks until Redis answers (or gives up); restarts wait for it, since a
	// consumer exits at once when its first Redis call fails.
	waitRedis func(time.Duration) bool

	mu      sync.Mutex
	slots   []*slot
	exits   []Exit
	logs    []string // every incarnation's log file
	closing bool
	wg      sync.WaitGroup
}

type slot struct {
	idx, inc  int
	name      string
	cmd       *exec.Cmd
	done      chan struct{}
	started   time.Time
	logPath   string
	expectEnd bool // the runner killed or stopped it on purpose
	stopped   bool // SIGSTOPped
	busy      bool // a fault is acting on it
}

func (s *supervisor) stagesArg() string { return strings.Join(chaosStages, ",") }

// startSlot starts a new incarnation in slot i. Call with s.mu held.
func (s *supervisor) startLocked(i int) error {
	sl := s.slots[i]
	sl.inc++
	sl.name = fmt.Sprintf("c%d-%d", i+1, sl.inc)
	sl.logPath = filepath.Join(s.logDir, sl.name+".log")
	logf, err := os.Create(sl.logPath)
	if err != nil {
		return err
	}
	cmd := exec.Command(s.bin, "--config", s.config, "--stages", s.stagesArg(), "--name", sl.name,
		"--grace", s.grace.String(), "--liveness-interval", "200ms", "--claim-interval", "200ms",
		"--log-level", "info", "--log-format", "json")
	cmd.Env = append(filterEnv(os.Environ(), "REDIS_URL", "REDIS_URL_FILE", "TMPDIR", "FLIGHTDECK_HTTP"),
		"REDIS_URL="+s.redisURL, "TMPDIR="+s.tmpDir)
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		logf.Close()
		return err
	}
	done := make(chan struct{})
	sl.cmd, sl.done, sl.started, sl.expectEnd, sl.stopped = cmd, done, time.Now(), false, false
	s.logs = append(s.logs, sl.logPath)
	s.wg.Add(1)
	go func(name, logPath string, started time.Time) {
		defer s.wg.Done()
		err := cmd.Wait()
		logf.Close()
		close(done)
		s.mu.Lock()
		defer s.mu.Unlock()
		if sl.cmd != cmd || sl.expectEnd || s.closing {
			return
		}
		status := "exit 0"
		if err != nil {
			status = err.Error()
		}
		s.exits = append(s.exits, Exit{Process: name, At: time.Now(), Status: status, Tail: tail(logPath, 12)})
		s.wg.Add(1)
		go func() { // restart it, as a process supervisor would
			defer s.wg.Done()
			time.Sleep(500 * time.Millisecond)
			s.waitRedis(30 * time.Second)
			s.mu.Lock()
			defer s.mu.Unlock()
			if sl.cmd == cmd && !s.closing {
				_ = s.startLocked(sl.idx)
			}
		}()
	}(sl.name, sl.logPath, sl.started)
	return nil
}

// start starts n consumers.
func (s *supervisor) start(n int) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	for i := range n {
		s.slots = append(s.slots, &slot{idx: i})
		if err := s.startLocked(i); err != nil {
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
			return fmt.Errorf("consumers %v not running after %v", missing, timeout)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// reserve marks slot i busy for a fault when it is free and at least one other slot stays
// free and running; it returns the slot's current name.
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

func (s *supervisor) release(i int) {
	s.mu.Lock()
	s.slots[i].busy = false
	s.mu.Unlock()
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

// kill SIGKILLs slot i's process and waits for it to exit.
func (s *supervisor) kill(i int) {
	s.mu.Lock()
	sl := s.slots[i]
	sl.expectEnd = true
	cmd, done := sl.cmd, sl.done
	s.mu.Unlock()
	_ = cmd.Process.Signal(syscall.SIGKILL)
	<-done
}

// restart starts a new incarnation in slot i (after kill), once Redis answers.
func (s *supervisor) restart(i int) error {
	s.waitRedis(30 * time.Second)
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closing {
		return nil
	}
	return s.startLocked(i)
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
