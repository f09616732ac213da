// Command consumer runs a Flightdeck consumer: it reads the task streams of its stages in
// consumer group "flightdeck", runs each semantic key once across the fleet and publishes a
// terminal event per task. Several consumers may run on one host with default flags.
//
//	consumer [--redis URL] [--config stages.yaml] [--stages a,b] [--concurrency N]
//	         [--name NAME] [--http ADDR] [--grace 10s] [--spool-dir DIR] [--log-level info]
//	         [--log-format json]
//
// The Redis URL comes from --redis, else REDIS_URL, else redis://127.0.0.1:6379/0; put a
// password in REDIS_URL (or REDIS_URL_FILE) rather than on the command line. The OpenAI
// adapter reads OPENAI_BASE_URL, OPENAI_MODEL and OPENAI_API_KEY or OPENAI_API_KEY_FILE. The
// dashboard's actions (cancel, requeue) need FLIGHTDECK_UI_TOKEN or FLIGHTDECK_UI_TOKEN_FILE.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/rs/zerolog"

	"github.com/flightdeck-ai/flightdeck/admin"
	"github.com/flightdeck-ai/flightdeck/handlers"
	"github.com/flightdeck-ai/flightdeck/handlers/model"
	"github.com/flightdeck-ai/flightdeck/internal/faults"
	"github.com/flightdeck-ai/flightdeck/internal/redisconn"
	"github.com/flightdeck-ai/flightdeck/topics"
)

func main() {
	if err := run(os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "consumer:", err)
		os.Exit(1)
	}
}

func run(args []string) error {
	fs := flag.NewFlagSet("consumer", flag.ContinueOnError)
	var (
		redisURL    = fs.String("redis", "", "Redis URL (default $REDIS_URL, else redis://127.0.0.1:6379/0)")
		prefix      = fs.String("prefix", topics.DefaultPrefix, "key and stream prefix")
		config      = fs.String("config", "", "stage config file (YAML); the four built-in stages apply without one")
		stages      = fs.String("stages", "", "comma-separated stages to consume (default: every configured stage)")
		concurrency = fs.Int("concurrency", 0, "subscribers per stage (default: the stage's concurrency, 4)")
		name        = fs.String("name", "", "consumer name (default host-pid)")
		httpAddr    = fs.String("http", os.Getenv("FLIGHTDECK_HTTP"), "serve /metrics, /healthz, /readyz and the /ui dashboard on this address; \":9090\" binds loopback, give a host to bind others ($FLIGHTDECK_HTTP)")
		grace       = fs.Duration("grace", 10*time.Second, "on SIGTERM, how long running owners may finish")
		livenessInt = fs.Duration("liveness-interval", time.Second, "how often this consumer records it is alive")
		claimInt    = fs.Duration("claim-interval", time.Second, "how often each task stream is scanned for entries to claim and parked tasks to check")
		resultCap   = fs.Int64("result-maxlen", 0, "cap of each result stream, in events (approximate; 0: 1,000,000; -1: none); clients answer a task whose event was trimmed from its flight's stored outcome")
		spoolDir    = fs.String("spool-dir", "", "directory of the uncertain-outcome spool, shared by the consumers of a host; spools of stopped processes found there are written back at start (default $FLIGHTDECK_SPOOL_DIR, else $XDG_STATE_HOME/flightdeck/spool, else ~/.local/state/flightdeck/spool)")
		logLevel    = fs.String("log-level", "info", "trace, debug, info, warn or error")
		logFormat   = fs.String("log-format", "json", "json or console")
	)
	if err := fs.Parse(args); err != nil {
		return err
	}
	log, err := newLogger(*logLevel, *logFormat)
	if err != nil {
		return err
	}
	url, err := redisconn.URL(*redisURL, os.Getenv)
	if err != nil {
		return err
	}
	newClient, err := redisconn.UniversalFromEnv(url, os.Getenv)
	if err != nil {
		return err
	}
	var only []string
	if *stages != "" {
		only = strings.Split(*stages, ",")
	}
	stageCfgs, err := handlers.LoadStages(*config, only)
	if err != nil {
		return err
	}
	models := map[string]model.Model{"sim": &model.Sim{}}
	for i := range stageCfgs {
		if *concurrency > 0 {
			stageCfgs[i].Concurrency = *concurrency
		}
		if stageCfgs[i].Model == "openai" && models["openai"] == nil {
			oc, err := model.OpenAIConfigFromEnv(os.Getenv)
			if err != nil {
				return err
			}
			m, err := model.NewOpenAI(oc)
			if err != nil {
				return err
			}
			models["openai"] = m
		}
	}

	knobs, err := faults.FromEnv(os.Getenv)
	if err != nil {
		return err
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	c, err := handlers.NewConsumer(handlers.Config{
		NewClient: newClient,
		Keyspace:  topics.Keyspace{Prefix: *prefix}, Name: *name, Stages: stageCfgs, Models: models,
		Logger: &log, Registry: reg, LivenessInterval: *livenessInt, ClaimInterval: *claimInt, Grace: *grace,
		SpoolDir: *spoolDir, ResultMaxLen: *resultCap,
		Faults: handlers.Faults{AnswerAfterScript: knobs.AnswerAfterScript, AfterScript: knobs.AfterScript()},
	})
	if err != nil {
		return err
	}

	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()

	if *httpAddr != "" {
		token, err := secretFromEnv("FLIGHTDECK_UI_TOKEN")
		if err != nil {
			return err
		}
		stageNames := make([]string, len(stageCfgs))
		for i, s := range stageCfgs {
			stageNames[i] = s.Name
		}
		adminRdb := newClient()
		defer adminRdb.Close()
		insp, err := admin.New(admin.Config{Client: adminRdb, Keyspace: handlers.Keyspace(topics.Keyspace{Prefix: *prefix}, stageCfgs),
			Stages: stageNames, LivenessTimeout: 3 * *livenessInt})
		if err != nil {
			return err
		}
		// Listen before anything else: a port in use is a clear error at start. An address
		// without a host binds loopback only.
		addr := *httpAddr
		if strings.HasPrefix(addr, ":") {
			addr = "127.0.0.1" + addr
		}
		ln, err := net.Listen("tcp", addr)
		if err != nil {
			return fmt.Errorf("--http %s: %w", addr, err)
		}
		mux := http.NewServeMux()
		mux.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
		mux.HandleFunc("/healthz", func(w http.ResponseWriter, r *http.Request) { fmt.Fprintln(w, "ok") })
		mux.HandleFunc("/readyz", func(w http.ResponseWriter, r *http.Request) {
			if err := c.Ready(r.Context()); err != nil {
				http.Error(w, "not ready: "+err.Error(), http.StatusServiceUnavailable)
				return
			}
			fmt.Fprintln(w, "ready")
		})
		mux.Handle("/ui/", admin.Handler(admin.HandlerConfig{Inspector: insp, Token: token,
			Node: func() any { return c.Status() }}))
		mux.Handle("/ui", http.RedirectHandler("/ui/", http.StatusFound))
		srv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
		go func() {
			if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
				log.Error().Err(err).Msg("http server")
			}
		}()
		defer func() {
			sctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			defer cancel()
			_ = srv.Shutdown(sctx)
		}()
		log.Info().Str("addr", ln.Addr().String()).Bool("actions", token != "").Msg("http listening: /metrics /healthz /readyz /ui/")
	}
	log.Info().Str("name", c.Name()).Int("stages", len(stageCfgs)).Msg("starting")
	return c.Run(ctx)
}

func newLogger(level, format string) (zerolog.Logger, error) {
	lvl, err := zerolog.ParseLevel(level)
	if err != nil {
		return zerolog.Logger{}, fmt.Errorf("--log-level: %w", err)
	}
	var l zerolog.Logger
	switch format {
	case "json":
		l = zerolog.New(os.Stderr)
	case "console":
		l = zerolog.New(zerolog.ConsoleWriter{Out: os.Stderr, TimeFormat: time.TimeOnly})
	default:
		return zerolog.Logger{}, fmt.Errorf("--log-format %q: want json or console", format)
	}
	// Milliseconds in log times: the chaos checker and people ordering takeovers need them.
	// (zerolog keeps the format in a package variable; only this wiring code sets it.)
	zerolog.TimeFieldFormat = "2006-01-02T15:04:05.000Z07:00"
	return l.Level(lvl).With().Timestamp().Logger(), nil
}

// secretFromEnv reads a secret from $NAME, or from the file named by $NAME_FILE; never from a
// flag, which would show in a process listing.
func secretFromEnv(name string) (string, error) {
	if v := os.Getenv(name); v != "" {
		return v, nil
	}
	if f := os.Getenv(name + "_FILE"); f != "" {
		b, err := os.ReadFile(f)
		if err != nil {
			return "", fmt.Errorf("%s_FILE: %w", name, err)
		}
		return strings.TrimSpace(string(b)), nil
	}
	return "", nil
}
