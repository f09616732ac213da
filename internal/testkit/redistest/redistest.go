// Package redistest gives tests a real Redis: a private redis-server child on a free loopback
// port, or the server named by REDIS_URL when that is set. Through Options a private server
// may serve TLS only, with a CA and certificates made for it, and may load ACL users.
//
// A private server keeps nothing on disk and is stopped in t.Cleanup. It can be stopped,
// restarted on the same port, paused with SIGSTOP and resumed, so that fault tests can take
// Redis away in the middle of a run. With REDIS_URL set, tests share one server and isolate
// themselves by key prefix, as Prefix makes. Fault tests that need their own server call
// Start directly, which always starts a private child.
package redistest

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// Server is a private redis-server child process. Its methods are safe for concurrent use.
type Server struct {
	tb   testing.TB
	port int
	dir  string
	args []string
	tls  *TLSFiles // nil for plain TCP
	// sentinel is the sentinel configuration of a sentinel process, "" for a server.
	sentinel string

	mu  sync.Mutex
	cmd *exec.Cmd
}

// Options tune a private server. The zero value is a plain server with no persistence.
type Options struct {
	// Args are extra redis-server arguments, such as "--requirepass", "x". Defaults to none.
	Args []string
	// TLS makes the server listen with TLS only, with --tls-port on the free port and --port
	// 0, and makes a CA, a server and a client certificate for it in a temporary directory,
	// as Server.TLS returns. Clients may present the client certificate but need not.
	// Defaults to false.
	TLS bool
	// ACL holds ACL file lines loaded with --aclfile, such as "user app on >secret ~ai:* +ping".
	// A "default" user that the lines do not name keeps full access without a password, so
	// Client and Target helpers still work. Defaults to none, with no ACL file.
	ACL []string
	// Sentinel runs the process as a Redis Sentinel, redis-server --sentinel, with these
	// configuration lines, such as "sentinel monitor mymaster 127.0.0.1 6379 2". Defaults to
	// none, which starts a server.
	Sentinel []string
}

// Binary returns the redis-server executable: $REDIS_SERVER when set, else the one on PATH.
func Binary() (string, error) {
	if p := os.Getenv("REDIS_SERVER"); p != "" {
		return p, nil
	}
	return exec.LookPath("redis-server")
}

// Start starts a private redis-server on a free loopback port and stops it in tb.Cleanup.
// It fails the test when no redis-server binary is found, such as the one the Makefile installs.
func Start(tb testing.TB, opts *Options) *Server {
	tb.Helper()
	if opts == nil {
		opts = &Options{}
	}
	s := &Server{tb: tb, dir: tb.TempDir(), args: append([]string(nil), opts.Args...)}
	if len(opts.Sentinel) > 0 {
		s.sentinel = strings.Join(opts.Sentinel, "\n") + "\n"
	}
	if opts.TLS {
		f, err := makeTLSFiles(tb.TempDir())
		if err != nil {
			tb.Fatalf("redistest: TLS files: %v", err)
		}
		s.tls = f
	}
	if len(opts.ACL) > 0 {
		path := filepath.Join(tb.TempDir(), "users.acl")
		if err := os.WriteFile(path, []byte(strings.Join(opts.ACL, "\n")+"\n"), 0o600); err != nil {
			tb.Fatalf("redistest: ACL file: %v", err)
		}
		s.args = append(s.args, "--aclfile", path)
	}
	var lastErr error
	for range 5 {
		port, err := freePort()
		if err != nil {
			tb.Fatalf("redistest: free port: %v", err)
		}
		s.port = port
		if lastErr = s.start(); lastErr == nil {
			tb.Cleanup(s.kill)
			return s
		}
	}
	tb.Fatalf("redistest: start redis-server: %v", lastErr)
	return nil
}

// Addr is the host:port the server listens on. It stays the same across Restart.
func (s *Server) Addr() string { return net.JoinHostPort("127.0.0.1", strconv.Itoa(s.port)) }

// URL is a redis:// URL for the server, or rediss:// for a TLS server. Clients of a TLS
// server need the test CA, TLS().CAFile.
func (s *Server) URL() string {
	if s.tls != nil {
		return "rediss://" + s.Addr()
	}
	return "redis://" + s.Addr()
}

// TLS returns the files of a TLS server, or nil when the server speaks plain TCP.
func (s *Server) TLS() *TLSFiles { return s.tls }

// Client returns a new go-redis client for the server as the default user, closed in
// Cleanup. On a TLS server it trusts the test CA and presents the client certificate.
func (s *Server) Client() *redis.Client {
	c := redis.NewClient(s.options())
	s.tb.Cleanup(func() { _ = c.Close() })
	return c
}

// options are the client options of the default user.
func (s *Server) options() *redis.Options {
	opt := &redis.Options{Addr: s.Addr()}
	if s.tls != nil {
		cfg, err := s.tls.ClientConfig(true)
		if err != nil {
			s.tb.Fatalf("redistest: %v", err)
		}
		opt.TLSConfig = cfg
	}
	return opt
}

func (s *Server) start() error {
	bin, err := Binary()
	if err != nil {
		return fmt.Errorf("redis-server not found (run `make deps`): %w", err)
	}
	args := []string{
		"--port", strconv.Itoa(s.port), "--bind", "127.0.0.1",
		"--save", "", "--appendonly", "no", "--dir", s.dir,
		"--daemonize", "no", "--protected-mode", "no", "--loglevel", "warning",
	}
	if s.tls != nil {
		args[1] = "0"
		args = append(args, "--tls-port", strconv.Itoa(s.port), "--tls-cert-file", s.tls.CertFile,
			"--tls-key-file", s.tls.KeyFile, "--tls-ca-cert-file", s.tls.CAFile, "--tls-auth-clients", "optional")
	}
	if s.sentinel != "" {
		// A sentinel rewrites its configuration file as it learns the deployment, so the file
		// is written once and kept across restarts.
		conf := filepath.Join(s.dir, "sentinel.conf")
		if _, err := os.Stat(conf); err != nil {
			if err := os.WriteFile(conf, []byte(s.sentinel), 0o600); err != nil {
				return err
			}
		}
		args = []string{conf, "--sentinel", "--port", strconv.Itoa(s.port), "--bind", "127.0.0.1",
			"--dir", s.dir, "--daemonize", "no", "--protected-mode", "no", "--loglevel", "warning"}
	}
	args = append(args, s.args...)
	cmd := exec.Command(bin, args...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	out, err := cmd.StdoutPipe()
	if err != nil {
		return err
	}
	cmd.Stderr = cmd.Stdout
	if err := cmd.Start(); err != nil {
		return err
	}
	exited := make(chan error, 1)
	var logBuf strings.Builder
	var logMu sync.Mutex
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			logMu.Lock()
			if logBuf.Len() < 8<<10 {
				logBuf.WriteString(sc.Text() + "\n")
			}
			logMu.Unlock()
		}
		exited <- cmd.Wait()
	}()
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		select {
		case err := <-exited:
			logMu.Lock()
			defer logMu.Unlock()
			return fmt.Errorf("redis-server exited: %v: %s", err, logBuf.String())
		default:
		}
		if s.answersAs(cmd.Process.Pid) {
			s.mu.Lock()
			s.cmd = cmd
			s.mu.Unlock()
			return nil
		}
		time.Sleep(10 * time.Millisecond)
	}
	_ = cmd.Process.Kill()
	return errors.New("redis-server did not answer PING within 10s")
}

// answersAs reports whether the server on s's port answers PING and is the process pid.
// Another test's server may win the race for a port freePort returned, and answer PING before
// this one fails to bind and exits. A server that may not be asked INFO (NOPERM) counts as pid.
func (s *Server) answersAs(pid int) bool {
	own := false
	_ = s.probe(func(ctx context.Context, c *redis.Client) error {
		if c.Ping(ctx).Err() != nil {
			return nil
		}
		info, err := c.Info(ctx, "server").Result()
		if err != nil {
			own = strings.HasPrefix(err.Error(), "NOPERM")
			return nil
		}
		own = true // no process_id line (a sentinel answers with one too): nothing to compare
		for _, line := range strings.Split(info, "\n") {
			if v, ok := strings.CutPrefix(strings.TrimSpace(line), "process_id:"); ok {
				own = v == strconv.Itoa(pid)
				break
			}
		}
		return nil
	})
	return own
}

func (s *Server) ping() error {
	return s.probe(func(ctx context.Context, c *redis.Client) error { return c.Ping(ctx).Err() })
}

// probe runs f on a client of its own with short timeouts and no retries.
func (s *Server) probe(f func(context.Context, *redis.Client) error) error {
	opt := s.options()
	opt.MaxRetries, opt.DialTimeout = -1, 200*time.Millisecond
	c := redis.NewClient(opt)
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	return f(ctx, c)
}

// Stop kills the server with SIGKILL, like a crash, so there is no shutdown save. Keys are lost.
func (s *Server) Stop() {
	s.kill()
}

func (s *Server) kill() {
	s.mu.Lock()
	cmd := s.cmd
	s.cmd = nil
	s.mu.Unlock()
	if cmd == nil {
		return
	}
	_ = cmd.Process.Signal(syscall.SIGCONT)
	_ = cmd.Process.Kill()
	// Wait until the port is free so that Restart can bind it again.
	deadline := time.Now().Add(5 * time.Second)
	for time.Now().Before(deadline) && s.ping() == nil {
		time.Sleep(10 * time.Millisecond)
	}
}

// Restart starts the server again on the same port after Stop. Data is not kept.
func (s *Server) Restart() {
	s.tb.Helper()
	s.kill()
	var err error
	for range 50 {
		if err = s.start(); err == nil {
			return
		}
		time.Sleep(50 * time.Millisecond)
	}
	s.tb.Fatalf("redistest: restart: %v", err)
}

// Pause stops the server process with SIGSTOP: connections stay open but nothing answers.
// It returns once the process is stopped, since kill returns before the signal takes effect
// and a server still running then may answer a command the test meant it to miss.
func (s *Server) Pause() { s.signal(syscall.SIGSTOP, true) }

// Resume continues a paused server with SIGCONT, and returns once it runs again.
func (s *Server) Resume() { s.signal(syscall.SIGCONT, false) }

func (s *Server) signal(sig syscall.Signal, stopped bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cmd == nil || s.cmd.Process.Signal(sig) != nil {
		return
	}
	stat := filepath.Join("/proc", strconv.Itoa(s.cmd.Process.Pid), "stat")
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		b, err := os.ReadFile(stat)
		if err != nil {
			return // with no procfs, trust the signal
		}
		// The state follows the command name, which is in parentheses, as in "pid (comm) S ...".
		f := strings.Fields(string(b[bytes.LastIndexByte(b, ')')+1:]))
		if len(f) > 0 && (f[0] == "T" || f[0] == "t") == stopped {
			return
		}
		time.Sleep(time.Millisecond)
	}
	s.tb.Fatalf("redistest: the server did not %s within 10 s", map[bool]string{true: "stop", false: "continue"}[stopped])
}

// Target is a Redis for one test: a client and a key prefix unique to the test.
type Target struct {
	// Client talks to the server and is closed in Cleanup.
	Client *redis.Client
	// URL is the server's URL, for child processes.
	URL string
	// Prefix is unique to the test. Pass it as topics.Keyspace.Prefix.
	Prefix string
	// Server is the private server, or nil when REDIS_URL is used.
	Server *Server
}

// New returns a Redis for tb: the server of REDIS_URL when it is set, else a private child.
// The prefix is unique either way, so tests may share a server safely.
func New(tb testing.TB) *Target {
	tb.Helper()
	prefix := Prefix()
	if u := os.Getenv("REDIS_URL"); u != "" {
		opt, err := redis.ParseURL(u)
		if err != nil {
			tb.Fatalf("redistest: REDIS_URL: %v", err)
		}
		c := redis.NewClient(opt)
		tb.Cleanup(func() { _ = c.Close() })
		return &Target{Client: c, URL: u, Prefix: prefix}
	}
	s := Start(tb, nil)
	return &Target{Client: s.Client(), URL: s.URL(), Prefix: prefix, Server: s}
}

// Prefix returns a fresh random key prefix such as "t3f9a1c2e:ai".
func Prefix() string {
	var b [4]byte
	_, _ = rand.Read(b[:])
	return "t" + hex.EncodeToString(b[:]) + ":ai"
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}
