// Command consumer runs a Flightdeck consumer: it reads the task streams of its stages in
// consumer group "flightdeck", runs each semantic key once across the fleet and publishes a
// terminal event per task. Several consumers may run on one host with default flags.
//
//	consumer [--redis URL] [--prefix ai] [--tenants a,b] [--config stages.yaml] [--stages a,b]
//	         [--concurrency N]
//	         [--name NAME] [--http ADDR] [--http-allowed-hosts h1,h2] [--health ADDR]
//	         [--grace 10s] [--spool-dir DIR] [--redis-wait 1m] [--archive URL]
//	         [--result-maxlen N] [--result-retention 1h] [--archive-deployment D]
//	         [--archive-adopt-legacy]
//	         [--log-level info] [--log-format json]
//	consumer --load-functions [--redis URL]
//
// The Redis URL comes from --redis, else REDIS_URL, else redis://127.0.0.1:6379/0. Put a
// password in REDIS_URL or REDIS_URL_FILE rather than on the command line. Logs and errors
// show it redacted. The OpenAI adapter reads OPENAI_BASE_URL, OPENAI_MODEL and
// OPENAI_API_KEY or OPENAI_API_KEY_FILE. The --http dashboard answers its API only with a
// token of at least 16 bytes: FLIGHTDECK_UI_READ_TOKEN for reads, or FLIGHTDECK_UI_TOKEN for
// reads and the cancel and requeue actions. Their _FILE variants name files that hold them.
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
	"github.com/redis/go-redis/v9"
	"github.com/rs/zerolog"
	"go.opentelemetry.io/otel/trace"

	"github.com/flightdeck-ai/flightdeck/archive"
	"github.com/flightdeck-ai/flightdeck/archive/postgres"
	"github.com/flightdeck-ai/flightdeck/handlers"
	"github.com/flightdeck-ai/flightdeck/handlers/model"
	"github.com/flightdeck-ai/flightdeck/internal/cli"
	"github.com/flightdeck-ai/flightdeck/internal/faults"
	"github.com/flightdeck-ai/flightdeck/internal/otelsetup"
	"github.com/flightdeck-ai/flightdeck/internal/redisconn"
	"github.com/flightdeck-ai/flightdeck/topics"
)

func main() {
	// go-redis logs dial failures on its own, outside the JSON log. The consumer reports
	// Redis errors itself.
	redis.SetLogger(quietLogger{})
	err := run(os.Args[1:])
	if err != nil && !errors.Is(err, flag.ErrHelp) && !errors.Is(err, errUsagePrinted) {
		fmt.Fprintln(os.Stderr, "consumer:", err)
	}
	os.Exit(cli.ExitCode(err))
}

// quietLogger drops go-redis's own log lines.
type quietLogger struct{}

// Printf drops the line.
func (quietLogger) Printf(context.Context, string, ...any) {}

// errUsagePrinted is a command-line error the flag package has already reported.
var errUsagePrinted = cli.Usagef("bad command line")

// options are the consumer's command-line flags, each parsed into the value it points to.
type options struct {
	redisURL    *string
	prefix      *string
	tenants     *string
	config      *string
	stages      *string
	concurrency *int
	name        *string
	httpAddr    *string
	healthAddr  *string
	allowedHost *string
	grace       *time.Duration
	livenessInt *time.Duration
	claimInt    *time.Duration
	resultCap   *int64
	resultKeep  *time.Duration
	spoolDir    *string
	logLevel    *string
	logFormat   *string
	archiveFlag *string
	archiveDep  *string
	adoptLegacy *bool
	gcFlag      *string
	redisWait   *time.Duration
	noEviction  *bool
	loadFuncs   *bool
	version     *bool
}

// newFlags returns the consumer's flag set and the options it parses into. getenv, os.Getenv
// in main, gives the defaults some flags take from the environment. The configuration
// reference, docs/CONFIGURATION.md, is checked against this flag set.
func newFlags(getenv func(string) string) (*flag.FlagSet, *options) {
	fs := flag.NewFlagSet("consumer", flag.ContinueOnError)
	o := &options{
		redisURL:    fs.String("redis", "", "Redis URL (default $REDIS_URL, else redis://127.0.0.1:6379/0)"),
		prefix:      fs.String("prefix", topics.DefaultPrefix, "key and stream prefix"),
		tenants:     fs.String("tenants", getenv("FLIGHTDECK_TENANTS"), "comma-separated tenants this consumer accepts; a task naming another is dead-lettered (unknown_tenant). With one key prefix per tenant and its producers' ACL on that prefix, the tenant comes from the credentials (docs/SECURITY.md) ($FLIGHTDECK_TENANTS; default: any)"),
		config:      fs.String("config", "", "stage config file (YAML); the four built-in stages apply without one"),
		stages:      fs.String("stages", "", "comma-separated stages to consume (default: every configured stage)"),
		concurrency: fs.Int("concurrency", 0, "handlers per stage (default: the stage's concurrency, 64)"),
		name:        fs.String("name", "", "consumer name (default host-pid)"),
		httpAddr:    fs.String("http", getenv("FLIGHTDECK_HTTP"), "serve the /ui dashboard (and /metrics, /healthz, /readyz) on this address; \":9090\" binds loopback, \"0.0.0.0:9090\" or \"[::]:9090\" every interface; requests must name it (or an --http-allowed-hosts entry) in Host ($FLIGHTDECK_HTTP)"),
		healthAddr:  fs.String("health", getenv("FLIGHTDECK_HEALTH"), "serve only /healthz, /readyz and /metrics on this address, e.g. the pod IP for Kubernetes probes; same address rules as --http ($FLIGHTDECK_HEALTH)"),
		allowedHost: fs.String("http-allowed-hosts", getenv("FLIGHTDECK_HTTP_ALLOWED_HOSTS"), "comma-separated names (host or host:port) the --http listener answers besides its own address; localhost, 127.0.0.1 and [::1] on its port are always allowed when it is bound to loopback ($FLIGHTDECK_HTTP_ALLOWED_HOSTS)"),
		grace:       fs.Duration("grace", 10*time.Second, "on SIGTERM, how long running owners may finish"),
		livenessInt: fs.Duration("liveness-interval", time.Second, "how often this consumer records it is alive"),
		claimInt:    fs.Duration("claim-interval", time.Second, "how often each task stream is scanned for entries to claim and parked tasks to check"),
		resultCap:   fs.Int64("result-maxlen", 0, "cap of each result stream, in events (approximate; 0: 1,000,000; -1: none); clients answer a task whose event was trimmed from its flight's stored outcome"),
		resultKeep:  fs.Duration("result-retention", time.Hour, "how long events stay on the result streams: older ones are trimmed (negative: no age trim)"),
		spoolDir:    fs.String("spool-dir", "", "base directory of the uncertain-outcome spool, shared by the consumers of a host, one subdirectory per deployment (prefix and Redis); spools of stopped processes of the deployment found there are written back at start (default $FLIGHTDECK_SPOOL_DIR, else $XDG_STATE_HOME/flightdeck/spool, else ~/.local/state/flightdeck/spool)"),
		logLevel:    fs.String("log-level", "info", "trace, debug, info, warn or error"),
		logFormat:   fs.String("log-format", "json", "json or console"),
		archiveFlag: fs.String("archive", "", "PostgreSQL URL of the durable archive of outcomes, e.g. postgres://user@db:5432/flightdeck (default $FLIGHTDECK_ARCHIVE_URL, or the file named by $FLIGHTDECK_ARCHIVE_URL_FILE; none: Redis only)"),
		archiveDep:  fs.String("archive-deployment", getenv("FLIGHTDECK_ARCHIVE_DEPLOYMENT"), "the deployment whose archived rows this consumer reads and writes: part of every row's identity, so deployments sharing a database never see each other's rows ($FLIGHTDECK_ARCHIVE_DEPLOYMENT; default: --prefix)"),
		adoptLegacy: fs.Bool("archive-adopt-legacy", false, "at start, move the archive's legacy rows (written before rows carried their deployment) of the --tenants (all without --tenants) into --archive-deployment, and log how many"),
		gcFlag:      fs.String("gc-percent", "", "the Go garbage collector's target, as GOGC: a percentage, or \"off\" (default $GOGC, else 400: a consumer's live heap is small and every task allocates)"),
		redisWait:   fs.Duration("redis-wait", time.Minute, "at start, how long to wait for Redis to answer, retrying with backoff, before giving up with exit 1 (0: one try)"),
		noEviction:  fs.Bool("require-noeviction", false, "refuse to start (exit 1) unless Redis's maxmemory-policy is noeviction; without it another policy is logged as a warning and shown on /readyz"),
		loadFuncs:   fs.Bool("load-functions", false, "load (or replace) the flight function library in Redis and exit: the operator's step where consumers' credentials may not load functions (docs/SECURITY.md); needs +function|load +function|list +ping"),
		version:     fs.Bool("version", false, "print the version and exit"),
	}
	return fs, o
}

func run(args []string) (err error) {
	fs, o := newFlags(os.Getenv)
	if err := cli.Parse(fs, args, os.Stdout, os.Stderr); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return err
		}
		return errUsagePrinted
	}
	if fs.NArg() > 0 {
		return cli.Usagef("unexpected argument %q (flags only; see --help)", fs.Arg(0))
	}
	if *o.version {
		fmt.Println(cli.Version("consumer"))
		return nil
	}
	if err := setGCPercent(*o.gcFlag, os.Getenv("GOGC")); err != nil {
		return &cli.UsageError{Err: err}
	}
	log, err := newLogger(*o.logLevel, *o.logFormat)
	if err != nil {
		return err
	}
	// Addresses and tokens are checked before anything connects: a bad one is an error at
	// start, never a dashboard that is silently open.
	web, err := newHTTPSettings(*o.httpAddr, *o.healthAddr, *o.allowedHost)
	if err != nil {
		return &cli.UsageError{Err: err}
	}
	url, err := redisconn.URL(*o.redisURL, os.Getenv)
	if err != nil {
		return err
	}
	// No error or log line repeats the URL's password, nor a user-only URL's user, which
	// go-redis takes as the password.
	defer func() { err = redisconn.RedactError(err, url) }()
	newClient, err := redisconn.UniversalFromEnv(url, os.Getenv)
	if err != nil {
		// A malformed --redis or $REDIS_URL, or an unreadable TLS file its variables name, is
		// a mistake in how the consumer was started: exit 2.
		return &cli.UsageError{Err: err}
	}
	if *o.loadFuncs {
		ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
		defer stop()
		return loadFunctions(ctx, &log, newClient, url, *o.redisWait)
	}
	var only []string
	if *o.stages != "" {
		only = strings.Split(*o.stages, ",")
	}
	stageCfgs, err := handlers.LoadStages(*o.config, only)
	if err != nil {
		if errors.Is(err, handlers.ErrUnknownStage) {
			return &cli.UsageError{Err: fmt.Errorf("--stages: %w", err)}
		}
		return err
	}
	mux, err := stageModels(&log, stageCfgs, *o.concurrency, os.Getenv)
	if err != nil {
		return err
	}

	knobs, err := faults.FromEnv(os.Getenv)
	if err != nil {
		return err
	}
	aURL, err := archiveURL(*o.archiveFlag, os.Getenv)
	if err != nil {
		return err
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	var limits topics.Limits
	for _, t := range cli.SplitList(*o.tenants) {
		if err := topics.CheckTenant(t); err != nil {
			return cli.Usagef("--tenants: %w", err)
		}
		limits.Tenants = append(limits.Tenants, t)
	}
	if *o.adoptLegacy && aURL == "" {
		return cli.Usagef("--archive-adopt-legacy needs an archive (--archive or $FLIGHTDECK_ARCHIVE_URL)")
	}
	acfg := postgres.Config{URL: aURL, Deployment: archiveDeployment(*o.archiveDep, *o.prefix)}
	var store *postgres.Store
	if aURL != "" {
		if store, err = openArchive(context.Background(), &log, acfg, *o.adoptLegacy, limits.Tenants); err != nil {
			if errors.Is(err, postgres.ErrConfig) {
				return &cli.UsageError{Err: err} // a malformed URL or --archive-deployment
			}
			return err
		}
		defer store.Close()
	}
	var arch archive.Store // nil without an archive: a nil *postgres.Store would make it non-nil
	if store != nil {
		arch = store
	}
	tp, err := otelsetup.New(context.Background(), os.Getenv, "flightdeck-consumer")
	if err != nil {
		return err
	}
	var tracer trace.TracerProvider // nil: no tracing, and no cost
	if tp != nil {
		tracer = tp
		defer func() {
			sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			if err := tp.Shutdown(sctx); err != nil {
				log.Warn().Err(err).Msg("flushing the last spans failed")
			}
		}()
	}
	c, err := handlers.NewConsumer(handlers.Config{Archive: arch, TracerProvider: tracer,
		NewClient: knobs.Wrap(newClient),
		Keyspace:  topics.Keyspace{Prefix: *o.prefix}, Name: *o.name, Stages: stageCfgs, Handlers: mux,
		Logger: &log, Registry: reg, LivenessInterval: *o.livenessInt, ClaimInterval: *o.claimInt, Grace: *o.grace,
		SpoolDir: *o.spoolDir, ResultMaxLen: *o.resultCap, ResultRetention: *o.resultKeep, Limits: limits,
		AnswerAfterScript: knobs.AnswerAfterScript, RequireNoEviction: *o.noEviction, Deployment: redisconn.Deployment(url),
	})
	if err != nil {
		return err
	}

	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()

	stopHTTP, err := web.serve(&log, c, reg, newClient, handlers.Keyspace(topics.Keyspace{Prefix: *o.prefix}, stageCfgs),
		stageCfgs, 3**o.livenessInt, store)
	if err != nil {
		return err
	}
	defer stopHTTP()
	if err := waitForRedis(ctx, &log, newClient, url, *o.redisWait); err != nil {
		return err
	}
	models := make([]string, len(stageCfgs))
	for i, s := range stageCfgs {
		models[i] = s.Name + "=" + s.Model
	}
	start := log.Info().Str("name", c.Name()).Strs("stages", models).Str("redis", redisconn.RedactURL(url))
	if redisconn.IsFailover(url) {
		// Log which master the sentinels name now. The client follows every promotion after it.
		mctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		name, addr, err := redisconn.FailoverMaster(mctx, url, redisconn.TLSFilesFromEnv(os.Getenv))
		cancel()
		start = start.Str("sentinelMaster", name)
		if err == nil {
			start = start.Str("masterAddr", addr)
		} else {
			log.Warn().Err(err).Msg("no sentinel named the master at start; the client keeps asking")
		}
	}
	start.Str("http", web.describe()).Bool("tracing", tp != nil).Msg("starting")
	return c.Run(ctx)
}

// stageModels applies --concurrency to the stages and returns the OpenAI adapter of every
// stage whose model is "openai", one adapter per stage. Each has the settings from the
// environment, overridden by the stage's openai block. Other stages run the sim model.
func stageModels(log *zerolog.Logger, stages []handlers.StageConfig, concurrency int,
	getenv func(string) string) (*handlers.Mux, error) {
	mux := handlers.NewMux()
	var base *model.OpenAIConfig
	for i := range stages {
		if concurrency > 0 {
			stages[i].Concurrency = concurrency
		}
		s := stages[i]
		if s.Model != "openai" {
			continue
		}
		if base == nil {
			oc, err := model.OpenAIConfigFromEnv(getenv)
			if err != nil {
				return nil, err
			}
			base = &oc
		}
		oc := s.OpenAI.Apply(*base)
		m, err := model.NewOpenAI(oc)
		if err != nil {
			// url.Parse errors quote the whole base URL, credentials included.
			return nil, fmt.Errorf("stage %s: %w", s.Name, redisconn.RedactError(err, oc.BaseURL))
		}
		log.Info().Str("stage", s.Name).Str("baseURL", redisconn.RedactURL(oc.BaseURL)).Str("model", oc.Model).
			Dur("timeout", oc.Timeout).Bool("stream", oc.Stream).Msg("openai model")
		mux.Handle(s.Name, m)
	}
	return mux, nil
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
	// zerolog keeps the format in a package variable, and only this wiring code sets it.
	zerolog.TimeFieldFormat = "2006-01-02T15:04:05.000Z07:00"
	return l.Level(lvl).With().Timestamp().Logger(), nil
}
