package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/redis/go-redis/v9"
	"github.com/rs/zerolog"

	"github.com/flightdeck-ai/flightdeck/admin"
	"github.com/flightdeck-ai/flightdeck/archive/postgres"
	"github.com/flightdeck-ai/flightdeck/handlers"
	"github.com/flightdeck-ai/flightdeck/topics"
)

// httpSettings are the checked HTTP flags and dashboard tokens.
type httpSettings struct {
	// addr serves the dashboard and the probes, health the probes and /metrics only. Both
	// are listen addresses as admin.ListenAddr returns them, "" when off.
	addr, health string
	// allowed are the --http-allowed-hosts entries.
	allowed []string
	// token authorises reads and actions, readToken reads only.
	token, readToken string
}

// newHTTPSettings checks --http, --health, --http-allowed-hosts and the dashboard tokens.
// It reads the tokens only when --http is set.
func newHTTPSettings(httpAddr, healthAddr, allowed string) (httpSettings, error) {
	var (
		s   httpSettings
		err error
	)
	if httpAddr != "" {
		if s.addr, err = admin.ListenAddr(httpAddr); err != nil {
			return s, fmt.Errorf("--http: %w", err)
		}
		s.allowed = admin.ParseHostList(allowed)
		if _, err := admin.NewHostPolicy(s.addr, nil, s.allowed); err != nil {
			return s, fmt.Errorf("--http-allowed-hosts: %w", err)
		}
		if s.token, err = secretFromEnv("FLIGHTDECK_UI_TOKEN"); err != nil {
			return s, err
		}
		if s.readToken, err = secretFromEnv("FLIGHTDECK_UI_READ_TOKEN"); err != nil {
			return s, err
		}
		if s.token != "" && s.token == s.readToken {
			return s, errors.New("FLIGHTDECK_UI_READ_TOKEN equals FLIGHTDECK_UI_TOKEN: give the read-only token its own value")
		}
	}
	if healthAddr != "" {
		if s.health, err = admin.ListenAddr(healthAddr); err != nil {
			return s, fmt.Errorf("--health: %w", err)
		}
		if s.health == s.addr {
			return s, fmt.Errorf("--health and --http both name %s: give the probes their own address", s.addr)
		}
	}
	return s, nil
}

// describe names the listeners for the start line: "dashboard http://ADDR/ui/, probes
// ADDR", or "none".
func (s httpSettings) describe() string {
	var parts []string
	if s.addr != "" {
		parts = append(parts, "dashboard http://"+s.addr+"/ui/")
	}
	if s.health != "" {
		parts = append(parts, "probes http://"+s.health)
	}
	if len(parts) == 0 {
		return "none"
	}
	return strings.Join(parts, ", ")
}

// serve starts the listeners: --http with the dashboard, the probes and /metrics behind the
// Host check, --health with the probes and /metrics only. Both listen before serve returns,
// so an address in use is an error at start. stop shuts them down.
func (s httpSettings) serve(log *zerolog.Logger, c *handlers.Consumer, reg *prometheus.Registry,
	newClient func() redis.UniversalClient, ks topics.Keyspace, stages []handlers.StageConfig,
	livenessTimeout time.Duration, store *postgres.Store) (stop func(), err error) {
	var (
		servers []*http.Server
		closers []func() error
	)
	stop = func() {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		for _, srv := range servers {
			_ = srv.Shutdown(ctx)
		}
		for _, f := range closers {
			_ = f()
		}
	}
	defer func() {
		if err != nil {
			stop()
		}
	}()
	listen := func(flagName, addr string) (net.Listener, error) {
		ln, err := net.Listen("tcp", addr)
		if err != nil {
			return nil, fmt.Errorf("%s %s: %w", flagName, addr, err)
		}
		closers = append(closers, func() error { _ = ln.Close(); return nil })
		return ln, nil
	}
	serveOn := func(flagName string, ln net.Listener, h http.Handler) {
		srv := &http.Server{Handler: h, ReadHeaderTimeout: 5 * time.Second, IdleTimeout: 2 * time.Minute}
		servers = append(servers, srv)
		go func() {
			if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
				log.Error().Err(err).Str("flag", flagName).Msg("http server")
			}
		}()
	}

	var healthLn, httpLn net.Listener
	if s.health != "" {
		if healthLn, err = listen("--health", s.health); err != nil {
			return stop, err
		}
	}
	if s.addr != "" {
		if httpLn, err = listen("--http", s.addr); err != nil {
			return stop, err
		}
	}
	if healthLn != nil {
		serveOn("--health", healthLn, probes(c, reg))
		log.Info().Str("addr", healthLn.Addr().String()).Msg("health listening: /healthz /readyz /metrics")
	}
	if httpLn == nil {
		return stop, nil
	}
	names := make([]string, len(stages))
	for i, st := range stages {
		names[i] = st.Name
	}
	adminRdb := newClient()
	closers = append(closers, adminRdb.Close)
	insp, err := admin.New(admin.Config{Client: adminRdb, Keyspace: ks, Stages: names, LivenessTimeout: livenessTimeout,
		Archive: store})
	if err != nil {
		return stop, err
	}
	ui, err := admin.Handler(admin.HandlerConfig{Inspector: insp, Token: s.token, ReadToken: s.readToken,
		Node: func() any { return c.Status() }})
	if err != nil {
		return stop, err
	}
	// The Host check needs the bound address, since port 0 picks one.
	policy, err := admin.NewHostPolicy(s.addr, httpLn.Addr(), s.allowed)
	if err != nil {
		return stop, fmt.Errorf("--http-allowed-hosts: %w", err)
	}
	mux := probes(c, reg)
	mux.Handle("/ui/", ui)
	mux.Handle("/ui", http.RedirectHandler("/ui/", http.StatusFound))
	mux.Handle("GET /{$}", http.RedirectHandler("/ui/", http.StatusFound))
	serveOn("--http", httpLn, policy.Wrap(mux))
	log.Info().Str("addr", httpLn.Addr().String()).Strs("allowedHosts", policy.Hosts()).
		Bool("reads", s.token != "" || s.readToken != "").Bool("actions", s.token != "").
		Msg("http listening: /ui/ /metrics /healthz /readyz")
	if s.token == "" && s.readToken == "" {
		log.Warn().Msg("the dashboard's API is off: set FLIGHTDECK_UI_READ_TOKEN (reads) or FLIGHTDECK_UI_TOKEN (reads and actions)")
	}
	return stop, nil
}

// probes serves /healthz, /readyz and /metrics. /healthz says the process is up, /readyz
// that the consumer is ready.
func probes(c *handlers.Consumer, reg *prometheus.Registry) *http.ServeMux {
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, r *http.Request) { fmt.Fprintln(w, "ok") })
	mux.HandleFunc("/readyz", func(w http.ResponseWriter, r *http.Request) {
		if err := c.Ready(r.Context()); err != nil {
			http.Error(w, "not ready: "+err.Error(), http.StatusServiceUnavailable)
			return
		}
		fmt.Fprintln(w, "ready")
		if p := c.Status().EvictionPolicy; p != "" && p != "noeviction" {
			// Shown, not a reason to stop taking work: Redis may evict keys, and the operator
			// decides. --require-noeviction refuses to start instead.
			fmt.Fprintln(w, "warning: Redis maxmemory-policy is", p+": it may evict task streams, parked entries, fences and results")
		}
		if a := c.Status().Archive; a != "" {
			// The archive's health is shown, never a reason to stop taking work: without it
			// outcomes are spooled and written back later.
			fmt.Fprintln(w, "archive:", a)
		}
	})
	return mux
}

// secretFromEnv reads a secret from $NAME, or from the file named by $NAME_FILE with
// surrounding white space trimmed. It never reads a flag, which would show in a process
// listing. Setting both, or naming an empty file, is an error. No error repeats the secret.
func secretFromEnv(name string) (string, error) {
	v, f := os.Getenv(name), os.Getenv(name+"_FILE")
	switch {
	case v != "" && f != "":
		return "", fmt.Errorf("set %s or %s_FILE, not both", name, name)
	case v != "":
		if err := admin.CheckToken(v); err != nil {
			return "", fmt.Errorf("%s: %w", name, err)
		}
		return v, nil
	case f == "":
		return "", nil
	}
	b, err := os.ReadFile(f)
	if err != nil {
		return "", fmt.Errorf("%s_FILE: %w", name, err)
	}
	v = strings.TrimSpace(string(b))
	if v == "" {
		return "", fmt.Errorf("%s_FILE %s is empty", name, f)
	}
	if err := admin.CheckToken(v); err != nil {
		return "", fmt.Errorf("%s_FILE %s: %w", name, f, err)
	}
	return v, nil
}
