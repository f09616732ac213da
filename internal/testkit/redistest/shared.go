package redistest

import (
	"context"
	"fmt"
	"os"
	"sync"
	"testing"
)

// Shared is a private redis-server that lives as long as the test binary, for Example
// functions, which have no *testing.T. Its zero value is ready, and TestMain calls Stop.
type Shared struct {
	once sync.Once
	tb   processTB
	srv  *Server
}

// URL starts the server on first use and empties it with FLUSHALL on every call, so that
// each example starts from nothing. It panics when the server cannot start.
func (s *Shared) URL() string {
	s.once.Do(func() { s.srv = Start(&s.tb, nil) })
	if err := s.srv.Client().FlushAll(context.Background()).Err(); err != nil {
		panic(fmt.Sprintf("redistest: FLUSHALL: %v", err))
	}
	return s.srv.URL()
}

// Stop stops the server, if it started, and removes its files.
func (s *Shared) Stop() { s.tb.cleanup() }

// RunMain is a TestMain body for a package whose examples use s. It runs m with
// FLIGHTDECK_SPOOL_DIR, the spool directory a consumer configured without SpoolDir reads, set
// to a private temporary directory rather than the user's home, then stops s and returns m's
// exit code.
func (s *Shared) RunMain(m *testing.M) int {
	spool, err := os.MkdirTemp("", "flightdeck-test-spool")
	if err != nil {
		fmt.Fprintln(os.Stderr, "spool directory:", err)
		return 1
	}
	defer os.RemoveAll(spool)
	if err := os.Setenv("FLIGHTDECK_SPOOL_DIR", spool); err != nil {
		fmt.Fprintln(os.Stderr, "FLIGHTDECK_SPOOL_DIR:", err)
		return 1
	}
	defer s.Stop()
	return m.Run()
}

// processTB is the testing.TB of a Shared server. It implements what Start and Server use:
// Helper, Fatalf, TempDir and Cleanup. Any other method panics on the embedded nil TB.
type processTB struct {
	testing.TB

	mu       sync.Mutex
	cleanups []func()
}

func (*processTB) Helper() {}

func (*processTB) Fatalf(format string, args ...any) { panic(fmt.Sprintf(format, args...)) }

func (tb *processTB) TempDir() string {
	dir, err := os.MkdirTemp("", "redistest-shared")
	if err != nil {
		tb.Fatalf("redistest: temporary directory: %v", err)
	}
	tb.Cleanup(func() { _ = os.RemoveAll(dir) })
	return dir
}

func (tb *processTB) Cleanup(f func()) {
	tb.mu.Lock()
	defer tb.mu.Unlock()
	tb.cleanups = append(tb.cleanups, f)
}

// cleanup runs the registered functions, last registered first.
func (tb *processTB) cleanup() {
	tb.mu.Lock()
	fs := tb.cleanups
	tb.cleanups = nil
	tb.mu.Unlock()
	for i := len(fs) - 1; i >= 0; i-- {
		fs[i]()
	}
}
