// Command chaos runs Flightdeck's seeded fault-injection run, as `make chaos` does.
//
// It starts its own redis-server with AOF, several consumer processes and a producer, and
// injects faults at random times. The faults are SIGKILL and SIGSTOP of consumers, restarts
// under the same name, every consumer down past the flights' TTLs, deleted flight records,
// owners paused for less than their lease, consumers and cancellers that crash between a
// script and its answers, and Redis restarts and pauses. The first faults inject every kind
// once, in a seeded order.
//
// With --cluster it runs on its own 6-node Redis Cluster instead. It kills masters, so that
// a replica is promoted and the killed node rejoins as a replica, and moves slots to a new
// master and back while flights run. With --sentinel it runs on its own Sentinel deployment
// of a master, a replica and three sentinels. It kills the master, the sentinels promote the
// replica, and the killed server comes back as the new replica. --durability replicated
// makes every claim and outcome wait for the replica. With --archive every consumer gets a
// private PostgreSQL as its durable archive, and now and then Redis loses all its data in a
// redis-data-loss fault. Keys whose outcome the archive held must not run the model again.
//
// It prints the figures as a table and a JSON line, and exits 1 on any violation of the
// checker's rules.
//
//	chaos [--seed 1] [--duration 5m] [--consumers 3] [--keys 20] [--rate 20] [--cluster | --sentinel [--durability replicated]] [--archive] [--out DIR]
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/flightdeck-ai/flightdeck/internal/chaos"
	"github.com/flightdeck-ai/flightdeck/internal/cli"
)

// quietRedis drops go-redis's own log lines, such as dial failures while Redis is down on purpose.
type quietRedis struct{}

func (quietRedis) Printf(context.Context, string, ...any) {}

func main() {
	os.Exit(run(os.Args[1:]))
}

func run(args []string) int {
	fs := flag.NewFlagSet("chaos", flag.ContinueOnError)
	var cfg chaos.Config
	fs.Uint64Var(&cfg.Seed, "seed", 1, "seed of every random choice (faults, keys, their behaviour)")
	fs.DurationVar(&cfg.Duration, "duration", 5*time.Minute, "how long tasks are produced and faults injected")
	fs.IntVar(&cfg.Consumers, "consumers", 3, "consumer processes (at least 2)")
	fs.IntVar(&cfg.Keys, "keys", 20, "keys live at any time (each receives tasks for --key-life)")
	fs.DurationVar(&cfg.KeyLife, "key-life", 10*time.Second, "how long a key receives tasks")
	fs.Float64Var(&cfg.Rate, "rate", 20, "producer sends per second (a tenth are bursts of 2-4 duplicates)")
	fs.DurationVar(&cfg.FaultEvery, "fault-every", 0, "mean gap between faults (default 5s, less for runs too short to inject every kind at that pace)")
	fs.DurationVar(&cfg.Drain, "drain", 2*time.Minute, "after the faults, how long to wait for every task to be answered")
	fs.StringVar(&cfg.Out, "out", "", "directory for logs, the AOF, history.json and report.json (default: a new temp dir)")
	fs.BoolVar(&cfg.RedisCluster, "cluster", false, "run on its own Redis Cluster (3 masters + 3 replicas) and kill masters (cluster-master-kill); the single-node Redis restart/pause faults are skipped")
	fs.BoolVar(&cfg.Sentinel, "sentinel", false, "run on its own Redis Sentinel deployment (a master, a replica, 3 sentinels) and kill the master (sentinel-master-kill); the single-node Redis restart/pause faults are skipped")
	fs.StringVar(&cfg.Durability, "durability", "", "the stages' durability: async (the default) or replicated (each claim and outcome waits for a replica)")
	fs.BoolVar(&cfg.Archive, "archive", false, "start a private PostgreSQL as every consumer's archive (--archive URL) and, on the single node, inject redis-data-loss (Redis SIGKILLed, its data deleted, started empty)")
	fs.StringVar(&cfg.ConsumerBin, "consumer-bin", "", "a built consumer binary (default: go build ./cmd/consumer)")
	fs.StringVar(&cfg.ProducerBin, "producer-bin", "", "a built producer binary, for its cancel command (default: go build ./cmd/producer)")
	quiet := fs.Bool("quiet", false, "no progress lines, only the figures")
	maxV := fs.Int("max-violations", 50, "violations printed (all are in report.json)")
	recheck := fs.String("recheck", "", "check a saved history.json again instead of running")
	version := fs.Bool("version", false, "print the version and exit")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2 // the flag package printed the problem
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(os.Stderr, "chaos: unexpected argument %q (flags only; see --help)\n", fs.Arg(0))
		return 2
	}
	if *version {
		fmt.Println(cli.Version("chaos"))
		return 0
	}
	if *recheck != "" {
		return recheckFile(*recheck, cfg, *maxV)
	}
	if cfg.Sentinel && cfg.RedisCluster {
		fmt.Fprintln(os.Stderr, "chaos: --sentinel and --cluster are two kinds of Redis: pass one")
		return 2
	}
	if d := cfg.Durability; d != "" && d != "async" && d != "replicated" {
		fmt.Fprintf(os.Stderr, "chaos: --durability %q: want async or replicated\n", d)
		return 2
	}
	if !*quiet {
		cfg.Log = os.Stderr
	}
	redis.SetLogger(quietRedis{})
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	o, err := chaos.Run(ctx, cfg)
	if err != nil {
		fmt.Fprintln(os.Stderr, "chaos:", err)
		return 2
	}
	o.WriteTable(os.Stdout, cfg, *maxV)
	fmt.Println(o.JSONLine(cfg))
	fmt.Fprintf(os.Stderr, "history and report in %s\n", o.Out)
	if n := o.Report.Figures.Violations; n > 0 {
		fmt.Fprintf(os.Stderr, "chaos: %d violations\n", n)
		return 1
	}
	return 0
}

// recheckFile runs the checker over a history saved by an earlier run.
func recheckFile(path string, cfg chaos.Config, maxV int) int {
	b, err := os.ReadFile(path)
	if err != nil {
		fmt.Fprintln(os.Stderr, "chaos:", err)
		return 2
	}
	var h chaos.History
	if err := json.Unmarshal(b, &h); err != nil {
		fmt.Fprintln(os.Stderr, "chaos:", path, err)
		return 2
	}
	o := &chaos.Outcome{History: h, Report: chaos.Check(h), Out: filepath.Dir(path)}
	o.WriteTable(os.Stdout, cfg, maxV)
	fmt.Println(o.JSONLine(cfg))
	if o.Report.Figures.Violations > 0 {
		return 1
	}
	return 0
}
