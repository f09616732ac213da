package chaos

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/flightdeck-ai/flightdeck/archive/postgres"
	"github.com/flightdeck-ai/flightdeck/flight"
	"github.com/flightdeck-ai/flightdeck/internal/broker"
	"github.com/flightdeck-ai/flightdeck/topics"
)

// Config configures a chaos run. Zero fields take the defaults named.
type Config struct {
	// Seed seeds every random choice of the run: faults, keys and their behaviour. Defaults to 1.
	Seed uint64
	// Duration is how long tasks are produced and faults injected. Defaults to 5 min.
	Duration time.Duration
	// Consumers is the number of consumer processes. Defaults to 3.
	Consumers int
	// Keys is the number of keys live at any time. Defaults to 20.
	Keys int
	// KeyLife is how long a key receives tasks. Defaults to 10 s.
	KeyLife time.Duration
	// Rate is the number of producer sends per second, a tenth of them bursts of 2-4
	// duplicates. Defaults to 20.
	Rate float64
	// FaultEvery is the mean gap between faults, each gap drawn between 0.4 and 1.6 times
	// it. Defaults to 5 s, less for short runs, so that the first round of every fault kind
	// once fits in Duration.
	FaultEvery time.Duration
	// Drain bounds the wait, after the last fault, for every task to be answered and nothing
	// to be pending. Defaults to 2 min.
	Drain time.Duration
	// Out is the directory for logs, the AOF, the history and the report. Defaults to a new
	// directory under os.TempDir.
	Out string
	// ConsumerBin is a built consumer binary. Empty builds ./cmd/consumer with `go build`.
	ConsumerBin string
	// ProducerBin is a built producer binary, whose cancel command the canceller-crash fault
	// runs. Empty builds ./cmd/producer with `go build`.
	ProducerBin string
	// RedisCluster runs on the run's own Redis Cluster of 3 masters and 3 replicas, with AOF,
	// fsync always and cluster-node-timeout 2 s, instead of one redis-server. It gives the
	// consumers the cluster REDIS_URL and the producer and checker a cluster client, draws the
	// cluster-master-kill fault and skips the single-node Redis restart and pause faults.
	RedisCluster bool
	// Cluster, when set, is an external cluster to run on instead, which implies cluster
	// mode. When it is nil and RedisCluster is set, the run starts its own.
	Cluster Cluster
	// Sentinel runs on the run's own Redis Sentinel deployment instead of one redis-server:
	// a master and a replica with AOF and fsync always, and three sentinels. The consumers
	// and the producer get the failover URL, the sentinel-master-kill fault is drawn and the
	// single-node Redis faults are skipped.
	Sentinel bool
	// Durability is the stages' durability: "async", the default, or "replicated", where
	// each claim and outcome waits for a replica. "replicated" is meant for Sentinel runs.
	Durability string
	// Archive starts the run's own PostgreSQL on a free loopback port and gives it to every
	// consumer as its durable archive with --archive URL. On the run's own single node it
	// also draws the redis-data-loss fault, which SIGKILLs Redis, deletes its data and starts
	// it again empty, and the checker's rule 7 holds the archive to its promise.
	Archive bool
	// Log receives progress lines. Defaults to io.Discard.
	Log io.Writer
}

// Stage timings of the run. A short lease makes takeovers happen within seconds. Short
// flight TTLs make an outage of every consumer outlive a flight's records within seconds.
// runningTTL stays above maxLatency, the longest simulated model call.
const (
	heartbeatInterval = 200 * time.Millisecond
	lease             = 1200 * time.Millisecond
	runningTTL        = 4 * time.Second
	failureTTL        = 2 * time.Second
	consumerGrace     = 3 * time.Second
)

func (c *Config) setDefaults() {
	if c.Seed == 0 {
		c.Seed = 1
	}
	if c.Duration == 0 {
		c.Duration = 5 * time.Minute
	}
	if c.Consumers == 0 {
		c.Consumers = 3
	}
	if c.Keys == 0 {
		c.Keys = 20
	}
	if c.KeyLife == 0 {
		c.KeyLife = 10 * time.Second
	}
	if c.Rate == 0 {
		c.Rate = 20
	}
	if c.FaultEvery == 0 {
		kinds := drawableKinds(c.mode(), c.Archive)
		d := c.Duration
		if slices.Contains(kinds, FaultRedisDataLoss) {
			d -= dataLossBlocks // the injector waits for the loss and the resends
		}
		c.FaultEvery = defaultFaultEvery(d, len(kinds))
	}
	if c.Drain == 0 {
		c.Drain = 2 * time.Minute
	}
	if c.Log == nil {
		c.Log = io.Discard
	}
}

// mode is the shape of the run's Redis.
func (c *Config) mode() redisMode {
	switch {
	case c.Sentinel:
		return modeSentinel
	case c.RedisCluster || c.Cluster != nil:
		return modeCluster
	}
	return modeNode
}

// dataLossBlocks is about how long a redis-data-loss fault keeps the injector busy: the
// reads while Redis is paused, its 0.2-2 s down time and the resends.
const dataLossBlocks = 3 * time.Second

// defaultFaultEvery is 5 s, or less when the first round would not fit in d, but at least
// 1 s. The first round is kinds faults and their gaps, plus about 16 s that the faults
// themselves block the injector.
func defaultFaultEvery(d time.Duration, kinds int) time.Duration {
	return min(5*time.Second, max(time.Second, (d-16*time.Second)/time.Duration(kinds+1)))
}

// resultTTL outlives the run and its drain, so that every key's events must agree.
func (c *Config) resultTTL() time.Duration {
	return max(10*time.Minute, c.Duration+c.Drain+5*time.Minute)
}

// Outcome is a finished run: its report, history and where its files are.
type Outcome struct {
	Report  Report
	History History
	Out     string
	Elapsed time.Duration
	// Unavailable lists fault kinds the run could not inject, with the reason.
	Unavailable map[string]string
}

// env is what a run sets up before producing: its directories, Redis and consumers.
type env struct {
	cfg       Config
	out       string
	dirs      map[string]string
	logf      func(format string, args ...any)
	rs        *redisServer // nil in cluster mode
	rdb       redis.UniversalClient
	redisURL  string
	waitRedis func(time.Duration) bool
	// archiveURL and archive are the run's PostgreSQL archive set by Config.Archive. They are
	// empty and nil without it.
	archiveURL string
	archive    *postgres.Store
	closers    []func()
}

func (e *env) close() {
	for i := len(e.closers) - 1; i >= 0; i-- {
		e.closers[i]()
	}
}

// Run performs a chaos run and checks its history, whose violations are in the report. An
// error means the run itself could not be carried out, for example with no redis-server or
// a failed build.
func Run(ctx context.Context, cfg Config) (*Outcome, error) {
	cfg.setDefaults()
	if cfg.Consumers < 2 {
		return nil, errors.New("chaos: at least 2 consumers are needed (a fault always leaves one untouched)")
	}
	if cfg.Keys < 1 || cfg.Rate <= 0 {
		return nil, errors.New("chaos: keys and rate must be positive")
	}
	began := time.Now()
	e := &env{cfg: cfg, dirs: map[string]string{}, logf: func(format string, args ...any) {
		fmt.Fprintf(cfg.Log, "%s  %s\n", time.Now().Format("15:04:05.000"), fmt.Sprintf(format, args...))
	}}
	defer e.close()
	if err := e.prepare(ctx); err != nil {
		return nil, err
	}
	if err := e.startRedis(); err != nil {
		return nil, err
	}
	if err := e.startArchive(ctx); err != nil {
		return nil, err
	}
	cfg = e.cfg // with the built binaries and the cluster
	ks := topics.Keyspace{}
	coord, err := flight.NewCoordinator(flight.Config{Client: e.rdb, Keyspace: ks})
	if err != nil {
		return nil, fmt.Errorf("chaos: coordinator: %w", err)
	}

	sup := &supervisor{bin: cfg.ConsumerBin, config: filepath.Join(e.out, "stages.yaml"), redisURL: e.redisURL,
		logDir: e.dirs["logs"], tmpDir: e.dirs["tmp"], spoolDir: e.dirs["spool"], archiveURL: e.archiveURL,
		grace: consumerGrace, waitRedis: e.waitRedis, logf: e.logf}
	defer sup.shutdown()
	if err := sup.start(cfg.Consumers); err != nil {
		return nil, err
	}
	if err := sup.waitRunning(30 * time.Second); err != nil {
		return nil, err
	}
	e.logf("%d consumers running (spool %s); producing for %v at %.0f sends/s over %d live keys (key life %v), a fault every ~%v",
		cfg.Consumers, e.dirs["spool"], cfg.Duration, cfg.Rate, cfg.Keys, cfg.KeyLife, cfg.FaultEvery)

	prod := &producer{w: broker.Writer{Client: e.rdb, Keyspace: ks}, rng: rand.New(rand.NewPCG(cfg.Seed, 1)),
		seed: cfg.Seed, keys: cfg.Keys, keyLife: cfg.KeyLife, rate: cfg.Rate, keyNames: map[int]string{}}
	inj := &injector{rng: rand.New(rand.NewPCG(cfg.Seed, 2)), sup: sup, redis: e.rs, cluster: cfg.Cluster, mode: cfg.mode(),
		coord: coord, rdb: e.rdb, ks: ks, prod: prod, lease: lease, heartbeat: heartbeatInterval,
		flightTTL: runningTTL + failureTTL, every: cfg.FaultEvery, logf: e.logf,
		canceller: &canceller{bin: cfg.ProducerBin, redisURL: e.redisURL, tmpDir: e.dirs["tmp"]}}
	if e.archive != nil {
		inj.losses = &lossRecorder{store: e.archive}
	}
	start := time.Now()
	end := start.Add(cfg.Duration)
	prodDone := make(chan struct{})
	go func() { defer close(prodDone); prod.run(ctx, start, end) }()
	progressDone := make(chan struct{})
	go func() {
		defer close(progressDone)
		for {
			select {
			case <-prodDone:
				return
			case <-time.After(30 * time.Second):
				enq, _ := prod.history()
				e.logf("%v elapsed: %d tasks sent, %d faults", time.Since(start).Round(time.Second), len(enq), len(inj.list()))
			}
		}
	}()
	inj.run(ctx, end)
	<-prodDone
	<-progressDone
	if err := ctx.Err(); err != nil {
		return nil, err
	}

	// Recovery: Redis up, every consumer running and continued. Then drain.
	if e.rs != nil {
		e.rs.signal(syscall.SIGCONT)
	}
	if !e.waitRedis(30 * time.Second) {
		return nil, errors.New("chaos: redis-server does not answer after the faults")
	}
	enqueues, keys := prod.history()
	losses, lossEvents, lossDead := inj.losses.history()
	want := awaited(enqueues, losses, lossEvents)
	e.logf("faults over (%d injected); draining: waiting up to %v for %d tasks", len(inj.list()), cfg.Drain, len(want))
	drained := drain(ctx, e.rdb, ks, want, cfg.Drain, e.logf)
	// Let late duplicates and releases settle before the snapshot.
	time.Sleep(2 * time.Second)
	if !drained {
		e.logf("drain timed out: the checker reports what is missing")
	}

	h := History{Enqueues: enqueues, ResultTTL: cfg.resultTTL(), RunningTTL: runningTTL, FailureTTL: failureTTL,
		Faults: inj.list(), Cancels: inj.cancelList()}
	if err := e.snapshot(coord, ks, keys, &h); err != nil {
		return nil, err
	}
	// What Redis held before each data loss comes first, in order.
	h.DataLosses = losses
	h.Events = append(lossEvents, h.Events...)
	h.DeadLetters = append(lossDead, h.DeadLetters...)
	sup.shutdown()
	if e.rs != nil {
		e.rs.stop(syscall.SIGTERM)
	}
	h.Exits, h.InjectedCrashes = sup.exitList(), sup.injectedList()
	for _, path := range sup.logFiles() {
		if err := h.addLog(path); err != nil {
			return nil, err
		}
	}

	o := &Outcome{History: h, Out: e.out, Elapsed: time.Since(began), Unavailable: map[string]string{}}
	switch cfg.mode() {
	case modeNode:
		o.Unavailable[FaultMasterKill] = "single-node run: pass --cluster (chaos.Config.RedisCluster) for a Redis Cluster"
		o.Unavailable[FaultReshard] = o.Unavailable[FaultMasterKill]
		o.Unavailable[FaultSentinelKill] = "single-node run: pass --sentinel (chaos.Config.Sentinel) for a Sentinel deployment"
	case modeCluster:
		o.Unavailable[FaultSentinelKill] = "cluster run: pass --sentinel (chaos.Config.Sentinel) for a Sentinel deployment"
		if _, ok := cfg.Cluster.(Resharder); !ok {
			o.Unavailable[FaultReshard] = "an external cluster: only the run's own cluster adds and removes nodes"
		}
		for _, k := range []string{FaultRedisTerm, FaultRedisKill, FaultRedisPause, FaultRedisDataLoss} {
			o.Unavailable[k] = "single-node Redis fault, skipped in cluster mode (cluster-master-kill kills a node instead)"
		}
	case modeSentinel:
		o.Unavailable[FaultMasterKill] = "Sentinel run: pass --cluster (chaos.Config.RedisCluster) for a Redis Cluster"
		o.Unavailable[FaultReshard] = o.Unavailable[FaultMasterKill]
		for _, k := range []string{FaultRedisTerm, FaultRedisKill, FaultRedisPause, FaultRedisDataLoss} {
			o.Unavailable[k] = "single-node Redis fault, skipped in Sentinel mode (sentinel-master-kill kills the master instead)"
		}
	}
	if !cfg.Archive {
		o.Unavailable[FaultRedisDataLoss] = "needs the archive: pass --archive (chaos.Config.Archive)"
	}
	o.Report = Check(h)
	if err := writeJSON(filepath.Join(e.out, "history.json"), h); err != nil {
		return nil, err
	}
	if err := writeJSON(filepath.Join(e.out, "report.json"), o.Report); err != nil {
		return nil, err
	}
	return o, nil
}

// startArchive starts the run's PostgreSQL and opens the archive on it when Config.Archive is set.
func (e *env) startArchive(ctx context.Context) error {
	if !e.cfg.Archive {
		return nil
	}
	pg, err := startPostgres(ctx, filepath.Join(e.out, "postgres.log"))
	if err != nil {
		return err
	}
	e.closers = append(e.closers, pg.stop)
	store, err := postgres.Open(ctx, postgres.Config{URL: pg.URL(), Deployment: topics.DefaultPrefix})
	if err != nil {
		return fmt.Errorf("chaos: open the archive: %w", err)
	}
	e.closers = append(e.closers, store.Close)
	e.archive, e.archiveURL = store, pg.URL()
	e.logf("archive: PostgreSQL on %s (log %s)", pg.URL(), filepath.Join(e.out, "postgres.log"))
	return nil
}

// awaited returns the tasks the drain waits for: every task surely enqueued, except those
// answered before a data loss and those unanswered at one. The events of the first were
// read at the loss. The entries of the second went with Redis, so they may never be answered.
func awaited(enq []Enqueue, losses []DataLoss, lossEvents []topics.Event) map[string]bool {
	want := map[string]bool{}
	for _, e := range enq {
		if !e.Unsure {
			want[e.TaskID] = true
		}
	}
	for _, ev := range lossEvents {
		delete(want, ev.TaskID)
	}
	for _, l := range losses {
		for _, id := range l.Unanswered {
			delete(want, id)
		}
	}
	return want
}

// prepare makes the run's directories, builds the binaries it was not given and writes the
// stage file.
func (e *env) prepare(ctx context.Context) error {
	e.out = e.cfg.Out
	if e.out == "" {
		var err error
		if e.out, err = os.MkdirTemp("", fmt.Sprintf("flightdeck-chaos-seed%d-", e.cfg.Seed)); err != nil {
			return fmt.Errorf("chaos: %w", err)
		}
	}
	for _, d := range []string{"logs", "redis", "tmp", "bin", "spool"} {
		e.dirs[d] = filepath.Join(e.out, d)
		if err := os.MkdirAll(e.dirs[d], 0o755); err != nil {
			return fmt.Errorf("chaos: %w", err)
		}
	}
	for _, b := range []struct {
		bin *string
		pkg string
	}{{&e.cfg.ConsumerBin, "./cmd/consumer"}, {&e.cfg.ProducerBin, "./cmd/producer"}} {
		if *b.bin != "" {
			continue
		}
		*b.bin = filepath.Join(e.dirs["bin"], filepath.Base(b.pkg))
		e.logf("building %s: %s", b.pkg, *b.bin)
		if err := buildBinary(ctx, b.pkg, *b.bin); err != nil {
			return err
		}
	}
	stageFile := filepath.Join(e.out, "stages.yaml")
	if err := os.WriteFile(stageFile, []byte(stageYAML(e.cfg.resultTTL(), e.cfg.Durability)), 0o644); err != nil {
		return fmt.Errorf("chaos: %w", err)
	}
	return nil
}

// startRedis starts the run's redis-server, cluster or Sentinel deployment and its client.
func (e *env) startRedis() error {
	cfg := &e.cfg
	if cfg.Sentinel {
		ls, err := startSentinel(e.dirs["redis"], e.logf)
		if err != nil {
			return err
		}
		e.closers = append(e.closers, func() { ls.stop(syscall.SIGKILL) })
		cfg.Cluster = ls
		e.logf("redis sentinel deployment (appendonly, fsync always) in %s: %s", e.dirs["redis"], ls.sentinelSummary())
		c := sentinelFailoverClient(ls)
		e.closers = append(e.closers, func() { c.Close() })
		e.rdb, e.redisURL = c, ls.URL()
		e.waitRedis = ls.ready
		return nil
	}
	if cfg.RedisCluster || cfg.Cluster != nil {
		if cfg.Cluster == nil {
			lc, err := startCluster(e.dirs["redis"], e.logf)
			if err != nil {
				return err
			}
			e.closers = append(e.closers, func() { lc.stop(syscall.SIGKILL) })
			cfg.Cluster = lc
			e.logf("redis cluster of %d nodes (%d masters + replicas; appendonly, fsync always) in %s: %s",
				len(lc.nodes), lc.Masters(), e.dirs["redis"], lc.URL())
		}
		e.redisURL = cfg.Cluster.URL()
		cc, err := clusterClient(e.redisURL)
		if err != nil {
			return err
		}
		e.closers = append(e.closers, func() { cc.Close() })
		e.rdb = cc
		cl := cfg.Cluster
		e.waitRedis = func(d time.Duration) bool { return clusterReady(cl, cc, d) }
		return nil
	}
	rs, err := startRedis(e.dirs["redis"])
	if err != nil {
		return err
	}
	e.rs = rs
	e.closers = append(e.closers, func() { rs.stop(syscall.SIGKILL) })
	e.logf("redis-server on %s (appendonly, fsync always) in %s", rs.Addr(), e.dirs["redis"])
	c := redis.NewClient(&redis.Options{Addr: rs.Addr(), DialTimeout: time.Second, ReadTimeout: 2 * time.Second,
		WriteTimeout: 2 * time.Second, ContextTimeoutEnabled: true})
	e.closers = append(e.closers, func() { c.Close() })
	e.rdb, e.redisURL = c, rs.URL()
	e.waitRedis = func(d time.Duration) bool {
		deadline := time.Now().Add(d)
		for time.Now().Before(deadline) {
			if rs.running() && rs.ping() == nil {
				return true
			}
			time.Sleep(50 * time.Millisecond)
		}
		return false
	}
	return nil
}

// snapshot reads the events, the flights of keys, the dead letters and the backlog into h.
func (e *env) snapshot(coord *flight.Coordinator, ks topics.Keyspace, keys []string, h *History) error {
	sctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var err error
	if h.Events, err = readAllEvents(sctx, e.rdb, ks); err != nil {
		return fmt.Errorf("chaos: read events: %w", err)
	}
	h.Flights = map[string]Flight{}
	sort.Strings(keys)
	for _, k := range keys {
		m, err := coord.Get(sctx, k)
		switch {
		case errors.Is(err, flight.ErrNotFound):
			h.Flights[k] = Flight{}
		case err != nil:
			return fmt.Errorf("chaos: read flight %s: %w", k, err)
		default:
			h.Flights[k] = Flight{Found: true, Status: string(m.Status), OwnerToken: m.OwnerToken, Parked: len(m.Parked),
				ResultStored: m.ResultTTL > 0 || m.ResultTTL == -1}
		}
	}
	if h.DeadLetters, err = readDeadLetters(sctx, e.rdb, ks); err != nil {
		return fmt.Errorf("chaos: read dead letters: %w", err)
	}
	if h.Backlog, err = backlog(sctx, e.rdb, ks); err != nil {
		return fmt.Errorf("chaos: read backlog: %w", err)
	}
	h.SnapshotAt = time.Now()
	redisDiagnostics(sctx, e.rdb, filepath.Join(e.out, "redis-diagnostics.txt"))
	return nil
}

// addLog parses one consumer log file into h.
func (h *History) addLog(path string) error {
	f, err := os.Open(path)
	if err != nil {
		return fmt.Errorf("chaos: %w", err)
	}
	defer f.Close()
	p, err := ParseLog(f)
	if err != nil {
		return fmt.Errorf("chaos: parse %s: %w", path, err)
	}
	h.Runs = append(h.Runs, p.Runs...)
	h.Completions = append(h.Completions, p.Completions...)
	h.Failures = append(h.Failures, p.Failures...)
	h.Handovers = append(h.Handovers, p.Handovers...)
	h.ArchiveAnswers = append(h.ArchiveAnswers, p.ArchiveAnswers...)
	h.LookupFailures = append(h.LookupFailures, p.LookupFailures...)
	h.HeldAnswers = append(h.HeldAnswers, p.HeldAnswers...)
	h.Logs.add(p.Stats)
	return nil
}

// chaosLimiter is the limiter both chaos stages share: tight enough that bursts of owners
// wait for it (free retries, scheduled waits) while the run's faults strike.
const chaosLimiter = "  chaos:\n    requestsPerMinute: 300\n    concurrency: 8\n    burst: 2s\n"

// stageYAML is the stage file of the run: both chaos stages with its short timings and the
// shared limiter.
func stageYAML(resultTTL time.Duration, durability string) string {
	var b strings.Builder
	b.WriteString("limiters:\n" + chaosLimiter + "stages:\n")
	for _, s := range chaosStages {
		fmt.Fprintf(&b, "  %s:\n    heartbeatInterval: %v\n    lease: %v\n    runningTTL: %v\n    failureTTL: %v\n    resultTTL: %v\n    limiter: chaos\n",
			s, heartbeatInterval, lease, runningTTL, failureTTL, resultTTL)
		if durability != "" {
			fmt.Fprintf(&b, "    durability: %s\n", durability)
		}
	}
	return b.String()
}
