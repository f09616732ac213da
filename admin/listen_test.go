package admin_test

import (
	"errors"
	"net"
	"testing"

	"github.com/flightdeck-ai/flightdeck/admin"
)

// TestSecurityListenAddr: only an empty host maps to loopback; every interface only when
// written 0.0.0.0 or [::]; empty brackets and resolver shorthands are refused.
func TestSecurityListenAddr(t *testing.T) {
	for in, want := range map[string]string{
		":9090":          "127.0.0.1:9090",
		":0":             "127.0.0.1:0",
		"0.0.0.0:9090":   "0.0.0.0:9090",
		"[::]:9090":      "[::]:9090",
		"127.0.0.1:9090": "127.0.0.1:9090",
		"[::1]:9090":     "[::1]:9090",
		"10.0.0.5:80":    "10.0.0.5:80",
		"localhost:9090": "localhost:9090",
		"pod-1.svc:8081": "pod-1.svc:8081",
	} {
		if got, err := admin.ListenAddr(in); err != nil || got != want {
			t.Errorf("ListenAddr(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
	for _, in := range []string{"[]:9090", "[]:0", "[0::0]:9090", "[::ffff:0.0.0.0]:9090", "0:9090", "127.1:9090",
		"0x7f.1:9090", ":::9090", "9090", "", "host", ":99999", ":http", ":-1", "a b:9090", "[::1]"} {
		got, err := admin.ListenAddr(in)
		if err == nil || !errors.Is(err, admin.ErrBadListenAddr) {
			t.Errorf("ListenAddr(%q) = %q, %v; want an ErrBadListenAddr", in, got, err)
			continue
		}
		t.Logf("%q: %v", in, err)
	}
}

// TestSecurityHostPolicy: the listener's own address, the loopback names on its port when it
// is on loopback or every interface, and the allow-list; nothing else.
func TestSecurityHostPolicy(t *testing.T) {
	loop := &net.TCPAddr{IP: net.ParseIP("127.0.0.1"), Port: 9090}
	p, err := admin.NewHostPolicy("127.0.0.1:9090", loop, []string{"dash.example.com", "[fd00::1]", "ops.example.com:8443"})
	if err != nil {
		t.Fatal(err)
	}
	for host, want := range map[string]bool{
		"127.0.0.1:9090": true, "localhost:9090": true, "LocalHost:9090": true, "localhost.:9090": true, "[::1]:9090": true,
		"dash.example.com:9090": true, "dash.example.com": true, "[fd00::1]:1": true, "ops.example.com:8443": true,
		"localhost:9091": false, "localhost": false, "127.0.0.1": false, "rebind.attacker.example:9090": false,
		"ops.example.com:9090": false, "ops.example.com": false, "": false, ":9090": false, "[]:9090": false,
		"127.0.0.1.attacker.example:9090": false, "0.0.0.0:9090": false,
	} {
		if got := p.Allows(host); got != want {
			t.Errorf("Allows(%q) = %v, want %v", host, got, want)
		}
	}

	// A pod address: only itself (and the allow-list).
	pod := &net.TCPAddr{IP: net.ParseIP("10.1.2.3"), Port: 8080}
	p, err = admin.NewHostPolicy("10.1.2.3:8080", pod, nil)
	if err != nil {
		t.Fatal(err)
	}
	if !p.Allows("10.1.2.3:8080") || p.Allows("localhost:8080") || p.Allows("attacker.example:8080") {
		t.Errorf("pod policy %v", p.Hosts())
	}
	// Every interface: the loopback names, plus what the allow-list names.
	all := &net.TCPAddr{IP: net.IPv4zero, Port: 9090}
	p, err = admin.NewHostPolicy("0.0.0.0:9090", all, []string{"dash.internal:9090"})
	if err != nil {
		t.Fatal(err)
	}
	if !p.Allows("localhost:9090") || !p.Allows("dash.internal:9090") || p.Allows("0.0.0.0:9090") || p.Allows("10.0.0.9:9090") {
		t.Errorf("all-interfaces policy %v", p.Hosts())
	}
	// Port 80 is what a Host without a port means.
	p, err = admin.NewHostPolicy("127.0.0.1:80", &net.TCPAddr{IP: net.ParseIP("127.0.0.1"), Port: 80}, nil)
	if err != nil || !p.Allows("localhost") || !p.Allows("localhost:80") {
		t.Errorf("port 80 policy %v %v", p.Hosts(), err)
	}
	for _, bad := range []string{"http://dash.example.com", "*.example.com", "dash.example.com/ui", "user@dash", "dash:0", "dash:http"} {
		if _, err := admin.NewHostPolicy("127.0.0.1:9090", loop, []string{bad}); err == nil {
			t.Errorf("allowed host %q accepted", bad)
		}
	}
	if got := admin.ParseHostList(" a.example , ,b.example:1 "); len(got) != 2 || got[0] != "a.example" || got[1] != "b.example:1" {
		t.Errorf("ParseHostList = %q", got)
	}
}
