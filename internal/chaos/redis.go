package chaos

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"
)

// redisServer is the run's own redis-server child, in its own directory with AOF on and
// appendfsync always, so that a restart on the same port keeps the data, as production
// would. internal/testkit/redistest takes a testing.TB and keeps nothing on disk, hence this
// small twin.
type redisServer struct {
	bin  string
	port int
	dir  string
	log  string
	args []string // extra redis-server arguments, as in cluster mode
	// conf, for a sentinel, is its configuration file, which it rewrites as it learns the
	// deployment. The process runs redis-server conf --sentinel.
	conf string

	mu   sync.Mutex
	cmd  *exec.Cmd
	done chan struct{}
}

// startRedis starts redis-server on a free loopback port with its data in dir.
func startRedis(dir string, extra ...string) (*redisServer, error) {
	return startServer(dir, "", extra)
}

// startServer starts redis-server on a free loopback port in dir. It starts a sentinel with
// its configuration file conf, or a server when conf is "".
func startServer(dir, conf string, extra []string) (*redisServer, error) {
	bin, err := redisServerBin()
	if err != nil {
		return nil, err
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	log := "redis.log"
	if conf != "" {
		log = "sentinel.log"
	}
	var lastErr error
	for range 5 {
		port, err := freePort()
		if err != nil {
			return nil, err
		}
		s := &redisServer{bin: bin, port: port, dir: dir, log: filepath.Join(dir, log), args: extra, conf: conf}
		if lastErr = s.start(); lastErr == nil {
			return s, nil
		}
	}
	return nil, lastErr
}

// freePort returns a loopback port that was free a moment ago.
func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, fmt.Errorf("chaos: free port: %w", err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

func redisServerBin() (string, error) {
	bin := os.Getenv("REDIS_SERVER")
	if bin == "" {
		var err error
		if bin, err = exec.LookPath("redis-server"); err != nil {
			return "", fmt.Errorf("redis-server not found (run `make deps`): %w", err)
		}
	}
	return bin, nil
}

func (s *redisServer) Addr() string { return net.JoinHostPort("127.0.0.1", strconv.Itoa(s.port)) }
func (s *redisServer) URL() string  { return "redis://" + s.Addr() + "/0" }

func (s *redisServer) start() error {
	args := []string{
		"--port", strconv.Itoa(s.port), "--bind", "127.0.0.1", "--dir", s.dir,
		"--appendonly", "yes", "--appendfsync", "always", "--save", "",
		"--daemonize", "no", "--protected-mode", "no", "--loglevel", "notice", "--logfile", s.log}
	if s.conf != "" {
		args = []string{s.conf, "--sentinel", "--port", strconv.Itoa(s.port), "--bind", "127.0.0.1", "--dir", s.dir,
			"--daemonize", "no", "--protected-mode", "no", "--loglevel", "notice", "--logfile", s.log}
	}
	cmd := exec.Command(s.bin, append(args, s.args...)...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		return err
	}
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	deadline := time.Now().Add(30 * time.Second) // loading a large AOF takes a moment
	for time.Now().Before(deadline) {
		select {
		case <-done:
			return fmt.Errorf("redis-server exited at start (see %s)", s.log)
		default:
		}
		if s.ping() == nil {
			s.mu.Lock()
			s.cmd, s.done = cmd, done
			s.mu.Unlock()
			return nil
		}
		time.Sleep(20 * time.Millisecond)
	}
	_ = cmd.Process.Kill()
	<-done
	return errors.New("redis-server did not answer PING within 30s")
}

// ping returns nil once the server serves commands, not while it loads the AOF.
func (s *redisServer) ping() error {
	c := redis.NewClient(&redis.Options{Addr: s.Addr(), MaxRetries: -1, DialTimeout: 200 * time.Millisecond})
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	return c.Ping(ctx).Err()
}

// stop signals the server and waits for it to exit. SIGTERM is a clean shutdown and SIGKILL
// a crash. After 15 s it is killed.
func (s *redisServer) stop(sig syscall.Signal) {
	s.mu.Lock()
	cmd, done := s.cmd, s.done
	s.cmd = nil
	s.mu.Unlock()
	if cmd == nil {
		return
	}
	_ = cmd.Process.Signal(syscall.SIGCONT)
	_ = cmd.Process.Signal(sig)
	select {
	case <-done:
	case <-time.After(15 * time.Second):
		_ = cmd.Process.Kill()
		<-done
	}
}

// restart stops the server with sig, waits down, and starts it again on the same port and
// directory. The AOF brings the data back.
func (s *redisServer) restart(sig syscall.Signal, down time.Duration) error {
	s.stop(sig)
	time.Sleep(down)
	var err error
	for range 50 {
		if err = s.start(); err == nil {
			return nil
		}
		time.Sleep(100 * time.Millisecond)
	}
	return fmt.Errorf("restart redis-server: %w", err)
}

// restartEmpty SIGKILLs the server, deletes its AOF directory, AOF files and any RDB
// snapshot, waits down and starts it again, empty, on the same port. It acts out a Redis
// that lost its data to a replaced host, a lost disk or persistence turned off.
func (s *redisServer) restartEmpty(down time.Duration) error {
	s.stop(syscall.SIGKILL)
	var errs []error
	for _, pattern := range []string{"appendonlydir", "*.aof", "*.rdb"} {
		paths, _ := filepath.Glob(filepath.Join(s.dir, pattern))
		for _, p := range paths {
			if err := os.RemoveAll(p); err != nil {
				errs = append(errs, err)
			}
		}
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("chaos: delete the Redis data: %w", err)
	}
	return s.restart(syscall.SIGKILL, down) // stopped already, so restart only waits and starts
}

// signal sends sig, such as SIGSTOP or SIGCONT, to the running server.
func (s *redisServer) signal(sig syscall.Signal) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cmd != nil {
		_ = s.cmd.Process.Signal(sig)
	}
}

// running reports whether the server process is up. It may be paused.
func (s *redisServer) running() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.cmd != nil
}
