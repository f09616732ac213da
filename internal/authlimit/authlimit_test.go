package authlimit

import (
	"fmt"
	"testing"
	"time"
)

// at is the frozen clock of the tests: no budget refills during a test however slow the
// machine.
var at = time.Unix(1_700_000_000, 0)

// fail makes one failed attempt from remoteAddr and returns its verdict.
func fail(l *Limiter, remoteAddr string) Verdict {
	v, _ := l.Check(Network(remoteAddr), at, func() bool { return false })
	return v
}

func TestNetwork(t *testing.T) {
	for _, tc := range []struct{ addr, want string }{
		{"127.0.0.1:5000", "loopback"},
		{"127.9.8.7:5000", "loopback"},
		{"[::1]:5000", "loopback"},
		{"[::ffff:127.0.0.12]:5000", "loopback"},
		{"192.0.2.7:5000", "192.0.2.0/24"},
		{"[::ffff:192.0.2.200]:5000", "192.0.2.0/24"},
		{"[2001:db8:1:2:3:4:5:6]:5000", "2001:db8:1:2::/64"},
		{"[fe80::1%eth0]:5000", "fe80::/64"},
		{"192.0.2.9", "192.0.2.0/24"}, // no port
		{"not-an-address", "not-an-address"},
	} {
		if got := Network(tc.addr); got != tc.want {
			t.Errorf("Network(%q) = %q, want %q", tc.addr, got, tc.want)
		}
	}
}

// TestAddr: the address of a RemoteAddr comes without port and zone, an IPv4-mapped one
// unmapped; a host that is no address is returned as it is, with ok false.
func TestAddr(t *testing.T) {
	for _, tc := range []struct {
		addr, want string
		ok         bool
	}{
		{"192.0.2.7:5000", "192.0.2.7", true},
		{"[::ffff:192.0.2.200]:5000", "192.0.2.200", true},
		{"[fe80::1%eth0]:5000", "fe80::1", true},
		{"2001:db8::1", "2001:db8::1", true},
		{"host.example:80", "host.example", false},
	} {
		ip, host, ok := Addr(tc.addr)
		got := host
		if ok {
			got = ip.String()
		}
		if got != tc.want || ok != tc.ok {
			t.Errorf("Addr(%q) = %q %v, want %q %v", tc.addr, got, ok, tc.want, tc.ok)
		}
	}
}

// TestBudgetPerNetwork: the loopback addresses share one budget, so do the addresses of one
// IPv4 /24; another /24 has its own. A spent budget refuses a right token too, says when to
// retry, and refills with time.
func TestBudgetPerNetwork(t *testing.T) {
	l := New(0, 0)
	loop := []string{"127.0.0.9:1000", "127.0.0.10:1000", "[::1]:1000"}
	for i := range DefaultFailuresPerMinute {
		if v := fail(l, loop[i%len(loop)]); v != Refused {
			t.Fatalf("loopback failure %d: %v, want Refused", i+1, v)
		}
	}
	called := false
	v, wait := l.Check("loopback", at, func() bool { called = true; return true })
	if v != Limited || called || wait <= 0 || wait > time.Minute/DefaultFailuresPerMinute {
		t.Errorf("a right token after the budget: %v (check called %v), retry in %v; want Limited, no check, within 12s", v, called, wait)
	}
	if v, _ := l.Check("loopback", at.Add(time.Minute), func() bool { return true }); v != Granted {
		t.Errorf("a minute later: %v, want Granted", v)
	}
	for i := range DefaultFailuresPerMinute {
		if v := fail(l, fmt.Sprintf("198.51.100.%d:1000", 10+i)); v != Refused {
			t.Fatalf("failure %d from 198.51.100.0/24: %v, want Refused", i+1, v)
		}
	}
	if v := fail(l, "198.51.100.250:1000"); v != Limited {
		t.Errorf("another address of the same /24: %v, want Limited", v)
	}
	if v := fail(l, "198.51.101.10:1000"); v != Refused {
		t.Errorf("an address of the next /24: %v, want Refused (its own budget)", v)
	}
	if v, _ := l.Check(Network("198.51.102.1:1"), at, func() bool { return true }); v != Granted || l.Has("198.51.102.0/24") {
		t.Errorf("a right token from a new network: %v, recorded %v; want Granted and no record", v, l.Has("198.51.102.0/24"))
	}
}

// TestTableEvictsOldest: filling the table with new clients drops the records of the clients
// that failed least recently, one by one, never the whole table: a client that keeps guessing
// while an attacker rotates through the table's size in networks stays limited, and the table
// never grows past its bound.
func TestTableEvictsOldest(t *testing.T) {
	const size = 500
	l := New(0, size)
	limit := func(addr string) {
		t.Helper()
		for range DefaultFailuresPerMinute {
			fail(l, addr)
		}
		if v := fail(l, addr); v != Limited {
			t.Fatalf("%s after %d failures: %v, want Limited", addr, DefaultFailuresPerMinute, v)
		}
	}
	const (
		idle     = "203.0.113.5:1000"      // limited, then silent: the oldest record
		guessing = "[2001:db8:aa::1]:1000" // limited, and still guessing while the table fills
	)
	limit(idle)
	limit(guessing)
	for i := range 2 * size {
		if v := fail(l, fmt.Sprintf("10.%d.%d.1:1000", i/256, i%256)); v != Refused {
			t.Fatalf("attacker network %d: %v, want Refused", i, v)
		}
		if i%50 == 0 {
			if v := fail(l, guessing); v != Limited {
				t.Fatalf("the guessing client after %d new networks: %v, want Limited", i, v)
			}
		}
		if n := l.Len(); n > size || l.recent.Len() != n {
			t.Fatalf("%d records (%d in the recency list), want at most %d", n, l.recent.Len(), size)
		}
	}
	if v := fail(l, guessing); v != Limited {
		t.Errorf("the guessing client after the table filled twice: %v, want Limited", v)
	}
	if v := fail(l, idle); v != Refused {
		t.Errorf("the idle client after the table filled: %v, want Refused (its record was evicted)", v)
	}
	last := 2*size - 1
	if !l.Has(fmt.Sprintf("10.%d.%d.0/24", last/256, last%256)) {
		t.Errorf("the newest attacker network has no record")
	}
	if l.Has("10.0.1.0/24") {
		t.Errorf("an old attacker network is still recorded")
	}
}
