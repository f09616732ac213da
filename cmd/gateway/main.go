// Command gateway serves Flightdeck's HTTP API: services in any language enqueue tasks, wait
// for their terminal events, follow their tenant's events as Server-Sent Events and inspect or
// cancel request keys with an API token, while the gateway alone holds the Redis credential.
// docs/HTTP.md is its reference.
//
//	gateway --tokens tokens.yaml [--listen 127.0.0.1:8080] [--redis URL] [--stages a,b]
//	        [--tls-cert cert.pem --tls-key key.pem] [--max-wait 60s] [--max-body 1048576]
//	        [--grace 10s] [--log-level info]
//
// The Redis URL comes from --redis, else REDIS_URL, else the file REDIS_URL_FILE names, else
// redis://127.0.0.1:6379/0; logs and errors show it redacted. The tokens file comes from
// --tokens, else FLIGHTDECK_GATEWAY_TOKENS. The gateway speaks HTTP/1.1 and HTTP/2: over TLS
// when --tls-cert and --tls-key are set, else in clear text (h2c with prior knowledge). On
// SIGTERM or SIGINT it ends every wait and event stream, stops accepting connections and
// waits up to --grace for the requests in progress. OTEL_* variables turn on tracing.
package main

import (
	"context"
	"crypto/tls"
	"errors"
	"flag"
	"fmt"
	stdlog "log"
	"net"
	"net/http"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redis/go-redis/v9/logging"
	"github.com/rs/zerolog"

	"github.com/flightdeck-ai/flightdeck/gateway"
	"github.com/flightdeck-ai/flightdeck/internal/cli"
	"github.com/flightdeck-ai/flightdeck/internal/otelsetup"
	"github.com/flightdeck-ai/flightdeck/internal/redisconn"
)

// readHeaderTimeout bounds the reading of a request's headers; the body has the gateway's
// own bound, and waits and event streams have no write timeout.
const readHeaderTimeout = 10 * time.Second

func main() {
	// go-redis logs dial failures on its own, outside the JSON log; the gateway reports Redis
	// errors itself.
	redis.SetLogger(&logging.VoidLogger{})
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	code := cli.ExitCode(run(ctx, os.Args[1:], os.Getenv))
	stop()
	os.Exit(code)
}

// options are the gateway's command-line flags, each parsed into the value it points to.
type options struct {
	listen   *string
	redisURL *string
	tokens   *string
	stages   *string
	tlsCert  *string
	tlsKey   *string
	maxWait  *time.Duration
	maxBody  *int64
	grace    *time.Duration
	logLevel *string
	version  *bool
}

// newFlags returns the gateway's flag set and the options it parses into. getenv gives the
// defaults some flags take from the environment.
func newFlags(getenv func(string) string) (*flag.FlagSet, *options) {
	fs := flag.NewFlagSet("gateway", flag.ContinueOnError)
	listen := getenv("FLIGHTDECK_GATEWAY_LISTEN")
	if listen == "" {
		listen = "127.0.0.1:8080"
	}
	o := &options{
		listen:   fs.String("listen", listen, "address to serve the API on; \"0.0.0.0:8080\" or \"[::]:8080\" for every interface, port 0 for any free port ($FLIGHTDECK_GATEWAY_LISTEN)"),
		redisURL: fs.String("redis", "", "Redis URL (default $REDIS_URL, else the file $REDIS_URL_FILE names, else redis://127.0.0.1:6379/0)"),
		tokens:   fs.String("tokens", getenv("FLIGHTDECK_GATEWAY_TOKENS"), "tokens file (YAML or JSON): each token's sha256 or token_file, tenant and prefix; required ($FLIGHTDECK_GATEWAY_TOKENS)"),
		stages:   fs.String("stages", getenv("FLIGHTDECK_GATEWAY_STAGES"), "comma-separated stages the tokens may use (default: any) ($FLIGHTDECK_GATEWAY_STAGES)"),
		tlsCert:  fs.String("tls-cert", getenv("FLIGHTDECK_GATEWAY_TLS_CERT"), "PEM certificate chain: serve HTTPS, HTTP/2 included; needs --tls-key ($FLIGHTDECK_GATEWAY_TLS_CERT)"),
		tlsKey:   fs.String("tls-key", getenv("FLIGHTDECK_GATEWAY_TLS_KEY"), "PEM private key of --tls-cert ($FLIGHTDECK_GATEWAY_TLS_KEY)"),
		maxWait:  fs.Duration("max-wait", time.Minute, "the longest wait a request may ask for"),
		maxBody:  fs.Int64("max-body", 1<<20, "the largest request body, in bytes"),
		grace:    fs.Duration("grace", 10*time.Second, "on SIGTERM, how long requests in progress may finish"),
		logLevel: fs.String("log-level", "info", "trace, debug (a line per request), info, warn or error; logs are JSON on stderr"),
		version:  fs.Bool("version", false, "print the version and exit"),
	}
	return fs, o
}

// run serves the API until ctx ends, then drains and stops.
// It reports its errors on stderr itself, past the command line's, which the flag package
// reports.
func run(ctx context.Context, args []string, getenv func(string) string) (err error) {
	fs, o := newFlags(getenv)
	if err := cli.Parse(fs, args, os.Stdout, os.Stderr); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return err
		}
		return &cli.UsageError{Err: err}
	}
	defer func() {
		if err != nil {
			fmt.Fprintln(os.Stderr, "gateway:", err)
		}
	}()
	if fs.NArg() > 0 {
		return cli.Usagef("unexpected argument %q (flags only; see --help)", fs.Arg(0))
	}
	if *o.version {
		fmt.Println(cli.Version("gateway"))
		return nil
	}
	lvl, err := zerolog.ParseLevel(*o.logLevel)
	if err != nil || *o.logLevel == "" {
		return cli.Usagef("--log-level %q: want trace, debug, info, warn or error", *o.logLevel)
	}
	zerolog.TimeFieldFormat = "2006-01-02T15:04:05.000Z07:00"
	log := zerolog.New(os.Stderr).Level(lvl).With().Timestamp().Logger()
	if *o.tokens == "" {
		return cli.Usagef("--tokens: name the tokens file (docs/HTTP.md, \"Tokens\")")
	}
	if (*o.tlsCert == "") != (*o.tlsKey == "") {
		return cli.Usagef("--tls-cert and --tls-key go together")
	}
	tokens, err := gateway.LoadTokens(*o.tokens)
	if err != nil {
		return &cli.UsageError{Err: err}
	}
	url, err := redisconn.URL(*o.redisURL, getenv)
	if err != nil {
		return err
	}
	// No error or log line repeats the URL's password.
	defer func() { err = redisconn.RedactError(err, url) }()
	newClient, err := redisconn.UniversalFromEnv(url, getenv)
	if err != nil {
		return &cli.UsageError{Err: err}
	}
	rdb := newClient()
	defer rdb.Close()

	gcfg := gateway.Config{Client: rdb, Tokens: tokens, Stages: cli.SplitList(*o.stages),
		MaxWait: *o.maxWait, MaxBodyBytes: *o.maxBody, Logger: &log}
	tp, err := otelsetup.New(ctx, getenv, "flightdeck-gateway")
	if err != nil {
		return err
	}
	if tp != nil { // else no tracing, and no cost
		gcfg.TracerProvider = tp
		defer flushSpans(tp, &log)
	}
	gw, err := gateway.New(gcfg)
	if err != nil {
		return &cli.UsageError{Err: err}
	}
	srv := newHTTPServer(gw, &log)
	if *o.tlsCert != "" {
		cert, err := tls.LoadX509KeyPair(*o.tlsCert, *o.tlsKey)
		if err != nil {
			return cli.Usagef("--tls-cert, --tls-key: %w", err)
		}
		srv.TLSConfig = &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}
	}
	ln, err := net.Listen("tcp", *o.listen)
	if err != nil {
		return fmt.Errorf("--listen: %w", err)
	}
	served := make(chan error, 1)
	go func() {
		if srv.TLSConfig != nil {
			served <- srv.ServeTLS(ln, "", "") // the certificate is in srv.TLSConfig
		} else {
			served <- srv.Serve(ln)
		}
	}()
	log.Info().Str("listen", ln.Addr().String()).Bool("tls", *o.tlsCert != "").Int("tokens", len(tokens)).
		Str("redis", redisconn.RedactURL(url)).Bool("tracing", tp != nil).Msg("serving the HTTP API")
	select {
	case err := <-served:
		return fmt.Errorf("serving: %w", err)
	case <-ctx.Done():
	}
	log.Info().Dur("grace", *o.grace).Msg("stopping: waits and event streams end, requests in progress finish")
	gw.Drain()
	sctx, cancel := context.WithTimeout(context.Background(), *o.grace)
	defer cancel()
	if err := srv.Shutdown(sctx); err != nil {
		_ = srv.Close()
		return fmt.Errorf("stopping: %w", err)
	}
	log.Info().Msg("stopped")
	return nil
}

// flushSpans shuts the tracer provider tp down, exporting the spans it still holds, within 5 s.
func flushSpans(tp interface{ Shutdown(context.Context) error }, log *zerolog.Logger) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := tp.Shutdown(ctx); err != nil {
		log.Warn().Err(err).Msg("the last spans were not exported")
	}
}

// newHTTPServer returns the http.Server of the API: HTTP/1.1, HTTP/2 over TLS and HTTP/2 in
// clear text with prior knowledge. It sets no write timeout, since waits and event streams
// bound themselves.
func newHTTPServer(h http.Handler, log *zerolog.Logger) *http.Server {
	var protocols http.Protocols
	protocols.SetHTTP1(true)
	protocols.SetHTTP2(true)
	protocols.SetUnencryptedHTTP2(true)
	errLog := log.With().Str("component", "http").Logger()
	return &http.Server{Handler: h, ReadHeaderTimeout: readHeaderTimeout, IdleTimeout: 2 * time.Minute,
		MaxHeaderBytes: 64 << 10, Protocols: &protocols, ErrorLog: stdlog.New(errLog, "", 0)}
}
