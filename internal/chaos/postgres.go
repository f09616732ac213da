package chaos

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/flightdeck-ai/flightdeck/internal/testkit/pgbin"
)

// ErrNoPostgres is returned when the archive is asked for but PostgreSQL's server programs
// initdb and postgres are not installed. `make deps` installs them.
var ErrNoPostgres = errors.New("chaos: no PostgreSQL server programs for the archive")

// ErrPostgresStart is returned when the run's PostgreSQL exits at start or does not accept
// connections in time. Its log says why.
var ErrPostgresStart = errors.New("chaos: postgres did not start")

// archiveDB is the database the run's consumers archive their outcomes in.
const archiveDB = "flightdeck"

// pgServer is the run's own PostgreSQL child, the durable archive of the consumers set by
// Config.Archive. Its data lives in a directory of its own and its log in the run's
// directory. When the run is root, the "postgres" OS user owns the data, since initdb
// refuses root. Like internal/testkit/pgtest it runs with fsync off, trading durability
// against a machine crash for speed. The chaos faults never touch it. pgtest takes a
// testing.TB, hence this small twin.
type pgServer struct {
	bin  string // directory of initdb and postgres
	dir  string // data/ and the socket
	port int
	cred *syscall.Credential // nil to run as the current user
	cmd  *exec.Cmd
	done chan struct{}
}

// startPostgres initialises a server in a new temporary directory, starts it on a free
// loopback port with its log in logPath, and creates the archive database.
func startPostgres(ctx context.Context, logPath string) (*pgServer, error) {
	bin, err := pgbin.Dir() // the tests' lookup of $FLIGHTDECK_TEST_PG_BIN, Debian's, PATH
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrNoPostgres, err)
	}
	dir, err := os.MkdirTemp("", "flightdeck-chaos-pg-")
	if err != nil {
		return nil, fmt.Errorf("chaos: postgres: %w", err)
	}
	s := &pgServer{bin: bin, dir: dir}
	if os.Geteuid() == 0 {
		u, err := user.Lookup("postgres")
		if err != nil {
			s.remove()
			return nil, fmt.Errorf("chaos: running as root, and no postgres OS user to run initdb as: %w", err)
		}
		uid, _ := strconv.ParseUint(u.Uid, 10, 32)
		gid, _ := strconv.ParseUint(u.Gid, 10, 32)
		s.cred = &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}
		if err := os.Chown(dir, int(uid), int(gid)); err != nil {
			s.remove()
			return nil, fmt.Errorf("chaos: postgres: %w", err)
		}
	}
	initdb := s.command(ctx, "initdb", "-D", filepath.Join(dir, "data"), "-U", "postgres", "-A", "trust",
		"-E", "UTF8", "--locale=C", "--no-sync")
	if out, err := initdb.CombinedOutput(); err != nil {
		s.remove()
		return nil, fmt.Errorf("chaos: initdb: %w\n%s", err, out)
	}
	logf, err := os.Create(logPath)
	if err != nil {
		s.remove()
		return nil, fmt.Errorf("chaos: postgres log: %w", err)
	}
	defer logf.Close() // the child keeps its own descriptor
	for range 5 {
		if s.port, err = freePort(); err != nil {
			break
		}
		if err = s.start(ctx, logf); err == nil {
			break
		}
	}
	if err == nil {
		err = s.createDB(ctx)
	}
	if err != nil {
		s.stop()
		return nil, err
	}
	return s, nil
}

// command returns the named server program as a command run as the server's user.
func (s *pgServer) command(ctx context.Context, name string, args ...string) *exec.Cmd {
	cmd := exec.CommandContext(ctx, filepath.Join(s.bin, name), args...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: s.cred, Pdeathsig: syscall.SIGKILL}
	cmd.Dir = s.dir
	return cmd
}

// start runs postgres on s.port and waits until it accepts connections.
func (s *pgServer) start(ctx context.Context, logf *os.File) error {
	// Not CommandContext: the server outlives the start's context. stop ends it.
	cmd := s.command(context.Background(), "postgres", "-D", filepath.Join(s.dir, "data"), "-p", strconv.Itoa(s.port),
		"-c", "listen_addresses=127.0.0.1", "-c", "unix_socket_directories="+s.dir,
		"-c", "fsync=off", "-c", "full_page_writes=off", "-c", "max_connections=100", "-c", "shared_buffers=32MB")
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("chaos: start postgres: %w", err)
	}
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	s.cmd, s.done = cmd, done
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) && ctx.Err() == nil {
		select {
		case <-done:
			s.cmd = nil
			return fmt.Errorf("%w: it exited (see %s)", ErrPostgresStart, logf.Name())
		default:
		}
		if s.ping(ctx) == nil {
			return nil
		}
		time.Sleep(50 * time.Millisecond)
	}
	s.kill()
	return fmt.Errorf("%w: no connection within 30s (see %s)", ErrPostgresStart, logf.Name())
}

// url returns the URL of database db on the server.
func (s *pgServer) url(db string) string {
	return fmt.Sprintf("postgres://postgres@127.0.0.1:%d/%s?sslmode=disable", s.port, db)
}

// URL is the archive database's URL, as the consumers get it with --archive.
func (s *pgServer) URL() string { return s.url(archiveDB) }

func (s *pgServer) ping(ctx context.Context) error {
	cctx, cancel := context.WithTimeout(ctx, 500*time.Millisecond)
	defer cancel()
	conn, err := pgx.Connect(cctx, s.url("postgres"))
	if err != nil {
		return err
	}
	defer conn.Close(context.Background())
	return conn.Ping(cctx)
}

func (s *pgServer) createDB(ctx context.Context) error {
	cctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	conn, err := pgx.Connect(cctx, s.url("postgres"))
	if err != nil {
		return fmt.Errorf("chaos: postgres: %w", err)
	}
	defer conn.Close(context.Background())
	if _, err := conn.Exec(cctx, "CREATE DATABASE "+archiveDB); err != nil {
		return fmt.Errorf("chaos: create the archive database: %w", err)
	}
	return nil
}

// stop ends the server and deletes its directory. The log stays in the run's directory.
func (s *pgServer) stop() {
	s.kill()
	s.remove()
}

// kill ends the server process with a fast shutdown by SIGINT, and SIGKILL after 15 s.
func (s *pgServer) kill() {
	if s.cmd == nil {
		return
	}
	_ = s.cmd.Process.Signal(syscall.SIGINT)
	select {
	case <-s.done:
	case <-time.After(15 * time.Second):
		_ = s.cmd.Process.Kill()
		<-s.done
	}
	s.cmd = nil
}

func (s *pgServer) remove() { _ = os.RemoveAll(s.dir) }
