package admin

import (
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"slices"
	"strconv"
	"strings"

	"github.com/flightdeck-ai/flightdeck/internal/cli"
)

// ErrBadListenAddr is returned for a listen address given to --http or --health that is
// malformed or ambiguous.
var ErrBadListenAddr = errors.New("bad listen address")

// ListenAddr checks a listen address given to a flag and returns the address to listen on:
//
//   - ":9090", with no host, binds loopback only: 127.0.0.1:9090.
//   - "0.0.0.0:9090" and "[::]:9090" bind every interface, and only these spellings do.
//   - "[]:9090" with empty brackets, "0:9090" and other short numeric forms that a resolver
//     may read as "every interface" are refused.
//   - Any other IP address or host name binds that address.
//
// The port must be a number from 0 to 65535. Errors wrap ErrBadListenAddr.
func ListenAddr(addr string) (string, error) {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return "", fmt.Errorf("%w %q: %w (want host:port, :port for loopback, 0.0.0.0:port or [::]:port for every interface)",
			ErrBadListenAddr, addr, err)
	}
	if n, err := strconv.ParseUint(port, 10, 16); err != nil || n > 65535 {
		return "", fmt.Errorf("%w %q: port %q is not a number from 0 to 65535", ErrBadListenAddr, addr, port)
	}
	switch {
	case host == "" && strings.HasPrefix(addr, "["):
		return "", fmt.Errorf("%w %q: empty brackets; write :%s for loopback or [::]:%s for every interface",
			ErrBadListenAddr, addr, port, port)
	case host == "":
		return net.JoinHostPort("127.0.0.1", port), nil
	}
	if ip, err := netip.ParseAddr(host); err == nil {
		if ip.Unmap().IsUnspecified() && host != "0.0.0.0" && host != "::" {
			return "", fmt.Errorf("%w %q: write 0.0.0.0:%s or [::]:%s to bind every interface", ErrBadListenAddr, addr, port, port)
		}
		return net.JoinHostPort(host, port), nil
	}
	if strings.Trim(host, "0123456789.") == "" || strings.HasPrefix(strings.ToLower(host), "0x") {
		// "0", "127.1" and "0x7f.1" are inet_aton shorthands that a resolver may turn into
		// any address, the unspecified one included.
		return "", fmt.Errorf("%w %q: %q is not a full IP address", ErrBadListenAddr, addr, host)
	}
	if strings.ContainsAny(host, "/@ \t%") {
		return "", fmt.Errorf("%w %q: %q is not a host name", ErrBadListenAddr, addr, host)
	}
	return net.JoinHostPort(host, port), nil
}

// HostPolicy is the set of Host header values a listener answers, which guards against DNS
// rebinding: a browser on the same machine can be made to send a request to a loopback port
// under a foreign name, and that request carries the foreign name in Host. It is safe for
// concurrent use.
type HostPolicy struct {
	exact   map[string]bool // "host:port"
	anyPort map[string]bool // "host"
	list    []string
}

// loopbackNames are the names of the loopback interface a browser sends in Host.
var loopbackNames = []string{"localhost", "127.0.0.1", "::1"}

// NewHostPolicy returns the policy of a listener bound to bound and configured as
// configured, an address returned by ListenAddr. It allows configured's host on the bound
// port, the loopback names localhost, 127.0.0.1 and [::1] on that port when the listener is
// on loopback or on every interface, and the extra entries given to --http-allowed-hosts:
// "host" for any port or "host:port", with IPv6 in brackets.
func NewHostPolicy(configured string, bound net.Addr, extra []string) (*HostPolicy, error) {
	p := &HostPolicy{exact: map[string]bool{}, anyPort: map[string]bool{}}
	host, port, err := net.SplitHostPort(configured)
	if err != nil {
		return nil, fmt.Errorf("admin: host policy: %w", err)
	}
	var boundIP netip.Addr
	if ta, ok := bound.(*net.TCPAddr); ok {
		port = strconv.Itoa(ta.Port)
		boundIP, _ = netip.AddrFromSlice(ta.IP)
		boundIP = boundIP.Unmap()
	}
	if ip, err := netip.ParseAddr(host); err != nil || !ip.IsUnspecified() {
		p.add(host, port)
	}
	if boundIP.IsLoopback() || boundIP.IsUnspecified() {
		for _, n := range loopbackNames {
			p.add(n, port)
		}
	}
	for _, e := range extra {
		e = strings.TrimSpace(e)
		if e == "" {
			continue
		}
		h, pt, err := splitHostEntry(e)
		if err != nil {
			return nil, fmt.Errorf("admin: allowed host %q: %w", e, err)
		}
		p.add(h, pt)
	}
	return p, nil
}

// ParseHostList splits a comma-separated list of hosts, the value of --http-allowed-hosts,
// dropping empty entries.
func ParseHostList(s string) []string { return cli.SplitList(s) }

// splitHostEntry parses an allow-list entry: "name", "name:port", "1.2.3.4", "[::1]",
// "[::1]:9090" or a bare IPv6 address. An empty port means any port.
func splitHostEntry(e string) (host, port string, err error) {
	switch {
	case strings.HasPrefix(e, "[") && strings.HasSuffix(e, "]"):
		host = e[1 : len(e)-1]
	case strings.HasPrefix(e, "[") || strings.Count(e, ":") == 1:
		if host, port, err = net.SplitHostPort(e); err != nil {
			return "", "", err
		}
		if n, err := strconv.ParseUint(port, 10, 16); err != nil || n == 0 {
			return "", "", fmt.Errorf("port %q is not a number from 1 to 65535", port)
		}
	default:
		host = e
	}
	if host == "" || strings.ContainsAny(host, "/@*?# \t") || strings.Contains(e, "://") {
		return "", "", errors.New("want a host name or address, optionally with :port (no scheme, path or wildcard)")
	}
	return host, port, nil
}

func normHost(h string) string { return strings.TrimSuffix(strings.ToLower(h), ".") }

func (p *HostPolicy) add(host, port string) {
	host = normHost(host)
	if port == "" {
		if !p.anyPort[host] {
			p.anyPort[host] = true
			p.list = append(p.list, host)
		}
		return
	}
	k := net.JoinHostPort(host, port)
	if !p.exact[k] {
		p.exact[k] = true
		p.list = append(p.list, k)
	}
}

// Hosts lists the allowed entries for logs: "host:port", or "host" for any port.
func (p *HostPolicy) Hosts() []string { return slices.Clone(p.list) }

// Allows reports whether a request's Host header value is allowed. A Host without a port
// means port 80.
func (p *HostPolicy) Allows(hostHeader string) bool {
	host, port, err := net.SplitHostPort(hostHeader)
	if err != nil {
		host, port = strings.TrimSuffix(strings.TrimPrefix(hostHeader, "["), "]"), "80"
	}
	host = normHost(host)
	if host == "" {
		return false
	}
	return p.anyPort[host] || p.exact[net.JoinHostPort(host, port)]
}

// Wrap returns a handler that serves next only for requests whose Host is allowed, and
// answers every other request 421 Misdirected Request, whatever its path.
func (p *HostPolicy) Wrap(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !p.Allows(r.Host) {
			h := r.Host
			if len(h) > 200 {
				h = h[:200] + "…"
			}
			w.Header().Set("X-Content-Type-Options", "nosniff")
			w.Header().Set("Cache-Control", "no-store")
			http.Error(w, fmt.Sprintf("flightdeck: Host %q is not served on this address; if that name is yours, "+
				"add it to --http-allowed-hosts (FLIGHTDECK_HTTP_ALLOWED_HOSTS)", h), http.StatusMisdirectedRequest)
			return
		}
		next.ServeHTTP(w, r)
	})
}
