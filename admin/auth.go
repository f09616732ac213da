package admin

import (
	"crypto/sha256"
	"crypto/subtle"
	"encoding/json"
	"fmt"
	"math"
	"net/http"
	"net/netip"
	"strconv"
	"strings"
	"time"

	"github.com/flightdeck-ai/flightdeck/internal/authlimit"
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
// authlimit.Network groups them. A client may fail that many times in a burst, refilled
// evenly over a minute, and past it gets 429 until the budget refills.
const DefaultFailuresPerMinute = authlimit.DefaultFailuresPerMinute

// maxClients bounds the failure records kept, one per client as authlimit.Network groups
// them. Past it the record of the client that failed least recently is dropped.
const maxClients = authlimit.DefaultMaxClients

// authenticator checks bearer tokens and limits failed attempts per client, as
// authlimit.Network groups them.
type authenticator struct {
	token, readToken [sha256.Size]byte
	hasToken         bool
	hasRead          bool
	fails            *authlimit.Limiter
	now              func() time.Time
}

func newAuthenticator(token, readToken string, perMinute int) *authenticator {
	a := &authenticator{hasToken: token != "", hasRead: readToken != "", now: time.Now,
		fails: authlimit.New(perMinute, maxClients)}
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
	granted := accessNone
	verdict, wait := a.fails.Check(authlimit.Network(r.RemoteAddr), a.now(), func() bool {
		granted = a.match(got)
		return granted != accessNone
	})
	switch verdict {
	case authlimit.Limited:
		secs := max(int(math.Ceil(wait.Seconds())), 1)
		w.Header().Set("Retry-After", strconv.Itoa(secs))
		apiError(w, http.StatusTooManyRequests, "rate_limited",
			fmt.Sprintf("too many failed token attempts from this address or its network; retry in %d s", secs))
		return accessNone
	case authlimit.Refused:
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

// clientKey names the peer in what the dashboard records, such as who paused a stage. It is
// the IP address, or for IPv6 the /64 network. X-Forwarded-For is not trusted.
func clientKey(remoteAddr string) string {
	ip, host, ok := authlimit.Addr(remoteAddr)
	switch {
	case !ok:
		return host
	case ip.Is6():
		return netip.PrefixFrom(ip, 64).Masked().String()
	}
	return ip.String()
}
