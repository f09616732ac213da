// Package authlimit limits failed authentications per client network, for the HTTP servers
// that take bearer tokens: the dashboard (package admin) and the HTTP gateway (package
// gateway).
//
// A client is all of loopback, an IPv4 /24 or an IPv6 /64 (Network). Each client may fail a
// budget of attempts a minute, refilled evenly; past it every attempt of that client is
// refused, a right token included, until the budget refills. At most a fixed number of
// clients is recorded: a new one evicts the client that failed least recently, never the
// whole table, so that an attacker rotating networks cannot reset the budget of a client that
// keeps guessing.
package authlimit

import (
	"container/list"
	"net"
	"net/netip"
	"sync"
	"time"

	"golang.org/x/time/rate"
)

// DefaultFailuresPerMinute is the default budget of failed attempts per client: that many
// in a burst, refilled evenly over a minute.
const DefaultFailuresPerMinute = 5

// DefaultMaxClients is the default bound of the failure records kept, one per client.
const DefaultMaxClients = 10000

// Verdict is the outcome of one attempt.
type Verdict int

const (
	// Granted: the attempt passed its check.
	Granted Verdict = iota
	// Refused: the check failed, and the failure was counted against the client.
	Refused
	// Limited: the client has spent its budget. The check did not run.
	Limited
)

// Limiter keeps one failure budget per client. It is safe for concurrent use; its zero value
// is not usable, call New.
type Limiter struct {
	limit rate.Limit
	burst int
	max   int

	// mu is held across the check of one attempt, so that parallel guesses of one client
	// queue and cannot overspend its budget.
	mu      sync.Mutex
	clients map[string]*list.Element
	// recent orders the records by their last failure or refusal, the oldest at the front.
	// Each element holds a *record.
	recent *list.List
}

// record is one client's failure budget.
type record struct {
	key string
	lim *rate.Limiter
}

// New returns a Limiter allowing perMinute failures a minute per client and recording at
// most maxClients clients. Values <= 0 take DefaultFailuresPerMinute and DefaultMaxClients.
func New(perMinute, maxClients int) *Limiter {
	if perMinute <= 0 {
		perMinute = DefaultFailuresPerMinute
	}
	if maxClients <= 0 {
		maxClients = DefaultMaxClients
	}
	return &Limiter{limit: rate.Every(time.Minute / time.Duration(perMinute)), burst: perMinute, max: maxClients,
		clients: map[string]*list.Element{}, recent: list.New()}
}

// Check runs one attempt of client at now. When the client has spent its budget it returns
// Limited and how long until one more attempt is allowed, without calling check. Otherwise
// it calls check, with the Limiter's lock held, and returns Granted when check reports true,
// else Refused after counting the failure. check must be quick, such as a constant-time
// token comparison.
func (l *Limiter) Check(client string, now time.Time, check func() bool) (Verdict, time.Duration) {
	l.mu.Lock()
	defer l.mu.Unlock()
	var lim *rate.Limiter
	if el := l.clients[client]; el != nil {
		lim = el.Value.(*record).lim
		if tokens := lim.TokensAt(now); tokens < 1 {
			// Still guessing. The record stays among the most recent, so that new clients
			// filling the table cannot evict it and reset its budget.
			l.recent.MoveToBack(el)
			return Limited, time.Duration((1 - tokens) / float64(l.limit) * float64(time.Second))
		}
	}
	if check() {
		return Granted, 0
	}
	if lim == nil {
		lim = l.newRecord(client)
	}
	l.recent.MoveToBack(l.clients[client])
	lim.AllowN(now, 1)
	return Refused, 0
}

// newRecord adds a full failure budget for client. While the table is full it drops the
// records of the clients that failed least recently, so memory stays bounded and a client
// that keeps failing is never the one dropped. Call it with l.mu held.
func (l *Limiter) newRecord(client string) *rate.Limiter {
	for l.recent.Len() >= l.max {
		oldest := l.recent.Front()
		delete(l.clients, oldest.Value.(*record).key)
		l.recent.Remove(oldest)
	}
	rec := &record{key: client, lim: rate.NewLimiter(l.limit, l.burst)}
	l.clients[client] = l.recent.PushBack(rec)
	return rec.lim
}

// Len returns the number of clients recorded.
func (l *Limiter) Len() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.clients)
}

// Has reports whether client has a record: it failed, and was not evicted since.
func (l *Limiter) Has(client string) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.clients[client] != nil
}

// Network is the client that failed attempts from remoteAddr, an http.Request's RemoteAddr,
// are counted against. All of loopback, 127.0.0.0/8 and ::1, is one client: every local
// process and any proxy on the host connect from there. An IPv4 address counts by its /24
// and an IPv6 one by its /64, networks that one host or one customer usually owns whole.
// X-Forwarded-For is not trusted, so behind a proxy every client shares the proxy's budget.
func Network(remoteAddr string) string {
	ip, host, ok := Addr(remoteAddr)
	switch {
	case !ok:
		return host
	case ip.IsLoopback():
		return "loopback"
	case ip.Is4():
		return netip.PrefixFrom(ip, 24).Masked().String()
	}
	return netip.PrefixFrom(ip, 64).Masked().String()
}

// Addr returns the IP address of remoteAddr, an http.Request's RemoteAddr, without its port
// and zone and with an IPv4-mapped IPv6 address unmapped. When remoteAddr holds no IP
// address, ok is false and host is its host part.
func Addr(remoteAddr string) (ip netip.Addr, host string, ok bool) {
	host, _, err := net.SplitHostPort(remoteAddr)
	if err != nil {
		host = remoteAddr
	}
	ip, err = netip.ParseAddr(host)
	if err != nil {
		return netip.Addr{}, host, false
	}
	return ip.Unmap().WithZone(""), host, true
}
