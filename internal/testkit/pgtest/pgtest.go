// Package pgtest gives tests a real PostgreSQL. It is either a private server that the
// helper initialises with initdb into a temporary directory and runs on a free loopback
// port, or the server named by FLIGHTDECK_TEST_PG_URL when that is set. Either way each call
// of New gets a database of its own, dropped or deleted with the private server at the end
// of the test.
//
// initdb refuses to run as root, so when the test runs as root the helper runs initdb and
// postgres as the "postgres" OS user, which the Debian package creates. The private server
// runs with fsync off, trading durability against a machine crash for speed. A process
// crash loses no committed row. The server can be stopped and restarted on the same port, so
// that fault tests can take the database away in the middle of a run. It never uses the
// machine's own PostgreSQL on port 5432.
package pgtest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/flightdeck-ai/flightdeck/internal/testkit/pgbin"
)

// EnvURL names the variable that points tests at an existing server instead of a private
// one. Its value is a URL whose user may create databases, such as
// postgres://postgres@127.0.0.1:5433/postgres.
const EnvURL = "FLIGHTDECK_TEST_PG_URL"

// Server is a private PostgreSQL child process. Its methods are safe for concurrent use.
type Server struct {
	tb   testing.TB
	bin  string // directory of initdb and postgres
	dir  string // owned by the server's user: data/ and the socket
	port int
	cred *syscall.Credential // nil to run as the current user

	mu     sync.Mutex
	cmd    *exec.Cmd
	log    *os.File
	exited chan struct{} // closed when cmd has exited
}

// BinDir returns the directory holding initdb and postgres, as pgbin.Dir finds it.
func BinDir() (string, error) { return pgbin.Dir() }

// Start initialises and starts a private server and stops it in tb.Cleanup.
func Start(tb testing.TB) *Server {
	tb.Helper()
	bin, err := BinDir()
	if err != nil {
		tb.Fatal(err)
	}
	dir, err := os.MkdirTemp("", "flightdeck-pgtest-")
	if err != nil {
		tb.Fatalf("pgtest: %v", err)
	}
	s := &Server{tb: tb, bin: bin, dir: dir}
	tb.Cleanup(func() { s.kill(); _ = os.RemoveAll(dir) })
	if os.Geteuid() == 0 {
		u, err := user.Lookup("postgres")
		if err != nil {
			tb.Fatalf("pgtest: running as root, and no postgres OS user to run initdb as: %v", err)
		}
		uid, _ := strconv.ParseUint(u.Uid, 10, 32)
		gid, _ := strconv.ParseUint(u.Gid, 10, 32)
		s.cred = &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}
		if err := os.Chown(dir, int(uid), int(gid)); err != nil {
			tb.Fatalf("pgtest: %v", err)
		}
	}
	initdb := s.command("initdb", "-D", filepath.Join(dir, "data"), "-U", "postgres", "-A", "trust",
		"-E", "UTF8", "--locale=C", "--no-sync")
	if out, err := initdb.CombinedOutput(); err != nil {
		tb.Fatalf("pgtest: initdb: %v\n%s", err, out)
	}
	var lastErr error
	for range 5 {
		if s.port, err = freePort(); err != nil {
			tb.Fatalf("pgtest: free port: %v", err)
		}
		if lastErr = s.start(); lastErr == nil {
			return s
		}
	}
	tb.Fatalf("pgtest: start postgres: %v", lastErr)
	return nil
}

// command returns an exec.Cmd for the named server program, run as the server's user.
func (s *Server) command(name string, args ...string) *exec.Cmd {
	cmd := exec.Command(filepath.Join(s.bin, name), args...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: s.cred, Pdeathsig: syscall.SIGKILL}
	cmd.Dir = s.dir
	return cmd
}

func (s *Server) start() error {
	logf, err := os.Create(filepath.Join(s.dir, "postgres.log"))
	if err != nil {
		return err
	}
	if s.cred != nil {
		_ = logf.Chown(int(s.cred.Uid), int(s.cred.Gid))
	}
	cmd := s.command("postgres", "-D", filepath.Join(s.dir, "data"), "-p", strconv.Itoa(s.port),
		"-c", "listen_addresses=127.0.0.1", "-c", "unix_socket_directories="+s.dir,
		"-c", "fsync=off", "-c", "full_page_writes=off",
		"-c", "max_connections=200", "-c", "shared_buffers=32MB")
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		logf.Close()
		return err
	}
	exited := make(chan error, 1)
	gone := make(chan struct{})
	go func() { exited <- cmd.Wait(); close(gone) }()
	deadline := time.Now().Add(20 * time.Second)
	for time.Now().Before(deadline) {
		select {
		case err := <-exited:
			logf.Close()
			b, _ := os.ReadFile(logf.Name())
			return fmt.Errorf("postgres exited: %v: %s", err, b)
		default:
		}
		if s.ping() == nil {
			s.mu.Lock()
			s.cmd, s.log, s.exited = cmd, logf, gone
			s.mu.Unlock()
			return nil
		}
		time.Sleep(20 * time.Millisecond)
	}
	_ = cmd.Process.Kill()
	logf.Close()
	return errors.New("postgres did not accept connections within 20s")
}

func (s *Server) ping() error {
	ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
	defer cancel()
	conn, err := pgx.Connect(ctx, s.URL("postgres"))
	if err != nil {
		return err
	}
	defer conn.Close(ctx)
	return conn.Ping(ctx)
}

// URL returns the URL of database db on the server.
func (s *Server) URL(db string) string {
	return fmt.Sprintf("postgres://postgres@127.0.0.1:%d/%s?sslmode=disable", s.port, db)
}

// Stop kills the server with SIGKILL, as in a crash. Committed data stays in its directory.
func (s *Server) Stop() { s.kill() }

func (s *Server) kill() {
	s.mu.Lock()
	cmd, logf, gone := s.cmd, s.log, s.exited
	s.cmd, s.log, s.exited = nil, nil, nil
	s.mu.Unlock()
	if cmd == nil {
		return
	}
	_ = cmd.Process.Signal(syscall.SIGCONT)
	_ = cmd.Process.Kill()
	<-gone
	logf.Close()
	// The backends notice that the postmaster is gone and exit. Restart needs them gone,
	// since their shared memory blocks a new postmaster.
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) && childrenLeft(s.dir) {
		time.Sleep(20 * time.Millisecond)
	}
}

// childrenLeft reports whether a process still runs from the server's directory, such as a
// backend of the killed postmaster.
func childrenLeft(dir string) bool {
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		if _, err := strconv.Atoi(e.Name()); err != nil {
			continue
		}
		if cwd, err := os.Readlink(filepath.Join("/proc", e.Name(), "cwd")); err == nil && strings.HasPrefix(cwd, dir) {
			return true
		}
	}
	return false
}

// Pause stops the server with SIGSTOP: connections stay open, nothing answers.
func (s *Server) Pause() { s.signal(syscall.SIGSTOP) }

// Resume continues a paused server.
func (s *Server) Resume() { s.signal(syscall.SIGCONT) }

func (s *Server) signal(sig syscall.Signal) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cmd != nil {
		_ = s.cmd.Process.Signal(sig)
	}
}

// Restart starts the server again on the same port after Stop, with the data it had.
func (s *Server) Restart() {
	s.tb.Helper()
	s.kill()
	var err error
	for range 50 {
		if err = s.start(); err == nil {
			return
		}
		time.Sleep(100 * time.Millisecond)
	}
	s.tb.Fatalf("pgtest: restart: %v", err)
}

// Target is a database for one test.
type Target struct {
	// URL is the database's URL, for pools and child processes.
	URL string
	// Server is the private server, or nil when FLIGHTDECK_TEST_PG_URL is used.
	Server *Server
}

// New returns a fresh database for tb, on the server of FLIGHTDECK_TEST_PG_URL when it is
// set, else on a private server. On the shared server the database is dropped at the end of
// the test.
func New(tb testing.TB) *Target {
	tb.Helper()
	if u := os.Getenv(EnvURL); u != "" {
		return &Target{URL: createDatabase(tb, u)}
	}
	s := Start(tb)
	return &Target{URL: createDatabase(tb, s.URL("postgres")), Server: s}
}

// NewDatabase returns the URL of a fresh database on s, for tests that need several.
func (s *Server) NewDatabase(tb testing.TB) string {
	tb.Helper()
	return createDatabase(tb, s.URL("postgres"))
}

// createDatabase creates a database with a random name on the server at the URL admin and
// returns its URL. The database is dropped in tb.Cleanup.
func createDatabase(tb testing.TB, admin string) string {
	tb.Helper()
	var b [4]byte
	_, _ = rand.Read(b[:])
	name := "flightdeck_test_" + hex.EncodeToString(b[:])
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, admin)
	if err != nil {
		tb.Fatalf("pgtest: connect: %v", err)
	}
	defer conn.Close(context.Background())
	if _, err := conn.Exec(ctx, "CREATE DATABASE "+name); err != nil {
		tb.Fatalf("pgtest: create database: %v", err)
	}
	tb.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if c, err := pgx.Connect(ctx, admin); err == nil {
			_, _ = c.Exec(ctx, "DROP DATABASE IF EXISTS "+name+" WITH (FORCE)")
			_ = c.Close(ctx)
		}
	})
	u, err := url.Parse(admin)
	if err != nil {
		tb.Fatalf("pgtest: %v", err)
	}
	u.Path = "/" + name
	return u.String()
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}
