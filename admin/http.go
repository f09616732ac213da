package admin

import (
	"context"
	"embed"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"net/http"
	"strconv"
	"time"

	"github.com/flightdeck-ai/flightdeck/flight"
)

//go:embed ui
var uiFiles embed.FS

// HandlerConfig configures the dashboard's HTTP handler.
type HandlerConfig struct {
	// Inspector reads the state. Required.
	Inspector *Inspector
	// Token authorises reads and the actions, such as cancel and requeue, sent as
	// "Authorization: Bearer <Token>". It needs at least MinTokenLen bytes, and empty turns
	// the actions off. cmd/consumer reads it from FLIGHTDECK_UI_TOKEN or
	// FLIGHTDECK_UI_TOKEN_FILE.
	Token string
	// ReadToken authorises reads only. It may be empty, else it needs at least MinTokenLen
	// bytes and must differ from Token, and cmd/consumer reads it from
	// FLIGHTDECK_UI_READ_TOKEN or its _FILE variant. With neither token set every /ui/api/
	// request is refused with 403 and a message naming the variables, which the page still
	// loads and shows.
	ReadToken string
	// FailuresPerMinute bounds the requests with a wrong token per client, where a client is
	// all of loopback, an IPv4 /24 or an IPv6 /64. Past it every request of that client
	// carrying a token gets 429 with Retry-After until the budget refills, evenly over a
	// minute. Defaults to DefaultFailuresPerMinute.
	FailuresPerMinute int
	// Node reports the serving consumer's own state, such as name, breaker, draining and
	// spool. It may be nil.
	Node func() any
	// Timeout bounds each request's Redis work. Defaults to 5 s.
	Timeout time.Duration
}

// Handler serves the dashboard under /ui/ and its JSON API under /ui/api/:
//
//	GET  /ui/                   the page, embedded with no build step, no token needed
//	GET  /ui/api/overview       stages, consumers, flight counts
//	GET  /ui/api/node           the serving consumer's own state, and what the token may do
//	GET  /ui/api/flights        ?status=&stage=&limit=
//	GET  /ui/api/flight         ?key=
//	GET  /ui/api/events         ?stage=&n=
//	GET  /ui/api/dlq            ?stage=&n=
//	GET  /ui/api/history        ?stage=&minutes=   per-minute fleet stats of the last hour
//	GET  /ui/api/ledger         ?stage=&window=    the savings ledger of the last hour or day
//	GET  /ui/api/queued         ?stage=&n=         task entries not yet delivered
//	POST /ui/api/cancel         {"key": "...", "reason": "..."}
//	POST /ui/api/requeue        {"stage": "...", "id": "..."}
//	POST /ui/api/pause          {"stage": "..."}
//	POST /ui/api/resume         {"stage": "..."}
//	POST /ui/api/dlq/requeue    {"stage", "ids": [...]} or {"stage", "all": true, "upTo"}
//	POST /ui/api/dlq/purge      the same selection
//
// Every API request needs "Authorization: Bearer <token>": ReadToken or Token for the GET
// reads, Token for the POST actions. Refusals are JSON {"error", "code"}: 401 without a
// token or with a wrong one, 403 when no token is configured or a read token tries an
// action, 429 after too many wrong tokens. Serve it behind HostPolicy.Wrap, so that a page of
// another site cannot reach it through DNS rebinding. Handler fails on a token shorter than
// MinTokenLen or a ReadToken equal to Token.
func Handler(cfg HandlerConfig) (http.Handler, error) {
	if cfg.Inspector == nil {
		return nil, errors.New("admin: HandlerConfig.Inspector is required")
	}
	if err := CheckToken(cfg.Token); err != nil {
		return nil, fmt.Errorf("admin: Token: %w", err)
	}
	if err := CheckToken(cfg.ReadToken); err != nil {
		return nil, fmt.Errorf("admin: ReadToken: %w", err)
	}
	if cfg.Token != "" && cfg.ReadToken == cfg.Token {
		return nil, errors.New("admin: ReadToken equals Token: a read token must differ from the action token")
	}
	if cfg.Timeout == 0 {
		cfg.Timeout = 5 * time.Second
	}
	auth := newAuthenticator(cfg.Token, cfg.ReadToken, cfg.FailuresPerMinute)
	in := cfg.Inspector
	mux := http.NewServeMux()
	static, _ := fs.Sub(uiFiles, "ui")
	mux.Handle("GET /ui/", http.StripPrefix("/ui/", http.FileServerFS(static)))
	mux.HandleFunc("GET /ui", func(w http.ResponseWriter, r *http.Request) { http.Redirect(w, r, "/ui/", http.StatusFound) })
	get := func(path string, f func(ctx context.Context, r *http.Request, granted access) (any, error)) {
		mux.HandleFunc("GET /ui/api/"+path, func(w http.ResponseWriter, r *http.Request) {
			granted := auth.check(w, r, accessRead)
			if granted == accessNone {
				return
			}
			ctx, cancel := context.WithTimeout(r.Context(), cfg.Timeout)
			defer cancel()
			v, err := f(ctx, r, granted)
			reply(w, v, err)
		})
	}
	n := func(r *http.Request, def int64) int64 {
		if v, err := strconv.ParseInt(r.URL.Query().Get("n"), 10, 64); err == nil && v > 0 && v <= MaxListEntries {
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
	get("overview", func(ctx context.Context, r *http.Request, _ access) (any, error) { return in.Overview(ctx) })
	get("node", func(ctx context.Context, r *http.Request, granted access) (any, error) {
		node := map[string]any{"actions": cfg.Token != "", "canAct": granted == accessAct}
		if cfg.Node != nil {
			node["status"] = cfg.Node()
		}
		return node, nil
	})
	get("flights", func(ctx context.Context, r *http.Request, _ access) (any, error) {
		limit, _ := strconv.Atoi(r.URL.Query().Get("limit"))
		return in.Flights(ctx, FlightFilter{Status: r.URL.Query().Get("status"), Stage: r.URL.Query().Get("stage"), Limit: limit})
	})
	get("flight", func(ctx context.Context, r *http.Request, _ access) (any, error) {
		return in.Flight(ctx, r.URL.Query().Get("key"))
	})
	get("events", func(ctx context.Context, r *http.Request, _ access) (any, error) {
		return in.Events(ctx, stages(r), n(r, 50))
	})
	get("dlq", func(ctx context.Context, r *http.Request, _ access) (any, error) {
		return in.DeadLetters(ctx, stages(r), n(r, 50))
	})
	get("history", func(ctx context.Context, r *http.Request, _ access) (any, error) {
		minutes, _ := strconv.Atoi(r.URL.Query().Get("minutes"))
		return in.History(ctx, stages(r), minutes)
	})
	get("ledger", func(ctx context.Context, r *http.Request, _ access) (any, error) {
		return in.Ledger(ctx, stages(r), r.URL.Query().Get("window"))
	})
	get("queued", func(ctx context.Context, r *http.Request, _ access) (any, error) {
		return in.Queued(ctx, stages(r), n(r, 20))
	})
	post := func(path string, f func(ctx context.Context, r *http.Request, body json.RawMessage) (any, error)) {
		mux.HandleFunc("POST /ui/api/"+path, func(w http.ResponseWriter, r *http.Request) {
			if auth.check(w, r, accessAct) == accessNone {
				return
			}
			var body json.RawMessage
			if err := json.NewDecoder(http.MaxBytesReader(w, r.Body, 64<<10)).Decode(&body); err != nil ||
				len(body) == 0 || body[0] != '{' {
				apiError(w, http.StatusBadRequest, "bad_body", "body must be a JSON object")
				return
			}
			ctx, cancel := context.WithTimeout(r.Context(), cfg.Timeout)
			defer cancel()
			v, err := f(ctx, r, body)
			reply(w, v, err)
		})
	}
	// strs posts a body that is an object of strings.
	strs := func(path string, f func(ctx context.Context, r *http.Request, body map[string]string) (any, error)) {
		post(path, func(ctx context.Context, r *http.Request, raw json.RawMessage) (any, error) {
			var body map[string]string
			if err := json.Unmarshal(raw, &body); err != nil {
				return nil, fmt.Errorf("%w: body must be a JSON object of strings", ErrBadRequest)
			}
			return f(ctx, r, body)
		})
	}
	strs("cancel", func(ctx context.Context, _ *http.Request, b map[string]string) (any, error) {
		reason := b["reason"]
		if reason == "" {
			reason = "cancelled from the dashboard"
		}
		return in.Cancel(ctx, b["key"], reason)
	})
	strs("requeue", func(ctx context.Context, _ *http.Request, b map[string]string) (any, error) {
		id, err := in.Requeue(ctx, b["stage"], b["id"])
		return map[string]string{"id": id}, err
	})
	strs("pause", func(ctx context.Context, r *http.Request, b map[string]string) (any, error) {
		return in.Pause(ctx, b["stage"], "dashboard "+clientKey(r.RemoteAddr))
	})
	strs("resume", func(ctx context.Context, _ *http.Request, b map[string]string) (any, error) {
		was, err := in.Resume(ctx, b["stage"])
		return map[string]bool{"wasPaused": was}, err
	})
	bulk := func(path string, f func(context.Context, DLQSelection) (BulkResult, error)) {
		post(path, func(ctx context.Context, _ *http.Request, raw json.RawMessage) (any, error) {
			var sel DLQSelection
			if err := json.Unmarshal(raw, &sel); err != nil {
				return nil, fmt.Errorf("%w: body must be {\"stage\", \"ids\": [...]} or {\"stage\", \"all\": true}", ErrBadRequest)
			}
			return f(ctx, sel)
		})
	}
	bulk("dlq/requeue", in.RequeueDLQ)
	bulk("dlq/purge", in.PurgeDLQ)
	// Any other /ui/api/ path is refused like a read before it is found missing, so that
	// probing paths needs a token too.
	unknown := func(w http.ResponseWriter, r *http.Request) {
		if auth.check(w, r, accessRead) == accessNone {
			return
		}
		apiError(w, http.StatusNotFound, "not_found", "no such API path")
	}
	mux.HandleFunc("GET /ui/api/", unknown)
	mux.HandleFunc("POST /ui/api/", unknown)
	return securityHeaders(mux), nil
}

// statusClientClosed answers a request whose client went away before it was served, as
// proxies write it: not a server error.
const statusClientClosed = 499

// reply writes v as JSON, or err with the status it maps to.
func reply(w http.ResponseWriter, v any, err error) {
	w.Header().Set("Content-Type", "application/json")
	if err != nil {
		code := http.StatusInternalServerError
		var se *flight.StateError
		switch {
		case errors.Is(err, flight.ErrNotFound), errors.Is(err, ErrNotFound):
			code = http.StatusNotFound
		case errors.Is(err, flight.ErrInvalidKey), errors.Is(err, ErrBadRequest):
			code = http.StatusBadRequest
		case errors.As(err, &se):
			code = http.StatusConflict
		case errors.Is(err, context.DeadlineExceeded):
			code = http.StatusGatewayTimeout
		case errors.Is(err, context.Canceled):
			code = statusClientClosed // the client went away (a page that navigated, a closed tab)
		}
		w.WriteHeader(code)
		_ = json.NewEncoder(w).Encode(map[string]string{"error": Truncate(err.Error(), MaxFieldBytes)})
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
