package admin

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"
)

// guess sends one request with a wrong token from remoteAddr and returns the status code.
func guess(a *authenticator, remoteAddr string) int {
	req := httptest.NewRequest(http.MethodGet, "/ui/api/overview", nil)
	req.RemoteAddr = remoteAddr
	req.Header.Set("Authorization", "Bearer wrong-token-0123456789")
	rec := httptest.NewRecorder()
	a.check(rec, req, accessRead)
	return rec.Code
}

// frozenAuthenticator is an authenticator whose clock stands still, so that no budget
// refills during a test however slow the machine.
func frozenAuthenticator() *authenticator {
	a := newAuthenticator("test-action-token-0123456789", "test-read-token-0123456789", DefaultFailuresPerMinute)
	at := time.Unix(1_700_000_000, 0)
	a.now = func() time.Time { return at }
	return a
}

// TestSecurityFailureBudgetPerNetwork: the loopback addresses share one budget (a local
// attacker cannot rotate 127.0.0.x for fresh ones), so do the addresses of one IPv4 /24;
// another /24 has its own.
func TestSecurityFailureBudgetPerNetwork(t *testing.T) {
	a := frozenAuthenticator()
	loop := []string{"127.0.0.9:1000", "127.0.0.10:1000", "127.0.0.11:1000", "127.0.0.12:1000"}
	for i := range DefaultFailuresPerMinute {
		if code := guess(a, loop[i%len(loop)]); code != http.StatusUnauthorized {
			t.Fatalf("loopback guess %d: %d, want 401", i+1, code)
		}
	}
	for _, addr := range append(loop, "[::1]:1000") {
		if code := guess(a, addr); code != http.StatusTooManyRequests {
			t.Errorf("%s after %d loopback failures: %d, want 429", addr, DefaultFailuresPerMinute, code)
		}
	}

	for i := range DefaultFailuresPerMinute {
		if code := guess(a, fmt.Sprintf("198.51.100.%d:1000", 10+i)); code != http.StatusUnauthorized {
			t.Fatalf("guess %d from 198.51.100.0/24: %d, want 401", i+1, code)
		}
	}
	if code := guess(a, "198.51.100.250:1000"); code != http.StatusTooManyRequests {
		t.Errorf("another address of the same /24: %d, want 429", code)
	}
	if code := guess(a, "198.51.101.10:1000"); code != http.StatusUnauthorized {
		t.Errorf("an address of the next /24: %d, want 401 (its own budget)", code)
	}
}

// TestSecurityFailureTableEvictsOldest: filling the table with new clients drops the records
// of the clients that failed least recently, one by one, never the whole table: a client that
// keeps guessing (refused with 429) while an attacker rotates through maxClients networks
// stays limited, and the table never grows past maxClients.
func TestSecurityFailureTableEvictsOldest(t *testing.T) {
	a := frozenAuthenticator()
	limit := func(addr string) {
		t.Helper()
		for range DefaultFailuresPerMinute {
			guess(a, addr)
		}
		if code := guess(a, addr); code != http.StatusTooManyRequests {
			t.Fatalf("%s after %d failures: %d, want 429", addr, DefaultFailuresPerMinute, code)
		}
	}
	const (
		idle     = "203.0.113.5:1000"      // limited, then silent: the oldest record
		guessing = "[2001:db8:aa::1]:1000" // limited, and still guessing while the table fills
	)
	limit(idle)
	limit(guessing)
	// The attacker: a new IPv4 /24 per failure, 10.x.y.0/24, enough to fill the table twice.
	for i := range 2 * maxClients {
		addr := fmt.Sprintf("10.%d.%d.1:1000", i/256, i%256)
		if code := guess(a, addr); code != http.StatusUnauthorized {
			t.Fatalf("attacker network %d: %d, want 401", i, code)
		}
		if i%1000 == 0 {
			if code := guess(a, guessing); code != http.StatusTooManyRequests {
				t.Fatalf("the guessing client after %d new networks: %d, want 429", i, code)
			}
		}
		if n := a.fails.Len(); n > maxClients {
			t.Fatalf("%d records, want at most %d", n, maxClients)
		}
	}
	if code := guess(a, guessing); code != http.StatusTooManyRequests {
		t.Errorf("the guessing client after the table filled twice: %d, want 429 (still limited)", code)
	}
	// The idle client's record was the oldest: it was dropped, and it starts over.
	if code := guess(a, idle); code != http.StatusUnauthorized {
		t.Errorf("the idle client after the table filled: %d, want 401 (its record was evicted)", code)
	}
	// The attacker's newest networks are still limited by their records; the first ones were
	// evicted in their turn.
	last := 2*maxClients - 1
	if !a.fails.Has(fmt.Sprintf("10.%d.%d.0/24", last/256, last%256)) {
		t.Errorf("the newest attacker network has no record")
	}
	if a.fails.Has("10.0.1.0/24") {
		t.Errorf("an old attacker network is still recorded")
	}
}
