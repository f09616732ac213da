package admin

import (
	"container/list"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/json"
	"fmt"
	"math"
	"net"
	"net/http"
	"net/netip"
	"strconv"
	"strings"
	"sync"
	"time"

	"golang.org/x/time/rate"
)

// MinTokenLen is the shortest dashboard token accepted, in bytes. A token is a password that
// anyone who reaches the port may guess, and `openssl rand -hex 32` makes a good one.
const MinTokenLen = 16

// CheckToken returns an error when token is set but shorter than MinTokenLen bytes. The
// message never repeats the token.
func CheckToken(token string) error {
	if token != "" && len(token) < MinTokenLen {
		return fmt.Errorf("the token has %d bytes; a dashboard token needs at least %d (generate one with `openssl rand -hex 32`)",
			len(token), MinTokenLen)
	}
	return nil
}

// access is what a request may do.
type access int

const (
	accessNone access = iota
	accessRead
	accessAct
)

// DefaultFailuresPerMinute is the default limit of failed authentications per client, as
// budgetKey groups them. A client may fail that many times in a burst, refilled evenly over
// a minute, and past it gets 429 until the budget refills.
const DefaultFailuresPerMinute = 5

// maxClients bounds the failure records kept, one per client as budgetKey groups them. Past
// it the record of the client that failed least recently is dropped.
const maxClients = 10000

// authenticator checks bearer tokens and limits failed attempts per client, as budgetKey
// groups them.
type authenticator struct {
	token, readToken [sha256.Size]byte
	hasToken         bool
	hasRead          bool
	limit            rate.Limit
	burst            int
	now              func() time.Time

	mu      sync.Mutex // held across the check of one request, so parallel guesses queue
	clients map[string]*list.Element
	// recent orders the records by their last failure or refusal, the oldest at the front.
	// Each element holds a *failureRecord.
	recent *list.List
}

// failureRecord is one client's failure budget.
type failureRecord struct {
	key string
	lim *rate.Limiter
}

func newAuthenticator(token, readToken string, perMinute int) *authenticator {
	if perMinute <= 0 {
		perMinute = DefaultFailuresPerMinute
	}
	a := &authenticator{hasToken: token != "", hasRead: readToken != "", burst: perMinute,
		limit: rate.Every(time.Minute / time.Duration(perMinute)), now: time.Now,
		clients: map[string]*list.Element{}, recent: list.New()}
	a.token, a.readToken = sha256.Sum256([]byte(token)), sha256.Sum256([]byte(readToken))
	return a
}

// apiError is the JSON body of every refusal: a message for people and a code for the page.
func apiError(w http.ResponseWriter, status int, code, msg string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(struct {
		Error string `json:"error"`
		Code  string `json:"code"`
	}{msg, code})
}

// Messages of the refusals. The page shows them as they are.
const (
	msgNoToken = "the dashboard API is off on this consumer: set FLIGHTDECK_UI_READ_TOKEN (read-only) or " +
		"FLIGHTDECK_UI_TOKEN (reads and actions), or their _FILE variants, and restart it"
	msgNoActions = "actions are off on this consumer: FLIGHTDECK_UI_TOKEN is not set"
	msgNeedToken = "this API needs a token: send Authorization: Bearer <FLIGHTDECK_UI_READ_TOKEN or FLIGHTDECK_UI_TOKEN>"
	msgRefused   = "token refused"
	msgReadOnly  = "this is the read-only token (FLIGHTDECK_UI_READ_TOKEN): actions need FLIGHTDECK_UI_TOKEN"
)

// check authorises r for need and writes the refusal itself. It returns the access the
// request's token grants, or accessNone when refused.
func (a *authenticator) check(w http.ResponseWriter, r *http.Request, need access) access {
	switch {
	case !a.hasToken && !a.hasRead:
		apiError(w, http.StatusForbidden, "no_token_configured", msgNoToken)
		return accessNone
	case need == accessAct && !a.hasToken:
		apiError(w, http.StatusForbidden, "actions_disabled", msgNoActions)
		return accessNone
	}
	header := r.Header.Get("Authorization")
	if header == "" {
		// No guess was made, so it is not counted as a failure. A page without a token
		// cannot lock its operator out.
		w.Header().Set("WWW-Authenticate", `Bearer realm="flightdeck"`)
		apiError(w, http.StatusUnauthorized, "token_required", msgNeedToken)
		return accessNone
	}
	got := ""
	if scheme, rest, ok := strings.Cut(header, " "); ok && strings.EqualFold(scheme, "Bearer") {
		got = strings.TrimSpace(rest)
	}
	client := budgetKey(r.RemoteAddr)
	a.mu.Lock()
	defer a.mu.Unlock()
	now := a.now()
	var lim *rate.Limiter
	if el := a.clients[client]; el != nil {
		lim = el.Value.(*failureRecord).lim
		if tokens := lim.TokensAt(now); tokens < 1 {
			// Still guessing. The record stays among the most recent, so that new clients
			// filling the table cannot evict it and reset its budget.
			a.recent.MoveToBack(el)
			wait := time.Duration((1 - tokens) / float64(a.limit) * float64(time.Second))
			secs := int(math.Ceil(wait.Seconds()))
			w.Header().Set("Retry-After", strconv.Itoa(max(secs, 1)))
			apiError(w, http.StatusTooManyRequests, "rate_limited",
				fmt.Sprintf("too many failed token attempts from this address or its network; retry in %d s", max(secs, 1)))
			return accessNone
		}
	}
	granted := a.match(got)
	if granted == accessNone {
		if lim == nil {
			lim = a.newRecord(client)
		}
		a.recent.MoveToBack(a.clients[client])
		lim.AllowN(now, 1)
		w.Header().Set("WWW-Authenticate", `Bearer realm="flightdeck", error="invalid_token"`)
		apiError(w, http.StatusUnauthorized, "token_refused", msgRefused)
		return accessNone
	}
	if granted < need {
		apiError(w, http.StatusForbidden, "read_only", msgReadOnly)
		return accessNone
	}
	return granted
}

// match compares got with both tokens in constant time. It compares their SHA-256, so
// neither the content nor the length of a token shows in the timing.
func (a *authenticator) match(got string) access {
	if got == "" {
		return accessNone
	}
	sum := sha256.Sum256([]byte(got))
	act := subtle.ConstantTimeCompare(sum[:], a.token[:]) & boolInt(a.hasToken)
	read := subtle.ConstantTimeCompare(sum[:], a.readToken[:]) & boolInt(a.hasRead)
	switch {
	case act == 1:
		return accessAct
	case read == 1:
		return accessRead
	}
	return accessNone
}

func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
}

// newRecord adds a full failure budget for client. While the table holds maxClients it drops
// the records of the clients that failed least recently, so memory stays bounded and a
// client that keeps failing is never the one dropped. Call it with a.mu held.
func (a *authenticator) newRecord(client string) *rate.Limiter {
	for a.recent.Len() >= maxClients {
		oldest := a.recent.Front()
		delete(a.clients, oldest.Value.(*failureRecord).key)
		a.recent.Remove(oldest)
	}
	rec := &failureRecord{key: client, lim: rate.NewLimiter(a.limit, a.burst)}
	a.clients[client] = a.recent.PushBack(rec)
	return rec.lim
}

// budgetKey is the client failed tokens are counted against. All of loopback, 127.0.0.0/8
// and ::1, is one client: every local process and any proxy on the host connect from there.
// An IPv4 address counts by its /24 and an IPv6 one by its /64, networks that one host or one
// customer usually owns whole. X-Forwarded-For is not trusted, so behind a proxy every client
// shares the proxy's budget.
func budgetKey(remoteAddr string) string {
	host, _, err := net.SplitHostPort(remoteAddr)
	if err != nil {
		host = remoteAddr
	}
	ip, err := netip.ParseAddr(host)
	if err != nil {
		return host
	}
	ip = ip.Unmap().WithZone("")
	switch {
	case ip.IsLoopback():
		return "loopback"
	case ip.Is4():
		return netip.PrefixFrom(ip, 24).Masked().String()
	}
	return netip.PrefixFrom(ip, 64).Masked().String()
}

// clientKey names the peer in what the dashboard records, such as who paused a stage. It is
// the IP address, or for IPv6 the /64 network. X-Forwarded-For is not trusted.
func clientKey(remoteAddr string) string {
	host, _, err := net.SplitHostPort(remoteAddr)
	if err != nil {
		host = remoteAddr
	}
	ip, err := netip.ParseAddr(host)
	if err != nil {
		return host
	}
	ip = ip.Unmap().WithZone("")
	if ip.Is6() {
		return netip.PrefixFrom(ip, 64).Masked().String()
	}
	return ip.String()
}
