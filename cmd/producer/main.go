// Command producer enqueues Flightdeck tasks and watches their terminal events. It enqueues
// one task, a JSONL file or a generated load. It can also follow result streams, inspect a
// flight and cancel it. It is a thin shell over package client. Run it with -h for the usage.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"slices"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/flightdeck-ai/flightdeck/client"
	"github.com/flightdeck-ai/flightdeck/flight"
	fdcli "github.com/flightdeck-ai/flightdeck/internal/cli"
	"github.com/flightdeck-ai/flightdeck/internal/faults"
	"github.com/flightdeck-ai/flightdeck/internal/redisconn"
	"github.com/flightdeck-ai/flightdeck/topics"
)

// Exit codes.
const (
	exitOK    = 0
	exitFail  = 1 // an error, a timeout with missing events, a flight not found
	exitUsage = 2 // bad command line
)

const usageText = `producer: enqueue Flightdeck tasks and watch their terminal events.

Usage:
  producer [global options] <command> [options] [args]

Commands:
  enqueue   enqueue one task:  enqueue --stage S --tenant T --input JSON [--session ID] [--key K]
                               [--id ID] [--model-version V] [--prompt-version V] [--deadline RFC3339]
                               [--in D | --not-before RFC3339] [--schedule-horizon 168h]
            or a JSONL file:   enqueue -f tasks.jsonl ("-" reads stdin; one topics.Task JSON per line,
                               --stage/--tenant/--session/--model-version/--prompt-version fill
                               empty fields) [--progress]
            both take [--wait] [--timeout 60s] [--format table|json] [--any-stage]
  load      enqueue a generated load: N tasks over K distinct inputs, round-robin over stages,
            paced by a token bucket: load [--n 600] [--keys 60] [--rate 200] [--burst 20]
            [--stages a,b] [--tenant load] [--latency-ms 50] [--progress] [--wait] [--timeout 60s]
            [--format table|json] [--any-stage]
  stages    list the stages consumers have registered, with their last consumer, when it was
            last seen, and the entries waiting on their streams: stages [--format table|json]
  stats     the savings ledger of the last hour or day, per stage and tenant: tasks answered by
            each path (owner, joined, follower, hit, archive, local), the share answered without
            a call of their own, model calls, 429s, limiter waits, tokens and dollars spent and
            avoided (by the stage file's prices): stats [--stage S] [--window hour|day]
            [--format table|json]
  tail      follow result streams (default: every registered stage) and print each event until
            SIGINT/SIGTERM:
            tail [--stages a,b] [--from $|0|ID] [--format table|json]
  inspect   print the flight of a request key as indented JSON (state, parked tasks, key TTLs,
            stored result up to 2 KB): inspect KEY
  cancel    cancel the flight of a request key and answer its parked tasks: cancel KEY [--reason R]
  dlq       the dead letters (entries consumers refused), through the dashboard's own code:
              dlq ls [--stage S] [--n 20] [--format table|json]   newest first: id, age, reason,
                                                                  task id, detail
              dlq show ID --stage S                  one in full, with the original payload
              dlq requeue (ID... | --all) --stage S  back onto the stage's task stream
              dlq purge (ID... | --all) --stage S --yes   delete for good (refused without --yes)

Global options (accepted before or after the command):
  --redis URL     Redis URL; default $REDIS_URL, else redis://127.0.0.1:6379/0. Keep a password
                  off the command line by putting it in $REDIS_URL (or $REDIS_PASSWORD).
  --prefix P      keyspace prefix of every stream and key (default "ai")
  --partitions N  task stream partitions per stage, as the consumers' stage config says (default 1)
  --version       print the version and exit

enqueue and load refuse a stage that no consumer has registered (exit status 2, listing the
known stages); --any-stage enqueues anyway. Without --wait they print each task's receipt as
one JSON line on stdout (taskId, stage, streamId, enqueuedAt, requestKey, tenant: inspect and
cancel take the requestKey). --wait prints each task's first terminal event as one JSON line on
stdout as it arrives; at the timeout a line {"missing":{receipt}} per task still without its
event, with a hint at the cause on stderr; then a final line {"summary":{...}} (tasks, events,
missing, distinctKeys, owner, hit, follower, local, archive, failures, p50Ms, p99Ms, wallMs) and a
table on stderr. Latency is the event's arrival minus the task's enqueuedAt. --timeout counts
from the last enqueue.

--format (enqueue --wait, load --wait, tail): json prints the lines above; table prints aligned
columns (task, stage, status, shared, ms = queuedMs + runMs, the key and the result or error,
both shortened), a MISSING row per task still without its event, and the summary table on
stdout. The default is table when stdout is a terminal, json otherwise (pipes, files). With
--wait, a progress bar of the events received out of the tasks is drawn on stderr when it is a
terminal (--progress draws it anyway); without --wait the bar counts the tasks enqueued.

Exit status: 0 on success (with --wait: every event arrived, failed ones included), 1 on an
error, a --wait timeout or a flight not found, 2 on a usage error or an unknown stage.
Run 'producer <command> -h' for the options of one command.
`

// defaultStages are the four stages of the original system, as a flag value.
const defaultStages = "interview-evaluation,interview-followup,interview-extraction,interview-demeanor"

func main() {
	// go-redis logs dial failures on its own. The commands report errors themselves.
	redis.SetLogger(quietLogger{})
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, os.Args[1:], os.Stdin, os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

type quietLogger struct{}

func (quietLogger) Printf(context.Context, string, ...any) {}

// app holds the global options and the standard streams of one run.
type app struct {
	redisURL string
	prefix   string
	parts    int
	horizon  time.Duration // enqueue --schedule-horizon, 0 for the topics default
	stdin    io.Reader
	stdout   io.Writer
	stderr   io.Writer
	// lastFlags is the flag set newFlagSet made last: the configuration doc test reads a
	// subcommand's flags from it.
	lastFlags *flag.FlagSet
}

// newApp returns the app of one run with the global options at their defaults. The Redis URL
// comes from $REDIS_URL or $REDIS_URL_FILE through getenv, else redis://127.0.0.1:6379/0.
func newApp(getenv func(string) string, stdin io.Reader, stdout, stderr io.Writer) (*app, error) {
	u, err := redisconn.URL("", getenv)
	if err != nil {
		return nil, err // the error names the variable, and run prints it
	}
	return &app{redisURL: u, stdin: stdin, stdout: stdout, stderr: stderr, prefix: topics.DefaultPrefix}, nil
}

// mainFlags returns the flag set of the command line before the command: the global options
// and --version, whose value it also returns.
func (a *app) mainFlags() (*flag.FlagSet, *bool) {
	fs := flag.NewFlagSet("producer", flag.ContinueOnError)
	fs.Usage = func() { fmt.Fprint(fs.Output(), usageText) }
	a.globalFlags(fs)
	return fs, fs.Bool("version", false, "print the version and exit")
}

func run(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	a, err := newApp(os.Getenv, stdin, stdout, stderr)
	if err != nil {
		fmt.Fprintln(stderr, "producer:", err)
		return 1
	}
	fs, version := a.mainFlags()
	if err := fdcli.Parse(fs, args, stdout, stderr); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return exitOK
		}
		return exitUsage
	}
	if *version {
		fmt.Fprintln(stdout, fdcli.Version("producer"))
		return exitOK
	}
	if fs.NArg() == 0 {
		fmt.Fprint(stderr, usageText)
		return exitUsage
	}
	cmd, rest := fs.Arg(0), fs.Args()[1:]
	name := cmd // what messages call the command: "dlq purge" for a dlq subcommand
	switch cmd {
	case "enqueue":
		err = a.enqueue(ctx, rest)
	case "load":
		err = a.load(ctx, rest)
	case "tail":
		err = a.tail(ctx, rest)
	case "inspect":
		err = a.inspect(ctx, rest)
	case "cancel":
		err = a.cancel(ctx, rest)
	case "stages":
		err = a.stages(ctx, rest)
	case "stats":
		err = a.stats(ctx, rest)
	case "dlq":
		if len(rest) > 0 && slices.Contains([]string{"ls", "show", "requeue", "purge"}, rest[0]) {
			name += " " + rest[0]
		}
		err = a.dlq(ctx, rest)
	case "help":
		fmt.Fprint(stdout, usageText)
		return exitOK
	default:
		fmt.Fprintf(stderr, "producer: unknown command %q\n\n%s", cmd, usageText)
		return exitUsage
	}
	var ue usageError
	var sr stageRefusal
	switch {
	case err == nil:
		return exitOK
	case errors.Is(err, flag.ErrHelp):
		return exitOK
	case errors.Is(err, errFlagParse):
		return exitUsage // the flag package has printed the problem and the usage
	case errors.As(err, &ue):
		fmt.Fprintf(stderr, "producer %s: %v (see 'producer %s -h')\n", name, ue.msg, name)
		return exitUsage
	case errors.As(err, &sr):
		fmt.Fprintf(stderr, "producer: %s\n", sr.msg)
		return exitUsage
	case errors.Is(err, errReported):
		return exitFail
	default:
		fmt.Fprintf(stderr, "producer %s: %v\n", name, err)
		return exitFail
	}
}

// usageError is a bad command line detected after flag parsing.
type usageError struct{ msg string }

func (e usageError) Error() string { return e.msg }

func usagef(format string, args ...any) error { return usageError{fmt.Sprintf(format, args...)} }

// errFlagParse marks a flag error the flag package already printed.
var errFlagParse = errors.New("bad flags")

// errReported marks a failure whose message was already printed.
var errReported = errors.New("failure reported")

func (a *app) globalFlags(fs *flag.FlagSet) {
	// The current values are the defaults, so that a subcommand's flag set keeps what the
	// global parse set.
	fs.Var(urlFlag{&a.redisURL}, "redis", "Redis `URL`, from $REDIS_URL when set (keep passwords there, off the command line)")
	fs.StringVar(&a.prefix, "prefix", a.prefix, "keyspace `prefix`")
	fs.IntVar(&a.parts, "partitions", a.parts, "task stream `partitions` per stage")
}

// urlFlag is a string flag whose value -h output shows with its password redacted.
type urlFlag struct{ p *string }

func (f urlFlag) String() string {
	if f.p == nil {
		return ""
	}
	return redactURL(*f.p)
}

func (f urlFlag) Set(s string) error { *f.p = s; return nil }

// redactURL returns s without its secrets, as redisconn.RedactURL does.
func redactURL(s string) string { return redisconn.RedactURL(s) }

// newFlagSet returns a subcommand's flag set with the global options and a usage line.
func (a *app) newFlagSet(name, synopsis string) *flag.FlagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(a.stderr)
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "Usage: producer %s %s\n\nOptions:\n", name, synopsis)
		fs.PrintDefaults()
	}
	a.globalFlags(fs)
	a.lastFlags = fs
	return fs
}

// parse parses args with flags and positional arguments in any order.
func (a *app) parse(fs *flag.FlagSet, args []string) ([]string, error) {
	var pos []string
	for {
		if err := fdcli.Parse(fs, args, a.stdout, a.stderr); err != nil {
			if errors.Is(err, flag.ErrHelp) {
				return nil, err
			}
			return nil, errFlagParse
		}
		args = fs.Args()
		if len(args) == 0 {
			return pos, nil
		}
		pos = append(pos, args[0])
		args = args[1:]
	}
}

// connect opens the Redis client and the Flightdeck client. Messages never show the
// password of the URL.
func (a *app) connect(ctx context.Context) (redis.UniversalClient, *client.Client, error) {
	var rdb redis.UniversalClient
	if redisconn.IsCluster(a.redisURL) || redisconn.IsFailover(a.redisURL) {
		newClient, err := redisconn.UniversalFromEnv(a.redisURL, os.Getenv)
		if err != nil {
			return nil, nil, usagef("invalid Redis URL (--redis or $REDIS_URL): %s", redisconn.RedactError(err, a.redisURL))
		}
		rdb = newClient()
	} else {
		opt, err := redisconn.OptionsFromEnv(a.redisURL, os.Getenv)
		if err != nil {
			return nil, nil, usagef("invalid Redis URL (--redis or $REDIS_URL): %s", redisconn.RedactError(err, a.redisURL))
		}
		if opt.Password == "" {
			opt.Password = os.Getenv("REDIS_PASSWORD")
		}
		rdb = redisconn.NewClient(opt)
	}
	// HELLO without arguments needs no permission. A producer under the documented ACL, which
	// grants no PING, learns at once that Redis is unreachable or refuses its password, before
	// any command of its own.
	pctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if err := rdb.Do(pctx, "hello").Err(); err != nil {
		_ = rdb.Close()
		return nil, nil, fmt.Errorf("cannot reach Redis: %w", err)
	}
	knobs, err := faults.FromEnv(os.Getenv)
	if err != nil {
		_ = rdb.Close()
		return nil, nil, err
	}
	if h := knobs.Hook(); h != nil {
		rdb.AddHook(h)
	}
	c, err := client.New(client.Config{
		Client:          rdb,
		Keyspace:        topics.Keyspace{Prefix: a.prefix, Partitions: map[string]int{"*": a.parts}},
		ScheduleHorizon: a.horizon,
		Errors: func(err error) {
			fmt.Fprintf(a.stderr, "producer: %v (retrying)\n", err)
		},
		Flight: flight.Config{AnswerAfterScript: knobs.AnswerAfterScript},
	})
	if err != nil {
		_ = rdb.Close()
		return nil, nil, err
	}
	return rdb, c, nil
}

// splitList splits a comma-separated list, dropping empty items.
func splitList(s string) []string { return fdcli.SplitList(s) }
