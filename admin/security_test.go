package admin_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strconv"
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/flightdeck-ai/flightdeck/admin"
	"github.com/flightdeck-ai/flightdeck/flight"
	"github.com/flightdeck-ai/flightdeck/internal/testkit/flighttest"
	"github.com/flightdeck-ai/flightdeck/internal/testkit/redistest"
	"github.com/flightdeck-ai/flightdeck/topics"
)

// secureServer is the dashboard handler over a private Redis with no consumer, served as
// cmd/consumer serves it: behind the Host check of its loopback listener, beside a /metrics.
type secureServer struct {
	t   *testing.T
	r   *redistest.Target
	ks  topics.Keyspace
	srv *httptest.Server
}

func newSecureServer(t *testing.T, cfg admin.HandlerConfig, extraHosts ...string) *secureServer {
	t.Helper()
	r := redistest.New(t)
	s := &secureServer{t: t, r: r, ks: topics.Keyspace{Prefix: r.Prefix}}
	insp, err := admin.New(admin.Config{Client: r.Client, Keyspace: s.ks, Stages: []string{"interview-evaluation"}})
	if err != nil {
		t.Fatal(err)
	}
	cfg.Inspector = insp
	ui, err := admin.Handler(cfg)
	if err != nil {
		t.Fatal(err)
	}
	mux := http.NewServeMux()
	mux.Handle("/ui/", ui)
	mux.HandleFunc("/metrics", func(w http.ResponseWriter, r *http.Request) { fmt.Fprintln(w, "flightdeck_up 1") })
	s.srv = hostGuarded(t, mux, extraHosts)
	return s
}

// hostGuarded serves h as cmd/consumer serves the dashboard: on a loopback listener, behind
// the listener's Host check (allowing extraHosts too). The server closes with the test.
func hostGuarded(t testing.TB, h http.Handler, extraHosts []string) *httptest.Server {
	t.Helper()
	srv := httptest.NewUnstartedServer(nil)
	policy, err := admin.NewHostPolicy(srv.Listener.Addr().String(), srv.Listener.Addr(), extraHosts)
	if err != nil {
		t.Fatal(err)
	}
	srv.Config.Handler = policy.Wrap(h)
	srv.Start()
	t.Cleanup(srv.Close)
	return srv
}

// response is what a request got.
type response struct {
	code   int
	header http.Header
	body   string
}

// do sends a request with the given Host ("" = the server's address) and bearer token
// ("" = no Authorization header).
func (s *secureServer) do(method, path, host, token, body string) response {
	s.t.Helper()
	req, err := http.NewRequest(method, s.srv.URL+path, strings.NewReader(body))
	if err != nil {
		s.t.Fatal(err)
	}
	if host != "" {
		req.Host = host
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		s.t.Fatal(err)
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	return response{res.StatusCode, res.Header, string(b)}
}

func (s *secureServer) port() string { return s.srv.URL[strings.LastIndexByte(s.srv.URL, ':')+1:] }

var readPaths = []string{"/ui/api/overview", "/ui/api/node", "/ui/api/flights", "/ui/api/events", "/ui/api/dlq",
	"/ui/api/flight?key=" + url.QueryEscape("ai:interview-evaluation:v1:acme:"+strings.Repeat("0", 64))}

// TestSecurityForeignHostRefused: a request naming another host (a browser page of
// rebind.attacker.example whose name now resolves to 127.0.0.1) gets 421 on every path, the
// page, the API with a valid token and /metrics included; the loopback names, the listener's
// own address and the allow-list are served.
func TestSecurityForeignHostRefused(t *testing.T) {
	s := newSecureServer(t, admin.HandlerConfig{Token: testToken}, "dash.example.com", "ops.example.com:8443")
	port := s.port()
	for _, host := range []string{"rebind.attacker.example:" + port, "rebind.attacker.example", "localhost.attacker.example:" + port,
		"127.0.0.2:" + port, "dash.example.com.attacker.example:" + port, "ops.example.com:" + port} {
		for _, path := range append([]string{"/ui/", "/ui/app.js", "/metrics"}, readPaths...) {
			if r := s.do(http.MethodGet, path, host, testToken, ""); r.code != http.StatusMisdirectedRequest {
				t.Errorf("GET %s with Host %q: %d, want 421", path, host, r.code)
			}
		}
		if r := s.do(http.MethodPost, "/ui/api/cancel", host, testToken, `{"key":"x"}`); r.code != http.StatusMisdirectedRequest {
			t.Errorf("POST cancel with Host %q: %d, want 421", host, r.code)
		}
	}
	for _, host := range []string{"127.0.0.1:" + port, "localhost:" + port, "LOCALHOST.:" + port, "[::1]:" + port,
		"dash.example.com:" + port, "dash.example.com:1234", "ops.example.com:8443"} {
		for _, path := range []string{"/ui/", "/metrics", "/ui/api/overview"} {
			if r := s.do(http.MethodGet, path, host, testToken, ""); r.code != http.StatusOK {
				t.Errorf("GET %s with Host %q: %d %.200s, want 200", path, host, r.code, r.body)
			}
		}
	}
}

// TestSecurityTokenlessReadRefused: every API read needs a token (401 without one, 401 with
// a wrong one); with no token configured the API answers 403 naming the variables to set,
// and the page itself still loads.
func TestSecurityTokenlessReadRefused(t *testing.T) {
	// (A high failure limit: this test sends many wrong tokens from one address.)
	s := newSecureServer(t, admin.HandlerConfig{Token: testToken, ReadToken: testReadToken, FailuresPerMinute: 1000})
	for _, path := range append(readPaths, "/ui/api/nosuch") {
		r := s.do(http.MethodGet, path, "", "", "")
		if r.code != http.StatusUnauthorized || !strings.Contains(r.body, "token_required") ||
			!strings.HasPrefix(r.header.Get("WWW-Authenticate"), "Bearer") {
			t.Errorf("GET %s without a token: %d %s %q, want 401 token_required", path, r.code, r.body, r.header.Get("WWW-Authenticate"))
		}
		if r := s.do(http.MethodGet, path, "", "wrong-token-0123456789", ""); r.code != http.StatusUnauthorized {
			t.Errorf("GET %s with a wrong token: %d, want 401", path, r.code)
		}
	}
	for _, tok := range []string{testReadToken, testToken} {
		for _, path := range readPaths[:5] {
			if r := s.do(http.MethodGet, path, "", tok, ""); r.code != http.StatusOK {
				t.Errorf("GET %s with a valid token: %d %.200s", path, r.code, r.body)
			}
		}
	}

	none := newSecureServer(t, admin.HandlerConfig{})
	for _, path := range readPaths {
		for _, tok := range []string{"", testToken} {
			r := none.do(http.MethodGet, path, "", tok, "")
			if r.code != http.StatusForbidden || !strings.Contains(r.body, "FLIGHTDECK_UI_READ_TOKEN") ||
				!strings.Contains(r.body, "FLIGHTDECK_UI_TOKEN") || !strings.Contains(r.body, "no_token_configured") {
				t.Errorf("GET %s with no token configured: %d %s, want 403 naming the variables", path, r.code, r.body)
			}
		}
	}
	if r := none.do(http.MethodGet, "/ui/", "", "", ""); r.code != http.StatusOK || !strings.Contains(r.body, "auth-form") {
		t.Errorf("the page with no token configured: %d, want 200 with the token form", r.code)
	}
}

// TestSecurityReadTokenCannotAct: the read-only token reads but cannot cancel or requeue
// (403), the node read tells the page so, and a node with only a read token has no actions.
func TestSecurityReadTokenCannotAct(t *testing.T) {
	s := newSecureServer(t, admin.HandlerConfig{Token: testToken, ReadToken: testReadToken})
	for _, action := range []string{"cancel", "requeue"} {
		r := s.do(http.MethodPost, "/ui/api/"+action, "", testReadToken, `{"key":"k","stage":"s","id":"1-1"}`)
		if r.code != http.StatusForbidden || !strings.Contains(r.body, "read_only") {
			t.Errorf("%s with the read-only token: %d %s, want 403 read_only", action, r.code, r.body)
		}
		if r := s.do(http.MethodPost, "/ui/api/"+action, "", "", `{}`); r.code != http.StatusUnauthorized {
			t.Errorf("%s without a token: %d, want 401", action, r.code)
		}
	}
	node := func(s *secureServer, tok string) map[string]any {
		r := s.do(http.MethodGet, "/ui/api/node", "", tok, "")
		var m map[string]any
		if err := json.Unmarshal([]byte(r.body), &m); err != nil || r.code != http.StatusOK {
			t.Fatalf("node: %d %s %v", r.code, r.body, err)
		}
		return m
	}
	if m := node(s, testReadToken); m["actions"] != true || m["canAct"] != false {
		t.Errorf("node with the read-only token: %v, want actions true, canAct false", m)
	}
	if m := node(s, testToken); m["canAct"] != true {
		t.Errorf("node with the action token: %v, want canAct true", m)
	}
	// The action token reaches the action (here: an invalid key, a 4xx of the inspector).
	switch r := s.do(http.MethodPost, "/ui/api/cancel", "", testToken, `{"key":"no{braces}"}`); r.code {
	case http.StatusBadRequest, http.StatusNotFound:
	default:
		t.Errorf("cancel with the action token: %d %s, want 400 or 404 from the inspector", r.code, r.body)
	}

	readOnly := newSecureServer(t, admin.HandlerConfig{ReadToken: testReadToken})
	if m := node(readOnly, testReadToken); m["actions"] != false || m["canAct"] != false {
		t.Errorf("node of a read-only dashboard: %v", m)
	}
	r := readOnly.do(http.MethodPost, "/ui/api/cancel", "", testReadToken, `{"key":"k"}`)
	if r.code != http.StatusForbidden || !strings.Contains(r.body, "actions_disabled") {
		t.Errorf("cancel on a read-only dashboard: %d %s, want 403 actions_disabled", r.code, r.body)
	}
}

// TestSecurityShortTokenRefused: a token under 16 bytes, or a read token equal to the action
// token, is an error when the handler is made; the error does not repeat the token.
func TestSecurityShortTokenRefused(t *testing.T) {
	r := redistest.New(t)
	insp, err := admin.New(admin.Config{Client: r.Client, Keyspace: topics.Keyspace{Prefix: r.Prefix}, Stages: []string{"s"}})
	if err != nil {
		t.Fatal(err)
	}
	for name, cfg := range map[string]admin.HandlerConfig{
		"one-byte token":        {Token: "x"},
		"15-byte token":         {Token: "fifteen-bytes!!"},
		"15-byte read token":    {Token: testToken, ReadToken: "fifteen-bytes!!"},
		"read token = token":    {Token: testToken, ReadToken: testToken},
		"short read token only": {ReadToken: "abc"},
	} {
		cfg.Inspector = insp
		_, err := admin.Handler(cfg)
		if err == nil {
			t.Errorf("%s: accepted", name)
			continue
		}
		for _, tok := range []string{cfg.Token, cfg.ReadToken} {
			if len(tok) > 2 && strings.Contains(err.Error(), tok) {
				t.Errorf("%s: the error repeats the token: %v", name, err)
			}
		}
		t.Logf("%s: %v", name, err)
	}
	if _, err := admin.Handler(admin.HandlerConfig{Inspector: insp, Token: "sixteen-bytes!!!"}); err != nil {
		t.Errorf("a 16-byte token: %v", err)
	}
}

// TestSecurityFailedAuthRateLimited: five wrong tokens from one address are answered 401,
// then every request with a token from it gets 429 with Retry-After, even a right token (or
// guessing would go on and tell right from wrong); requests without a token are not counted.
func TestSecurityFailedAuthRateLimited(t *testing.T) {
	s := newSecureServer(t, admin.HandlerConfig{Token: testToken, ReadToken: testReadToken})
	for range 10 {
		if r := s.do(http.MethodGet, "/ui/api/overview", "", "", ""); r.code != http.StatusUnauthorized {
			t.Fatalf("tokenless read: %d, want 401 (not counted)", r.code)
		}
	}
	for i := range admin.DefaultFailuresPerMinute {
		if r := s.do(http.MethodGet, "/ui/api/overview", "", fmt.Sprintf("guess-%02d-0123456789", i), ""); r.code != http.StatusUnauthorized {
			t.Fatalf("wrong token %d: %d, want 401", i+1, r.code)
		}
	}
	for _, tc := range []struct{ method, path, token string }{
		{http.MethodGet, "/ui/api/overview", "guess-99-0123456789"},
		{http.MethodGet, "/ui/api/events", testReadToken},
		{http.MethodPost, "/ui/api/cancel", testToken},
	} {
		r := s.do(tc.method, tc.path, "", tc.token, `{"key":"k"}`)
		secs, err := strconv.Atoi(r.header.Get("Retry-After"))
		if r.code != http.StatusTooManyRequests || err != nil || secs < 1 || secs > 60 || !strings.Contains(r.body, "rate_limited") {
			t.Errorf("%s %s after 5 failures: %d Retry-After %q %s, want 429 with 1-60 s", tc.method, tc.path, r.code,
				r.header.Get("Retry-After"), r.body)
		}
	}
	// Another address has its own budget (RemoteAddr set on a request served directly).
	h := s.srv.Config.Handler
	req := httptest.NewRequest(http.MethodGet, s.srv.URL+"/ui/api/node", nil)
	req.Host = s.srv.Listener.Addr().String()
	req.RemoteAddr = "[2001:db8::7]:40000"
	req.Header.Set("Authorization", "Bearer "+testReadToken)
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	if rec.Code != http.StatusOK {
		t.Errorf("another address after this one's failures: %d %s, want 200", rec.Code, rec.Body)
	}
}

// TestSecurityDLQTruncated: three dead letters with a 1 MB uuid, detail, consumer and
// payload come back from /ui/api/dlq with every field cut to 4 KiB (and the payload to 2 KiB)
// and marked with its full size; so do a huge event and a flight with a huge error and 1,500
// parked tasks.
func TestSecurityDLQTruncated(t *testing.T) {
	s := newSecureServer(t, admin.HandlerConfig{ReadToken: testReadToken})
	ctx := context.Background()
	mb := strings.Repeat("u", 1<<20)
	for range 3 {
		if err := s.r.Client.XAdd(ctx, &redis.XAddArgs{Stream: s.ks.DLQ("interview-evaluation"), Values: []any{
			topics.FieldUUID, mb, topics.FieldPayload, mb, topics.FieldReason, "bad_json", topics.FieldDetail, mb,
			topics.FieldConsumer, mb,
		}}).Err(); err != nil {
			t.Fatal(err)
		}
	}
	r := s.do(http.MethodGet, "/ui/api/dlq?n=1000", "", testReadToken, "")
	if r.code != http.StatusOK || len(r.body) > 64<<10 {
		t.Fatalf("GET dlq: %d, %d bytes, want 200 under 64 KiB", r.code, len(r.body))
	}
	var dlq []admin.DeadLetterView
	if err := json.Unmarshal([]byte(r.body), &dlq); err != nil || len(dlq) != 3 {
		t.Fatalf("dlq: %v, %d entries", err, len(dlq))
	}
	marker := "…(1048576 bytes)"
	for _, d := range dlq {
		if !strings.HasSuffix(d.UUID, marker) || len(d.UUID) != admin.MaxFieldBytes+len(marker) ||
			!strings.HasSuffix(d.Detail, marker) || !strings.HasSuffix(d.Consumer, marker) ||
			!strings.HasSuffix(d.Payload, marker) || len(d.Payload) != admin.MaxPayloadBytes+len(marker) || d.Reason != "bad_json" {
			t.Errorf("dead letter not bounded: uuid %d bytes (…%q), payload %d bytes", len(d.UUID), d.UUID[max(0, len(d.UUID)-20):], len(d.Payload))
		}
	}

	// An event with a 1 MB error and a 1 MB inline result, of the flight below.
	key, err := flight.SemanticKey(flight.KeyParams{Stage: "interview-evaluation", Tenant: "acme", Input: json.RawMessage(`{"a":1}`)})
	if err != nil {
		t.Fatal(err)
	}
	ev := topics.Event{TaskID: "t-big", RequestKey: key, Stage: "interview-evaluation", Tenant: "acme", Status: topics.StatusFailed,
		Error: mb, Result: json.RawMessage(`{"text":"` + mb + `"}`)}
	payload, err := json.Marshal(ev)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.r.Client.XAdd(ctx, &redis.XAddArgs{Stream: s.ks.Results("interview-evaluation"),
		Values: []any{topics.FieldUUID, "e-1", topics.FieldPayload, payload}}).Err(); err != nil {
		t.Fatal(err)
	}
	r = s.do(http.MethodGet, "/ui/api/events", "", testReadToken, "")
	var evs []admin.EventView
	if err := json.Unmarshal([]byte(r.body), &evs); err != nil || len(evs) != 1 || len(r.body) > 16<<10 {
		t.Fatalf("events: %d, %d bytes, %v", r.code, len(r.body), err)
	}
	if e := evs[0].Event; !strings.HasSuffix(e.Error, marker) || len(e.Result) > admin.MaxFieldBytes+64 || !json.Valid(e.Result) {
		t.Errorf("event not bounded: error %d bytes, result %d bytes", len(e.Error), len(e.Result))
	}

	// A flight with a 1 MB error field and 1,500 parked tasks (listed: the event names it).
	if err := flighttest.Set(ctx, s.r.Client, s.ks.Flight(key), "status", "RUNNING", "stage", "interview-evaluation", "tenant", "acme",
		"error", mb); err != nil {
		t.Fatal(err)
	}
	parked := make([]any, 0, 3000)
	for i := range 1500 { // field "<entry id> <stream>", value "<parked at ms> <task id>"
		parked = append(parked, fmt.Sprintf("%d-0 %s", i+1, s.ks.Tasks("interview-evaluation")), fmt.Sprintf("1700000000000 task-%04d", i))
	}
	if err := s.r.Client.HSet(ctx, s.ks.Waiters(key), parked...).Err(); err != nil {
		t.Fatal(err)
	}
	r = s.do(http.MethodGet, "/ui/api/flight?key="+url.QueryEscape(key), "", testReadToken, "")
	var d admin.FlightDetail
	if err := json.Unmarshal([]byte(r.body), &d); err != nil || r.code != http.StatusOK {
		t.Fatalf("flight: %d %v %.300s", r.code, err, r.body)
	}
	if !d.Truncated || !strings.HasSuffix(d.Meta.Error, marker) || len(d.Meta.Parked) > admin.MaxListEntries ||
		len(d.Meta.Fields["error"]) > admin.MaxFieldBytes+len(marker) || len(r.body) > 1<<20 {
		t.Errorf("flight not bounded: truncated %v, error %d bytes, %d parked, body %d bytes", d.Truncated,
			len(d.Meta.Error), len(d.Meta.Parked), len(r.body))
	}
	var fs []admin.FlightView
	r = s.do(http.MethodGet, "/ui/api/flights", "", testReadToken, "")
	if err := json.Unmarshal([]byte(r.body), &fs); err != nil || len(fs) != 1 || !strings.HasSuffix(fs[0].Error, marker) {
		t.Errorf("flights: %v %d %.300s", err, len(fs), r.body)
	}
}

func TestTruncate(t *testing.T) {
	for _, tc := range []struct {
		in   string
		max  int
		want string
	}{
		{"short", 10, "short"},
		{"exactly10!", 10, "exactly10!"},
		{"0123456789abc", 10, "0123456789…(13 bytes)"},
		{"ééééé", 3, "é…(10 bytes)"}, // never half a rune
	} {
		if got := admin.Truncate(tc.in, tc.max); got != tc.want {
			t.Errorf("Truncate(%q, %d) = %q, want %q", tc.in, tc.max, got, tc.want)
		}
	}
}
