package redistest

import (
	"testing"
)

// TestStartRefusesAnotherServersPort: a server whose port another server holds (as when
// another test's server wins the race for a port freePort returned) fails to start, although
// PING on the port answers: its start does not take the other server for its own.
func TestStartRefusesAnotherServersPort(t *testing.T) {
	other := Start(t, nil)
	s := &Server{tb: t, dir: t.TempDir(), port: other.port}
	if err := s.start(); err == nil {
		s.kill()
		t.Fatal("start on a port another redis-server holds succeeded")
	}
}
