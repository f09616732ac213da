// Package gateway is Flightdeck's HTTP API: it lets a service in any language enqueue tasks,
// wait for their terminal events, follow a tenant's events as Server-Sent Events, and
// inspect or cancel the flight of a request key, holding only an API token. The gateway
// holds the Redis credential; each token acts for one tenant under one key prefix, and never
// sees another tenant's tasks, keys or events, even on a shared prefix.
//
// A Server is an http.Handler. The routes, request and response bodies, error codes and
// limits are in docs/HTTP.md and in the OpenAPI document the Server serves at
// /v1/openapi.json.
package gateway

import (
	"context"
	"crypto/subtle"
	"net/http"
	"strings"
	"sync/atomic"
	"time"

	"github.com/rs/zerolog"

	"github.com/flightdeck-ai/flightdeck/client"
	"github.com/flightdeck-ai/flightdeck/internal/authlimit"
	"github.com/flightdeck-ai/flightdeck/topics"
)

// Server serves the HTTP API. It is safe for concurrent use.
type Server struct {
	cfg    Config
	log    zerolog.Logger
	tokens []*tenantToken
	fails  *authlimit.Limiter
	mux    *http.ServeMux
	// drain is cancelled by Drain: waits and event streams end when it is.
	drain    context.Context
	stopAll  context.CancelFunc
	draining atomic.Bool
}

// tenantToken is a configured token with the client of its prefix and its counters of
// waits and streams in progress.
type tenantToken struct {
	Token
	cl      *client.Client
	ks      topics.Keyspace
	waits   atomic.Int32
	streams atomic.Int32
}

// route is one method and path of the API.
type route struct {
	method, pattern string
	// public routes need no token.
	public bool
	serve  func(s *Server, w http.ResponseWriter, r *http.Request, tok *tenantToken)
}

// routes lists every route the Server serves; the OpenAPI document describes exactly these.
func routes() []route {
	return []route{
		{method: http.MethodPost, pattern: "/v1/stages/{stage}/tasks", serve: (*Server).postTask},
		{method: http.MethodGet, pattern: "/v1/tasks/{taskId}", serve: (*Server).getTask},
		{method: http.MethodGet, pattern: "/v1/keys/{requestKey}", serve: (*Server).getKey},
		{method: http.MethodPost, pattern: "/v1/keys/{requestKey}/cancel", serve: (*Server).cancelKey},
		{method: http.MethodGet, pattern: "/v1/events", serve: (*Server).events},
		{method: http.MethodGet, pattern: "/v1/openapi.json", public: true, serve: (*Server).openAPI},
		{method: http.MethodGet, pattern: "/healthz", public: true, serve: (*Server).healthz},
		{method: http.MethodGet, pattern: "/readyz", public: true, serve: (*Server).readyz},
	}
}

// New returns a Server for cfg. It does not contact Redis. The error wraps ErrConfig.
func New(cfg Config) (*Server, error) {
	cfg.setDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	s := &Server{cfg: cfg, log: *cfg.Logger, fails: authlimit.New(cfg.FailuresPerMinute, 0), mux: http.NewServeMux()}
	s.drain, s.stopAll = context.WithCancel(context.Background())
	clients := map[string]*client.Client{}
	for _, t := range cfg.Tokens {
		ks := topics.Keyspace{Prefix: t.Prefix, Partitions: t.Partitions}
		cl := clients[t.Prefix]
		if cl == nil {
			var err error
			cl, err = client.New(client.Config{Client: cfg.Client, Keyspace: ks, Limits: cfg.Limits,
				ScheduleHorizon: cfg.ScheduleHorizon, Now: cfg.Now, TracerProvider: cfg.TracerProvider})
			if err != nil {
				return nil, err
			}
			clients[t.Prefix] = cl
		}
		s.tokens = append(s.tokens, &tenantToken{Token: t, cl: cl, ks: ks})
	}
	byPath := map[string]map[string]route{}
	var order []string
	for _, rt := range routes() {
		if byPath[rt.pattern] == nil {
			byPath[rt.pattern] = map[string]route{}
			order = append(order, rt.pattern)
		}
		byPath[rt.pattern][rt.method] = rt
	}
	for _, p := range order {
		methods := byPath[p]
		s.mux.HandleFunc(p, func(w http.ResponseWriter, r *http.Request) { s.dispatch(w, r, methods) })
	}
	s.mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		writeError(w, http.StatusNotFound, codeNotFound, "no such route; the routes are in /v1/openapi.json")
	})
	return s, nil
}

// ServeHTTP serves one request of the API.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	rec := &recorder{ResponseWriter: w, status: http.StatusOK}
	start := time.Now()
	s.mux.ServeHTTP(rec, r)
	lvl := zerolog.DebugLevel
	if rec.status >= 500 {
		lvl = zerolog.WarnLevel
	}
	s.log.WithLevel(lvl).Str("method", r.Method).Str("route", r.Pattern).Int("status", rec.status).
		Dur("took", time.Since(start)).Str("token", rec.token).Str("tenant", rec.tenant).
		Str("client", authlimit.Network(r.RemoteAddr)).Msg("request")
}

// Drain ends every wait and event stream in progress and makes later ones end at once: a
// wait answers 202 with its receipt, as when its time runs out, and a stream closes, for
// its client to reconnect with Last-Event-ID, to another gateway if this one is stopping.
// /readyz answers 503 from then on. Other requests are served as before. Call it before
// http.Server.Shutdown, which waits for the requests in progress.
func (s *Server) Drain() {
	s.draining.Store(true)
	s.stopAll()
}

// dispatch serves a request of a path by its method, after authenticating it.
func (s *Server) dispatch(w http.ResponseWriter, r *http.Request, methods map[string]route) {
	rt, ok := methods[r.Method]
	if !ok {
		allow := make([]string, 0, len(methods))
		for m := range methods {
			allow = append(allow, m)
		}
		w.Header().Set("Allow", strings.Join(allow, ", "))
		writeError(w, http.StatusMethodNotAllowed, codeMethodNotAllowed, "method "+r.Method+" is not served on this path")
		return
	}
	if rt.public {
		rt.serve(s, w, r, nil)
		return
	}
	tok := s.authenticate(w, r)
	if tok == nil {
		return
	}
	if rec, ok := w.(*recorder); ok {
		rec.token, rec.tenant = tok.Name, tok.Tenant
	}
	rt.serve(s, w, r, tok)
}

// authenticate returns the token of r's bearer token, or writes the refusal and returns nil.
// Failed tokens are counted per client network; past the budget every request of that
// network carrying a token is refused with 429 until it refills.
func (s *Server) authenticate(w http.ResponseWriter, r *http.Request) *tenantToken {
	header := r.Header.Get("Authorization")
	if header == "" {
		// No guess was made, so it is not counted as a failure.
		w.Header().Set("WWW-Authenticate", `Bearer realm="flightdeck"`)
		writeError(w, http.StatusUnauthorized, codeTokenRequired, "this API needs a token: send Authorization: Bearer <token>")
		return nil
	}
	got := ""
	if scheme, rest, ok := strings.Cut(header, " "); ok && strings.EqualFold(scheme, "Bearer") {
		got = strings.TrimSpace(rest)
	}
	var found *tenantToken
	verdict, wait := s.fails.Check(authlimit.Network(r.RemoteAddr), s.cfg.Now(), func() bool {
		found = s.match(got)
		return found != nil
	})
	switch verdict {
	case authlimit.Limited:
		retryAfter(w, wait)
		writeError(w, http.StatusTooManyRequests, codeRateLimited,
			"too many failed token attempts from this address or its network; retry after the Retry-After seconds")
		return nil
	case authlimit.Refused:
		s.log.Info().Str("client", authlimit.Network(r.RemoteAddr)).Msg("token refused")
		w.Header().Set("WWW-Authenticate", `Bearer realm="flightdeck", error="invalid_token"`)
		writeError(w, http.StatusUnauthorized, codeTokenRefused, "token refused")
		return nil
	}
	return found
}

// match returns the token whose SHA-256 is got's, comparing with every configured token in
// constant time, so that neither the token nor its position shows in the timing.
func (s *Server) match(got string) *tenantToken {
	if got == "" {
		return nil
	}
	sum := HashToken(got)
	var found *tenantToken
	for _, t := range s.tokens {
		if subtle.ConstantTimeCompare(sum[:], t.SHA256[:]) == 1 {
			found = t
		}
	}
	return found
}

// acquire takes one of max slots of counter, or reports false when all are taken.
func acquire(counter *atomic.Int32, max int) bool {
	if counter.Add(1) > int32(max) {
		counter.Add(-1)
		return false
	}
	return true
}

// until returns a context that ends with parent, when the Server drains, or after d (d <= 0:
// no timeout of its own).
func (s *Server) until(parent context.Context, d time.Duration) (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithCancel(parent)
	if d > 0 {
		ctx, cancel = context.WithTimeout(parent, d)
	}
	stop := context.AfterFunc(s.drain, cancel)
	return ctx, func() { stop(); cancel() }
}

func (s *Server) healthz(w http.ResponseWriter, _ *http.Request, _ *tenantToken) {
	writeJSON(w, http.StatusOK, map[string]string{"status": "ok"})
}

// readyz answers 200 while Redis answers PING and the Server is not draining.
func (s *Server) readyz(w http.ResponseWriter, r *http.Request, _ *tenantToken) {
	if s.draining.Load() {
		writeError(w, http.StatusServiceUnavailable, codeShuttingDown, "the gateway is shutting down")
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), min(s.cfg.Timeout, 2*time.Second))
	defer cancel()
	if err := s.cfg.Client.Ping(ctx).Err(); err != nil {
		s.log.Warn().Err(err).Msg("readyz: Redis does not answer")
		retryAfter(w, time.Second)
		writeError(w, http.StatusServiceUnavailable, codeRedisUnavailable, "Redis did not answer")
		return
	}
	writeJSON(w, http.StatusOK, map[string]string{"status": "ready"})
}

// recorder keeps the status of a response and who made the request, for the request log.
type recorder struct {
	http.ResponseWriter
	status        int
	wrote         bool
	token, tenant string
}

// WriteHeader records the status.
func (r *recorder) WriteHeader(code int) {
	if !r.wrote {
		r.status, r.wrote = code, true
	}
	r.ResponseWriter.WriteHeader(code)
}

// Write records an implicit 200.
func (r *recorder) Write(b []byte) (int, error) {
	r.wrote = true
	return r.ResponseWriter.Write(b)
}

// Unwrap returns the wrapped writer, for http.ResponseController.
func (r *recorder) Unwrap() http.ResponseWriter { return r.ResponseWriter }
