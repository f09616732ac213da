// Command consumer runs a Flightdeck consumer: it reads the task streams of its stages in
// consumer group "flightdeck", runs each semantic key once across the fleet and publishes a
// terminal event per task. Several consumers may run on one host with default flags.
//
//	consumer [--redis URL] [--prefix ai] [--tenants a,b] [--config stages.yaml] [--stages a,b]
//	         [--concurrency N]
//	         [--name NAME] [--http ADDR] [--http-allowed-hosts h1,h2] [--health ADDR]
//	         [--grace 10s] [--spool-dir DIR] [--log-level info] [--log-format json]
//
// The Redis URL comes from --redis, else REDIS_URL, else redis://127.0.0.1:6379/0; put a
// password in REDIS_URL (or REDIS_URL_FILE) rather than on the command line; logs and errors
// show it redacted. The OpenAI adapter reads OPENAI_BASE_URL, OPENAI_MODEL and
// OPENAI_API_KEY or OPENAI_API_KEY_FILE. The dashboard (--http) answers its API only with a
// token: FLIGHTDECK_UI_READ_TOKEN (reads) or FLIGHTDECK_UI_TOKEN (reads and the cancel and
// requeue actions), or the files named by their _FILE variants; each at least 16 bytes.
// --health serves the probes and /metrics alone, for an address other hosts reach.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/rs/zerolog"

	"github.com/flightdeck-ai/flightdeck/handlers"
	"github.com/flightdeck-ai/flightdeck/handlers/model"
	"github.com/flightdeck-ai/flightdeck/internal/cli"
	"github.com/flightdeck-ai/flightdeck/internal/faults"
	"github.com/flightdeck-ai/flightdeck/internal/redisconn"
	"github.com/flightdeck-ai/flightdeck/topics"
)

func main() {
	err := run(os.Args[1:])
	if err != nil && !errors.Is(err, flag.ErrHelp) && !errors.Is(err, errUsagePrinted) {
		fmt.Fprintln(os.Stderr, "consumer:", err)
	}
	os.Exit(cli.ExitCode(err))
}

// errUsagePrinted is a command-line error the flag package has already reported.
var errUsagePrinted = cli.Usagef("bad command line")

func run(args []string) (err error) {
	fs := flag.NewFlagSet("consumer", flag.ContinueOnError)
	var (
		redisURL    = fs.String("redis", "", "Redis URL (default $REDIS_URL, else redis://127.0.0.1:6379/0)")
		prefix      = fs.String("prefix", topics.DefaultPrefix, "key and stream prefix")
		tenants     = fs.String("tenants", os.Getenv("FLIGHTDECK_TENANTS"), "comma-separated tenants this consumer accepts; a task naming another is dead-lettered (unknown_tenant). With one key prefix per tenant and its producers' ACL on that prefix, the tenant comes from the credentials (docs/SECURITY.md) ($FLIGHTDECK_TENANTS; default: any)")
		config      = fs.String("config", "", "stage config file (YAML); the four built-in stages apply without one")
		stages      = fs.String("stages", "", "comma-separated stages to consume (default: every configured stage)")
		concurrency = fs.Int("concurrency", 0, "subscribers per stage (default: the stage's concurrency, 4)")
		name        = fs.String("name", "", "consumer name (default host-pid)")
		httpAddr    = fs.String("http", os.Getenv("FLIGHTDECK_HTTP"), "serve the /ui dashboard (and /metrics, /healthz, /readyz) on this address; \":9090\" binds loopback, \"0.0.0.0:9090\" or \"[::]:9090\" every interface; requests must name it (or an --http-allowed-hosts entry) in Host ($FLIGHTDECK_HTTP)")
		healthAddr  = fs.String("health", os.Getenv("FLIGHTDECK_HEALTH"), "serve only /healthz, /readyz and /metrics on this address, e.g. the pod IP for Kubernetes probes; same address rules as --http ($FLIGHTDECK_HEALTH)")
		allowedHost = fs.String("http-allowed-hosts", os.Getenv("FLIGHTDECK_HTTP_ALLOWED_HOSTS"), "comma-separated names (host or host:port) the --http listener answers besides its own address; localhost, 127.0.0.1 and [::1] on its port are always allowed when it is bound to loopback ($FLIGHTDECK_HTTP_ALLOWED_HOSTS)")
		grace       = fs.Duration("grace", 10*time.Second, "on SIGTERM, how long running owners may finish")
		livenessInt = fs.Duration("liveness-interval", time.Second, "how often this consumer records it is alive")
		claimInt    = fs.Duration("claim-interval", time.Second, "how often each task stream is scanned for entries to claim and parked tasks to check")
		resultCap   = fs.Int64("result-maxlen", 0, "cap of each result stream, in events (approximate; 0: 1,000,000; -1: none); clients answer a task whose event was trimmed from its flight's stored outcome")
		spoolDir    = fs.String("spool-dir", "", "directory of the uncertain-outcome spool, shared by the consumers of a host; spools of stopped processes found there are written back at start (default $FLIGHTDECK_SPOOL_DIR, else $XDG_STATE_HOME/flightdeck/spool, else ~/.local/state/flightdeck/spool)")
		logLevel    = fs.String("log-level", "info", "trace, debug, info, warn or error")
		logFormat   = fs.String("log-format", "json", "json or console")
		version     = fs.Bool("version", false, "print the version and exit")
	)
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return err
		}
		return errUsagePrinted
	}
	if fs.NArg() > 0 {
		return cli.Usagef("unexpected argument %q (flags only; see --help)", fs.Arg(0))
	}
	if *version {
		fmt.Println(cli.Version("consumer"))
		return nil
	}
	log, err := newLogger(*logLevel, *logFormat)
	if err != nil {
		return err
	}
	// Addresses and tokens are checked before anything connects: a bad one is an error at
	// start, never a dashboard that is silently open.
	web, err := newHTTPSettings(*httpAddr, *healthAddr, *allowedHost)
	if err != nil {
		return &cli.UsageError{Err: err}
	}
	url, err := redisconn.URL(*redisURL, os.Getenv)
	if err != nil {
		return err
	}
	// No error or log line repeats the URL's password (nor a user-only URL's user, which
	// go-redis takes as the password).
	defer func() { err = redisconn.RedactError(err, url) }()
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
		if errors.Is(err, handlers.ErrUnknownStage) {
			return &cli.UsageError{Err: fmt.Errorf("--stages: %w", err)}
		}
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
				// url.Parse errors quote the whole base URL, credentials included.
				return redisconn.RedactError(err, oc.BaseURL)
			}
			log.Info().Str("baseURL", redisconn.RedactURL(oc.BaseURL)).Str("model", oc.Model).Msg("openai model")
			models["openai"] = m
		}
	}

	knobs, err := faults.FromEnv(os.Getenv)
	if err != nil {
		return err
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	var limits topics.Limits
	for _, t := range cli.SplitList(*tenants) {
		if err := topics.CheckTenant(t); err != nil {
			return cli.Usagef("--tenants: %w", err)
		}
		limits.Tenants = append(limits.Tenants, t)
	}
	c, err := handlers.NewConsumer(handlers.Config{
		NewClient: newClient,
		Keyspace:  topics.Keyspace{Prefix: *prefix}, Name: *name, Stages: stageCfgs, Models: models,
		Logger: &log, Registry: reg, LivenessInterval: *livenessInt, ClaimInterval: *claimInt, Grace: *grace,
		SpoolDir: *spoolDir, ResultMaxLen: *resultCap, Limits: limits,
		Faults: handlers.Faults{AnswerAfterScript: knobs.AnswerAfterScript, AfterScript: knobs.AfterScript()},
	})
	if err != nil {
		return err
	}

	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()

	stopHTTP, err := web.serve(&log, c, reg, newClient, handlers.Keyspace(topics.Keyspace{Prefix: *prefix}, stageCfgs),
		stageCfgs, 3**livenessInt)
	if err != nil {
		return err
	}
	defer stopHTTP()
	log.Info().Str("name", c.Name()).Int("stages", len(stageCfgs)).Str("redis", redisconn.RedactURL(url)).Msg("starting")
	return c.Run(ctx)
}

func newLogger(level, format string) (zerolog.Logger, error) {
	lvl, err := zerolog.ParseLevel(level)
	if err != nil || level == "" {
		return zerolog.Logger{}, cli.Usagef("--log-level %q: want trace, debug, info, warn or error", level)
	}
	var l zerolog.Logger
	switch format {
	case "json":
		l = zerolog.New(os.Stderr)
	case "console":
		l = zerolog.New(zerolog.ConsoleWriter{Out: os.Stderr, TimeFormat: time.TimeOnly})
	default:
		return zerolog.Logger{}, cli.Usagef("--log-format %q: want json or console", format)
	}
	// Milliseconds in log times: the chaos checker and people ordering takeovers need them.
	// (zerolog keeps the format in a package variable; only this wiring code sets it.)
	zerolog.TimeFieldFormat = "2006-01-02T15:04:05.000Z07:00"
	return l.Level(lvl).With().Timestamp().Logger(), nil
}
