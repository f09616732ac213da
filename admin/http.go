package admin

import (
	"context"
	"crypto/subtle"
	"embed"
	"encoding/json"
	"errors"
	"io/fs"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/flightdeck-ai/flightdeck/flight"
)

//go:embed ui
var uiFiles embed.FS

// HandlerConfig configures the dashboard's HTTP handler.
type HandlerConfig struct {
	// Inspector reads the state. Required.
	Inspector *Inspector
	// Token authorises the actions (cancel, requeue): requests must carry
	// "Authorization: Bearer <Token>". Empty disables the actions. Reads need no token; keep
	// the server on loopback or behind your own proxy.
	Token string
	// Node reports the serving consumer's own state (name, breaker, draining, spool); may be
	// nil.
	Node func() any
	// Timeout bounds each request's Redis work. Defaults to 5 s.
	Timeout time.Duration
}

// Handler serves the dashboard under /ui/ and its JSON API under /ui/api/:
//
//	GET  /ui/                   the page (embedded, no build step)
//	GET  /ui/api/overview       stages, consumers, flight counts
//	GET  /ui/api/node           the serving consumer's own state
//	GET  /ui/api/flights        ?status=&stage=&limit=
//	GET  /ui/api/flight         ?key=
//	GET  /ui/api/events         ?stage=&n=
//	GET  /ui/api/dlq            ?stage=&n=
//	POST /ui/api/cancel         {"key": "...", "reason": "..."}   (token)
//	POST /ui/api/requeue        {"stage": "...", "id": "..."}     (token)
func Handler(cfg HandlerConfig) http.Handler {
	if cfg.Timeout == 0 {
		cfg.Timeout = 5 * time.Second
	}
	in := cfg.Inspector
	mux := http.NewServeMux()
	static, _ := fs.Sub(uiFiles, "ui")
	mux.Handle("GET /ui/", http.StripPrefix("/ui/", http.FileServerFS(static)))
	mux.HandleFunc("GET /ui", func(w http.ResponseWriter, r *http.Request) { http.Redirect(w, r, "/ui/", http.StatusFound) })
	get := func(path string, f func(ctx context.Context, r *http.Request) (any, error)) {
		mux.HandleFunc("GET /ui/api/"+path, func(w http.ResponseWriter, r *http.Request) {
			ctx, cancel := context.WithTimeout(r.Context(), cfg.Timeout)
			defer cancel()
			v, err := f(ctx, r)
			reply(w, v, err)
		})
	}
	n := func(r *http.Request, def int64) int64 {
		if v, err := strconv.ParseInt(r.URL.Query().Get("n"), 10, 64); err == nil && v > 0 && v <= 1000 {
			return v
		}
		return def
	}
	stages := func(r *http.Request) []string {
		if s := r.URL.Query().Get("stage"); s != "" {
			return []string{s}
		}
		return nil
	}
	get("overview", func(ctx context.Context, r *http.Request) (any, error) { return in.Overview(ctx) })
	get("node", func(ctx context.Context, r *http.Request) (any, error) {
		node := map[string]any{"actions": cfg.Token != ""}
		if cfg.Node != nil {
			node["status"] = cfg.Node()
		}
		return node, nil
	})
	get("flights", func(ctx context.Context, r *http.Request) (any, error) {
		limit, _ := strconv.Atoi(r.URL.Query().Get("limit"))
		return in.Flights(ctx, FlightFilter{Status: r.URL.Query().Get("status"), Stage: r.URL.Query().Get("stage"), Limit: limit})
	})
	get("flight", func(ctx context.Context, r *http.Request) (any, error) {
		return in.Flight(ctx, r.URL.Query().Get("key"))
	})
	get("events", func(ctx context.Context, r *http.Request) (any, error) { return in.Events(ctx, stages(r), n(r, 50)) })
	get("dlq", func(ctx context.Context, r *http.Request) (any, error) {
		return in.DeadLetters(ctx, stages(r), n(r, 50))
	})
	post := func(path string, f func(ctx context.Context, body map[string]string) (any, error)) {
		mux.HandleFunc("POST /ui/api/"+path, func(w http.ResponseWriter, r *http.Request) {
			if !authorized(r, cfg.Token) {
				http.Error(w, `{"error":"actions need a valid token (Authorization: Bearer ...)"}`, http.StatusUnauthorized)
				return
			}
			var body map[string]string
			if err := json.NewDecoder(http.MaxBytesReader(w, r.Body, 64<<10)).Decode(&body); err != nil {
				http.Error(w, `{"error":"body must be a JSON object of strings"}`, http.StatusBadRequest)
				return
			}
			ctx, cancel := context.WithTimeout(r.Context(), cfg.Timeout)
			defer cancel()
			v, err := f(ctx, body)
			reply(w, v, err)
		})
	}
	post("cancel", func(ctx context.Context, b map[string]string) (any, error) {
		reason := b["reason"]
		if reason == "" {
			reason = "cancelled from the dashboard"
		}
		return in.Cancel(ctx, b["key"], reason)
	})
	post("requeue", func(ctx context.Context, b map[string]string) (any, error) {
		id, err := in.Requeue(ctx, b["stage"], b["id"])
		return map[string]string{"id": id}, err
	})
	return securityHeaders(mux)
}

func authorized(r *http.Request, token string) bool {
	if token == "" {
		return false
	}
	got, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
	return ok && subtle.ConstantTimeCompare([]byte(got), []byte(token)) == 1
}

func reply(w http.ResponseWriter, v any, err error) {
	w.Header().Set("Content-Type", "application/json")
	if err != nil {
		code := http.StatusInternalServerError
		var se *flight.StateError
		switch {
		case errors.Is(err, flight.ErrNotFound), errors.Is(err, ErrNotFound):
			code = http.StatusNotFound
		case errors.Is(err, flight.ErrInvalidKey):
			code = http.StatusBadRequest
		case errors.As(err, &se):
			code = http.StatusConflict
		case errors.Is(err, context.DeadlineExceeded):
			code = http.StatusGatewayTimeout
		}
		w.WriteHeader(code)
		_ = json.NewEncoder(w).Encode(map[string]string{"error": err.Error()})
		return
	}
	_ = json.NewEncoder(w).Encode(v)
}

func securityHeaders(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("X-Content-Type-Options", "nosniff")
		w.Header().Set("X-Frame-Options", "DENY")
		w.Header().Set("Content-Security-Policy", "default-src 'self'; style-src 'self'; script-src 'self'; img-src 'self' data:")
		w.Header().Set("Cache-Control", "no-store")
		h.ServeHTTP(w, r)
	})
}
