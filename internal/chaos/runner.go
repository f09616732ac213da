package chaos

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/flightdeck-ai/flightdeck/flight"
	"github.com/flightdeck-ai/flightdeck/topics"
)

// Config configures a chaos run. Zero fields take the defaults named.
type Config struct {
	// Seed seeds every random choice of the run (faults, keys, their behaviour). Defaults to 1.
	Seed uint64
	// Duration is how long tasks are produced and faults injected. Defaults to 5 min.
	Duration time.Duration
	// Consumers is the number of consumer processes. Defaults to 3.
	Consumers int
	// Keys is the number of keys live at any time. Defaults to 20.
	Keys int
	// KeyLife is how long a key receives tasks. Defaults to 10 s.
	KeyLife time.Duration
	// Rate is the number of producer sends per second (a tenth of them bursts of 2-4
	// duplicates). Defaults to 20.
	Rate float64
	// FaultEvery is the mean gap between faults (drawn in [0.4, 1.6] x it). Defaults to 5 s.
	FaultEvery time.Duration
	// Drain bounds the wait, after the last fault, for every task to be answered and nothing
	// to be pending. Defaults to 2 min.
	Drain time.Duration
	// Out is the directory for logs, the AOF, the history and the report. Defaults to a new
	// directory under os.TempDir().
	Out string
	// ConsumerBin is a built consumer binary; empty builds ./cmd/consumer with `go build`.
	ConsumerBin string
	// RedisCluster runs the run on its own Redis Cluster (3 masters + 3 replicas, AOF with
	// fsync always, cluster-node-timeout 2 s) instead of one redis-server: the consumers get
	// the cluster REDIS_URL, the producer and the checker a cluster client, and the
	// cluster-master-kill fault is drawn. The single-node Redis faults (restart, pause) are
	// skipped in cluster mode.
	RedisCluster bool
	// Cluster, when set, is an external cluster to run on instead (implies cluster mode).
	// Nil with RedisCluster: the run starts its own.
	Cluster Cluster
	// Log receives progress lines. Defaults to io.Discard.
	Log io.Writer
}

// Stage timings of the run: a short lease so that takeovers happen within seconds.
const (
	heartbeatInterval = 200 * time.Millisecond
	lease             = 1200 * time.Millisecond
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
		c.FaultEvery = 5 * time.Second
	}
	if c.Drain == 0 {
		c.Drain = 2 * time.Minute
	}
	if c.Log == nil {
		c.Log = io.Discard
	}
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

// Run performs a chaos run and checks its history. An error means the run itself could not
// be carried out (no redis-server, the build failed); violations are in the report.
func Run(ctx context.Context, cfg Config) (*Outcome, error) {
	cfg.setDefaults()
	if cfg.Consumers < 2 {
		return nil, errors.New("chaos: at least 2 consumers are needed (a fault always leaves one untouched)")
	}
	if cfg.Keys < 1 || cfg.Rate <= 0 {
		return nil, errors.New("chaos: keys and rate must be positive")
	}
	began := time.Now()
	logf := func(format string, args ...any) {
		fmt.Fprintf(cfg.Log, "%s  %s\n", time.Now().Format("15:04:05.000"), fmt.Sprintf(format, args...))
	}
	out := cfg.Out
	if out == "" {
		var err error
		if out, err = os.MkdirTemp("", fmt.Sprintf("flightdeck-chaos-seed%d-", cfg.Seed)); err != nil {
			return nil, err
		}
	}
	dirs := map[string]string{}
	for _, d := range []string{"logs", "redis", "tmp", "bin"} {
		dirs[d] = filepath.Join(out, d)
		if err := os.MkdirAll(dirs[d], 0o755); err != nil {
			return nil, err
		}
	}

	bin := cfg.ConsumerBin
	if bin == "" {
		bin = filepath.Join(dirs["bin"], "consumer")
		logf("building the consumer: %s", bin)
		if err := buildConsumer(ctx, bin); err != nil {
			return nil, err
		}
	}
	stageFile := filepath.Join(out, "stages.yaml")
	if err := os.WriteFile(stageFile, []byte(stageYAML(cfg.resultTTL())), 0o644); err != nil {
		return nil, err
	}

	var (
		rs        *redisServer
		rdb       redis.UniversalClient
		redisURL  string
		waitRedis func(d time.Duration) bool
	)
	if cfg.RedisCluster || cfg.Cluster != nil {
		if cfg.Cluster == nil {
			lc, err := startCluster(dirs["redis"], logf)
			if err != nil {
				return nil, err
			}
			defer lc.stop(syscall.SIGKILL)
			cfg.Cluster = lc
			logf("redis cluster of %d nodes (%d masters + replicas; appendonly, fsync always) in %s: %s",
				len(lc.nodes), lc.Masters(), dirs["redis"], lc.URL())
		}
		redisURL = cfg.Cluster.URL()
		cc, err := clusterClient(redisURL)
		if err != nil {
			return nil, err
		}
		defer cc.Close()
		rdb = cc
		cl := cfg.Cluster
		waitRedis = func(d time.Duration) bool { return clusterReady(cl, cc, d) }
	} else {
		var err error
		if rs, err = startRedis(dirs["redis"]); err != nil {
			return nil, err
		}
		defer rs.stop(syscall.SIGKILL)
		logf("redis-server on %s (appendonly, fsync always) in %s", rs.Addr(), dirs["redis"])
		c := redis.NewClient(&redis.Options{Addr: rs.Addr(), DialTimeout: time.Second, ReadTimeout: 2 * time.Second,
			WriteTimeout: 2 * time.Second, ContextTimeoutEnabled: true})
		defer c.Close()
		rdb, redisURL = c, rs.URL()
		waitRedis = func(d time.Duration) bool {
			deadline := time.Now().Add(d)
			for time.Now().Before(deadline) {
				if rs.running() && rs.ping() == nil {
					return true
				}
				time.Sleep(50 * time.Millisecond)
			}
			return false
		}
	}
	ks := topics.Keyspace{}
	coord, _ := flight.NewCoordinator(flight.Config{Client: rdb, Keyspace: ks})

	sup := &supervisor{bin: bin, config: stageFile, redisURL: redisURL, logDir: dirs["logs"], tmpDir: dirs["tmp"],
		grace: consumerGrace, waitRedis: waitRedis}
	defer sup.shutdown()
	if err := sup.start(cfg.Consumers); err != nil {
		return nil, err
	}
	if err := sup.waitRunning(30 * time.Second); err != nil {
		return nil, err
	}
	logf("%d consumers running; producing for %v at %.0f sends/s over %d live keys (key life %v)",
		cfg.Consumers, cfg.Duration, cfg.Rate, cfg.Keys, cfg.KeyLife)

	prod := &producer{w: topics.Writer{Client: rdb, Keyspace: ks}, rng: rand.New(rand.NewPCG(cfg.Seed, 1)),
		seed: cfg.Seed, keys: cfg.Keys, keyLife: cfg.KeyLife, rate: cfg.Rate, keyNames: map[int]string{}}
	inj := &injector{rng: rand.New(rand.NewPCG(cfg.Seed, 2)), sup: sup, redis: rs, cluster: cfg.Cluster,
		coord: coord, prod: prod, lease: lease, every: cfg.FaultEvery, logf: logf}
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
				logf("%v elapsed: %d tasks sent, %d faults", time.Since(start).Round(time.Second), len(enq), len(inj.list()))
			}
		}
	}()
	inj.run(ctx, end)
	<-prodDone
	<-progressDone
	if err := ctx.Err(); err != nil {
		return nil, err
	}

	// Recovery: Redis up, every consumer running and continued; then drain.
	if rs != nil {
		rs.signal(syscall.SIGCONT)
	}
	if !waitRedis(30 * time.Second) {
		return nil, errors.New("chaos: redis-server does not answer after the faults")
	}
	enqueues, keys := prod.history()
	logf("faults over (%d injected); draining: waiting up to %v for %d tasks", len(inj.list()), cfg.Drain, len(enqueues))
	drained := drain(ctx, rdb, ks, enqueues, cfg.Drain, logf)
	// Let late duplicates and releases settle before the snapshot.
	time.Sleep(2 * time.Second)
	if !drained {
		logf("drain timed out: the checker reports what is missing")
	}

	// Snapshot.
	h := History{Enqueues: enqueues, ResultTTL: cfg.resultTTL(), Faults: inj.list()}
	sctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var err error
	if h.Events, err = readAllEvents(sctx, rdb, ks); err != nil {
		return nil, fmt.Errorf("chaos: read events: %w", err)
	}
	h.Flights = map[string]Flight{}
	sort.Strings(keys)
	for _, k := range keys {
		m, err := coord.Get(sctx, k)
		switch {
		case errors.Is(err, flight.ErrNotFound):
			h.Flights[k] = Flight{}
		case err != nil:
			return nil, fmt.Errorf("chaos: read flight %s: %w", k, err)
		default:
			h.Flights[k] = Flight{Found: true, Status: string(m.Status), OwnerToken: m.OwnerToken, Parked: len(m.Parked),
				ResultStored: m.ResultTTL > 0 || m.ResultTTL == -1}
		}
	}
	if h.DeadLetters, err = readDeadLetters(sctx, rdb, ks); err != nil {
		return nil, fmt.Errorf("chaos: read dead letters: %w", err)
	}
	if h.Backlog, err = backlog(sctx, rdb, ks); err != nil {
		return nil, fmt.Errorf("chaos: read backlog: %w", err)
	}
	h.SnapshotAt = time.Now()
	redisDiagnostics(sctx, rdb, filepath.Join(out, "redis-diagnostics.txt"))

	sup.shutdown()
	if rs != nil {
		rs.stop(syscall.SIGTERM)
	}
	h.Exits = sup.exitList()
	for _, path := range sup.logFiles() {
		f, err := os.Open(path)
		if err != nil {
			return nil, err
		}
		runs, comps, st, err := ParseLog(f)
		f.Close()
		if err != nil {
			return nil, fmt.Errorf("chaos: parse %s: %w", path, err)
		}
		h.Runs = append(h.Runs, runs...)
		h.Completions = append(h.Completions, comps...)
		h.Logs.add(st)
	}

	o := &Outcome{History: h, Out: out, Elapsed: time.Since(began), Unavailable: map[string]string{}}
	if cfg.Cluster == nil {
		o.Unavailable[FaultMasterKill] = "single-node run: pass --cluster (chaos.Config.RedisCluster) for a Redis Cluster"
	} else {
		for _, k := range []string{FaultRedisTerm, FaultRedisKill, FaultRedisPause} {
			o.Unavailable[k] = "single-node Redis fault, skipped in cluster mode (cluster-master-kill kills a node instead)"
		}
	}
	o.Report = Check(h)
	if err := writeJSON(filepath.Join(out, "history.json"), h); err != nil {
		return nil, err
	}
	if err := writeJSON(filepath.Join(out, "report.json"), o.Report); err != nil {
		return nil, err
	}
	return o, nil
}

func stageYAML(resultTTL time.Duration) string {
	var b strings.Builder
	b.WriteString("stages:\n")
	for _, s := range chaosStages {
		fmt.Fprintf(&b, "  %s:\n    heartbeatInterval: %v\n    lease: %v\n    resultTTL: %v\n",
			s, heartbeatInterval, lease, resultTTL)
	}
	return b.String()
}

// buildConsumer builds ./cmd/consumer of the module the working directory is in.
func buildConsumer(ctx context.Context, bin string) error {
	gomod, err := exec.CommandContext(ctx, "go", "env", "GOMOD").Output()
	if err != nil {
		return fmt.Errorf("chaos: go env GOMOD: %w", err)
	}
	root := filepath.Dir(strings.TrimSpace(string(gomod)))
	if root == "." || root == "" || strings.HasSuffix(strings.TrimSpace(string(gomod)), os.DevNull) {
		return errors.New("chaos: run inside the flightdeck module (or pass the consumer binary)")
	}
	cmd := exec.CommandContext(ctx, "go", "build", "-o", bin, "./cmd/consumer")
	cmd.Dir = root
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("chaos: go build ./cmd/consumer: %w\n%s", err, out)
	}
	return nil
}

// drain waits until every surely enqueued task has an event and no entry is pending or
// undelivered, or until timeout.
func drain(ctx context.Context, rdb redis.UniversalClient, ks topics.Keyspace, enq []Enqueue, timeout time.Duration, logf func(string, ...any)) bool {
	want := map[string]bool{}
	for _, e := range enq {
		if !e.Unsure {
			want[e.TaskID] = true
		}
	}
	from := map[string]string{}
	for _, s := range chaosStages {
		from[ks.Results(s)] = "0"
	}
	deadline := time.Now().Add(timeout)
	lastLog := time.Now()
	for {
		for {
			evs, _, err := topics.ReadEvents(ctx, rdb, from, 5000, -1)
			if err != nil || len(evs) == 0 {
				break
			}
			for _, ev := range evs {
				from[ev.Stream] = ev.ID
				delete(want, ev.Event.TaskID)
			}
		}
		var pending int64
		if len(want) == 0 {
			bl, err := backlog(ctx, rdb, ks)
			if err != nil {
				pending = -1
			}
			for _, b := range bl {
				pending += b.Pending + max(b.Lag, 0)
			}
			if err == nil && pending == 0 {
				return true
			}
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return false
		}
		if time.Since(lastLog) > 10*time.Second {
			logf("draining: %d tasks without an event, %d entries pending", len(want), pending)
			lastLog = time.Now()
		}
		time.Sleep(500 * time.Millisecond)
	}
}

// readAllEvents reads both result streams from the start.
func readAllEvents(ctx context.Context, rdb redis.UniversalClient, ks topics.Keyspace) ([]topics.Event, error) {
	var out []topics.Event
	for _, s := range chaosStages {
		from := map[string]string{ks.Results(s): "0"}
		for {
			evs, _, err := topics.ReadEvents(ctx, rdb, from, 5000, -1)
			if err != nil {
				return nil, err
			}
			if len(evs) == 0 {
				break
			}
			for _, ev := range evs {
				from[ev.Stream] = ev.ID
				if ev.Err != nil {
					return nil, fmt.Errorf("undecodable event %s: %w", ev.ID, ev.Err)
				}
				out = append(out, ev.Event)
			}
		}
	}
	return out, nil
}

// readDeadLetters reads both dead-letter streams.
func readDeadLetters(ctx context.Context, rdb redis.UniversalClient, ks topics.Keyspace) ([]DeadLetter, error) {
	var out []DeadLetter
	for _, s := range chaosStages {
		msgs, err := rdb.XRange(ctx, ks.DLQ(s), "-", "+").Result()
		if err != nil {
			return nil, err
		}
		for _, m := range msgs {
			str := func(k string) string { v, _ := m.Values[k].(string); return v }
			d := DeadLetter{Stage: s, Reason: str(topics.FieldReason), Detail: str(topics.FieldDetail),
				Consumer: str(topics.FieldConsumer), At: m.ID}
			if ms, _, ok := strings.Cut(m.ID, "-"); ok {
				if v, err := strconv.ParseInt(ms, 10, 64); err == nil {
					d.At = time.UnixMilli(v).UTC().Format("15:04:05.000")
				}
			}
			var t struct {
				TaskID string `json:"taskId"`
			}
			if json.Unmarshal([]byte(str(topics.FieldPayload)), &t) == nil {
				d.TaskID = t.TaskID
			}
			out = append(out, d)
		}
	}
	return out, nil
}

// backlog reads each task stream's pending count and lag in group flightdeck.
func backlog(ctx context.Context, rdb redis.UniversalClient, ks topics.Keyspace) ([]Backlog, error) {
	var out []Backlog
	for _, s := range chaosStages {
		b := Backlog{Stage: s}
		groups, err := rdb.XInfoGroups(ctx, ks.Tasks(s)).Result()
		if err != nil && !strings.Contains(err.Error(), "no such key") {
			return nil, err
		}
		for _, g := range groups {
			if g.Name != topics.ConsumerGroup {
				continue
			}
			b.Pending, b.Lag = g.Pending, g.Lag
			// The lag XINFO GROUPS reports derives from the group's entries-read counter,
			// which Redis 7.0 does not keep in step on replicas (redis/redis#12898, fixed in
			// later releases): after a cluster failover the promoted replica reports a lag of
			// entries long delivered. Count the undelivered entries instead.
			if g.Lag != 0 {
				undelivered, err := rdb.XRangeN(ctx, ks.Tasks(s), "("+g.LastDeliveredID, "+", 1_000_000).Result()
				if err != nil {
					return nil, err
				}
				b.Lag = int64(len(undelivered))
			}
		}
		out = append(out, b)
	}
	return out, nil
}

// redisDiagnostics writes the server's command statistics and slow log (since its last
// restart) for a look at where Redis spent its time; best effort.
func redisDiagnostics(ctx context.Context, rdb redis.UniversalClient, path string) {
	var b strings.Builder
	if s, err := rdb.Info(ctx, "commandstats", "stats", "persistence", "cpu").Result(); err == nil {
		b.WriteString(s)
	}
	if entries, err := rdb.SlowLogGet(ctx, 50).Result(); err == nil {
		b.WriteString("\n# slowlog (last 50 since the last restart)\n")
		for _, e := range entries {
			fmt.Fprintf(&b, "%s %8dus %s\n", e.Time.Format("15:04:05"), e.Duration.Microseconds(), clip([]byte(strings.Join(e.Args, " "))))
		}
	}
	_ = os.WriteFile(path, []byte(b.String()), 0o644)
}

func writeJSON(path string, v any) error {
	b, err := json.MarshalIndent(v, "", " ")
	if err != nil {
		return err
	}
	return os.WriteFile(path, b, 0o644)
}
