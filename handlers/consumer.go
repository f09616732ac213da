// Package handlers runs Flightdeck's consumers. It holds the watermill handlers that turn task
// messages into flight runs, the Consumer runtime with its stream subscribers, claim rule,
// liveness and graceful shutdown, and the stage policies. Model adapters live in
// handlers/model.
package handlers

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/rs/zerolog"

	"github.com/flightdeck-ai/flightdeck/archive"
	"github.com/flightdeck-ai/flightdeck/executor"
	"github.com/flightdeck-ai/flightdeck/flight"
	"github.com/flightdeck-ai/flightdeck/internal/broker"
	"github.com/flightdeck-ai/flightdeck/lua"
	"github.com/flightdeck-ai/flightdeck/stream"
	"github.com/flightdeck-ai/flightdeck/topics"
)

// Consumer reads the task streams of its stages in consumer group "flightdeck" and runs each
// task through its flight. Create it with NewConsumer and run it with Run.
type Consumer struct {
	cfg     Config
	log     zerolog.Logger
	rdb     redis.UniversalClient // handlers, scripts, events
	reads   redis.UniversalClient // the stream subscribers' reads and claims
	coord   *flight.Coordinator
	live    *liveness
	metrics *metrics
	// eviction watches Redis's maxmemory-policy.
	eviction *evictionWatch
	spool    *flight.Spool
	clients  []redis.UniversalClient
	batch    *lua.Batcher    // the handlers' flight calls on a single node, nil on a cluster
	archive  *archive.Writer // nil without Config.Archive
	procs    map[string]*processor
	limiters map[string]*flight.Limiter // by name, shared by the stages that name one
	subs     map[string]*stream.Subscriber
	life     *lifecycle
	stop     context.CancelFunc
	abandon  context.CancelCauseFunc
	started  chan struct{}
	breaker  *executor.Breaker
	stopped  atomic.Bool
}

// NewConsumer validates cfg and prepares a consumer. Nothing connects until Run. It opens and
// locks the consumer's spool in its deployment's directory under cfg.SpoolDir, adopting what
// dead processes of the deployment left there.
func NewConsumer(cfg Config) (*Consumer, error) {
	if err := cfg.setDefaults(); err != nil {
		return nil, err
	}
	cfg.Keyspace = Keyspace(cfg.Keyspace, cfg.Stages)
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	c := &Consumer{cfg: cfg, log: cfg.Logger.With().Str("consumer", cfg.Name).Logger(),
		metrics: newMetrics(cfg.Registry), procs: map[string]*processor{}, subs: map[string]*stream.Subscriber{},
		started: make(chan struct{})}
	c.breaker = executor.NewBreaker(cfg.Breaker, func(from, to string) {
		c.metrics.breaker.Set(map[string]float64{"closed": 0, "half-open": 1, "open": 2}[to])
		c.log.Warn().Str("from", from).Str("to", to).Msg("coordination circuit breaker changed state")
	})
	dir := flight.DeploymentSpoolDir(cfg.SpoolDir, cfg.Keyspace.Prefix, cfg.Deployment)
	sp, err := flight.OpenSpoolDir(dir, cfg.Name)
	if errors.Is(err, flight.ErrSpoolInUse) {
		return nil, fmt.Errorf("%w: a consumer named %q is running on this host (it holds the spool in %s); start this one under another name",
			ErrNameInUse, cfg.Name, dir)
	}
	if err != nil {
		return nil, fmt.Errorf("handlers: %w", err)
	}
	if n := sp.Adopted(); n > 0 {
		c.log.Warn().Int("outcomes", n).Str("dir", dir).Msg("adopted the spooled outcomes of stopped processes; writing them back")
	}
	var old []string
	for _, d := range []string{cfg.SpoolDir, flight.DeploymentSpoolDir(cfg.SpoolDir, cfg.Keyspace.Prefix, "")} {
		if d == dir {
			continue
		}
		f, _ := filepath.Glob(filepath.Join(d, "spool-*.jsonl"))
		old = append(old, f...)
		if cfg.Archive != nil {
			a, _ := filepath.Glob(filepath.Join(d, "archive-*.jsonl"))
			old = append(old, a...)
		}
	}
	if len(old) > 0 {
		// Older versions kept the spools of every deployment in one directory, and later those
		// of every deployment of a prefix, whichever Redis it served. Which deployment they
		// belong to is the operator's call.
		c.log.Warn().Strs("files", old).Str("dir", dir).
			Msg("spool files of an older version, not adopted: move those of this deployment into its directory to have them written back")
	}
	c.spool = sp
	if cfg.Archive != nil {
		aw, err := archive.NewWriter(archive.WriterConfig{Store: cfg.Archive, SpoolDir: dir, Name: cfg.Name,
			Logger: &c.log, Registry: cfg.Registry})
		if err != nil {
			_ = sp.Close()
			return nil, fmt.Errorf("handlers: %w", err)
		}
		c.archive = aw
	}
	c.rdb = cfg.NewClient()
	c.reads = cfg.NewClient()
	c.clients = append(c.clients, c.rdb, c.reads)
	if cfg.Registry != nil {
		stages := make([]string, len(cfg.Stages))
		for i, s := range cfg.Stages {
			stages[i] = s.Name
		}
		if err := cfg.Registry.Register(newRedisCollector(c.rdb, cfg.Keyspace, stages)); err != nil {
			c.closeClients()
			return nil, fmt.Errorf("handlers: register metrics: %w", err)
		}
	}
	// On a single node the handlers' flight calls, such as acquire and complete, share
	// pipelines. The calls concurrent handlers make while one pipeline is out leave together in
	// the next.
	var calls lua.FCaller
	if one, ok := c.rdb.(*redis.Client); ok {
		c.batch = lua.NewBatcher(one)
		calls = c.batch
	}
	coord, err := flight.NewCoordinator(flight.Config{Client: c.rdb, Calls: calls, Keyspace: cfg.Keyspace,
		Consumer: cfg.Name, ResultMaxLen: cfg.ResultMaxLen, AnswerAfterScript: cfg.AnswerAfterScript,
		WriteBackFence: c.archiveFence()})
	if err != nil {
		c.closeClients()
		return nil, err
	}
	c.coord = coord
	c.eviction = &evictionWatch{rdb: c.rdb, log: c.log, gauge: c.metrics.eviction}
	c.live = &liveness{rdb: c.rdb, key: cfg.Keyspace.Consumers(topics.ConsumerGroup), name: cfg.Name,
		interval: cfg.LivenessInterval, timeout: cfg.LivenessTimeout, log: c.log, eviction: c.eviction,
		stages: newStageRegistry(c.rdb, cfg.Keyspace, cfg.Name, cfg.Stages, c.log)}
	stop, stopCancel := context.WithCancel(context.Background())
	owners, abandon := context.WithCancelCause(stop)
	c.life = &lifecycle{stop: stop, owners: owners}
	c.stop, c.abandon = stopCancel, abandon
	writer := broker.Writer{Client: c.rdb, Keyspace: cfg.Keyspace, ResultMaxLen: cfg.ResultMaxLen}
	for _, s := range cfg.Stages {
		mdl, _ := cfg.modelFor(s) // validate checked it
		if mdl.Name() == "sim" {
			c.log.Warn().Str("stage", s.Name).Msg("stage runs the simulated model: its results are made up, no model is called (register a handler or set the stage's model)")
		}
		proc := &processor{stage: s, pol: s.Policy, coord: coord, writer: writer, rdb: c.rdb, joins: newJoins(s.Policy.ResultTTL),
			ks: cfg.Keyspace, model: mdl, name: cfg.Name, limits: cfg.Limits,
			log: c.log, metrics: c.metrics, life: c.life, sessions: flight.NewSessionLock(c.rdb, cfg.Keyspace), spool: sp,
			local: executor.NewLocal[[]byte](executor.LocalConfig{}), breaker: c.breaker, archive: c.archive,
			ledger: c.metrics.ledger.stage(s.Name, s.Prices, stageModel(s, mdl)), modelName: stageModel(s, mdl)}
		if proc.modelName == "" {
			proc.modelName = mdl.Name()
		}
		if cfg.TracerProvider != nil {
			proc.tracer = cfg.TracerProvider.Tracer(instrumentation)
		}
		proc.owner = &flight.Owner{Coord: coord, Spool: sp, Heartbeat: s.HeartbeatInterval, HeartbeatTimeout: s.HeartbeatInterval,
			Timeout: proc.lookupTimeout(), AskTimeout: s.Lease, HandoverTimeout: 2 * time.Second, WriteTimeout: s.Lease, WriteFor: s.Lease, FailureTTL: s.FailureTTL,
			Retention: s.ArchiveRetention, Tracer: proc.tracer}
		if c.archive != nil {
			proc.owner.Archive = c.archive
		}
		if s.Limit != nil {
			lim, err := c.limiter(coord, s.Limiter, *s.Limit)
			if err != nil {
				c.closeClients()
				return nil, fmt.Errorf("handlers: stage %s: %w", s.Name, err)
			}
			proc.owner.Limiter, proc.owner.ReleaseAfter = lim, scheduleAfter
		}
		c.procs[s.Name] = proc
		sub, err := stream.NewSubscriber(stream.Config{Client: c.reads, Consumer: cfg.Name, Capacity: s.Concurrency,
			TouchInterval: min(s.HeartbeatInterval, s.Lease/3), ClaimInterval: cfg.ClaimInterval, ClaimIdle: s.Lease,
			ParkCheck: s.ParkCheck, Check: proc.claimCheck, Unmarshaller: unmarshaller{}, Logger: &c.log,
			CloseTimeout: cfg.Grace + 5*time.Second, Paused: pauseCheck(c.rdb, cfg.Keyspace, s.Name)})
		if err != nil {
			c.closeClients()
			return nil, fmt.Errorf("handlers: stage %s: %w", s.Name, err)
		}
		c.subs[s.Name] = sub
	}
	return c, nil
}

// Name is the consumer's process name.
func (c *Consumer) Name() string { return c.cfg.Name }

// Status is a consumer's own view of itself, for the dashboard and /readyz.
type Status struct {
	Name string `json:"name"`
	// Stages are the stages it consumes, with their modes.
	Stages map[string]string `json:"stages"`
	// Started is true once every subscriber runs. Draining is true once shutdown began.
	Started  bool `json:"started"`
	Draining bool `json:"draining"`
	// RunningOwners counts model calls in progress.
	RunningOwners int64 `json:"runningOwners"`
	// Spooled counts uncertain outcomes waiting for write-back.
	Spooled int `json:"spooled"`
	// Breaker is the coordination breaker's state: closed, half-open or open.
	Breaker string `json:"breaker"`
	// Archive is the durable archive's health: "ok", "down" with the reason, or "" if none.
	Archive string `json:"archive,omitempty"`
	// EvictionPolicy is Redis's maxmemory-policy as last read, or "" when it cannot be read.
	// Any policy but noeviction may drop keys.
	EvictionPolicy string `json:"evictionPolicy,omitempty"`
	// Streams counts, per stage, what its subscriber did: entries read, recovered, claimed,
	// parked and delayed. Recovered entries are this consumer's own, after a restart.
	Streams map[string]stream.Stats `json:"streams"`
}

// Status reports the consumer's own state.
func (c *Consumer) Status() Status {
	st := Status{Name: c.cfg.Name, Stages: map[string]string{}, Draining: c.life.draining.Load(),
		RunningOwners: c.life.running.Load(), Spooled: c.spool.Len(), Breaker: c.breaker.State(),
		Streams: map[string]stream.Stats{}}
	if c.archive != nil {
		st.Archive = c.archive.Health()
	}
	st.EvictionPolicy = c.eviction.current()
	select {
	case <-c.started:
		st.Started = !c.stopped.Load()
	default:
	}
	for _, s := range c.cfg.Stages {
		st.Stages[s.Name] = string(s.Mode)
		st.Streams[s.Name] = c.subs[s.Name].Stats()
	}
	return st
}

// Ready reports whether the consumer should receive work: its subscribers run, it is not
// shutting down, its breaker is not open and Redis answers a PING within a second.
func (c *Consumer) Ready(ctx context.Context) error {
	st := c.Status()
	switch {
	case !st.Started:
		return errors.New("subscribers not running")
	case st.Draining:
		return errors.New("shutting down")
	case st.Breaker == "open":
		return errors.New("coordination breaker open")
	}
	ctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	if err := c.rdb.Ping(ctx).Err(); err != nil {
		return fmt.Errorf("redis: %w", err)
	}
	return nil
}

// Started is closed once every subscriber is subscribed.
func (c *Consumer) Started() <-chan struct{} { return c.started }

// Run consumes until ctx ends, then shuts down gracefully and returns. Shutdown order:
//  1. Stop taking new work: the subscribers stop reading and claiming.
//  2. Wait up to Grace for running owners to finish and answer their tasks.
//  3. Hand the remaining owners' flights over without spending their attempt, and release
//     their entries to the other consumers. Released entries look idle for long, so they
//     are claimed at once.
//  4. Close the subscribers. Each hands over the entries it still holds: tasks waiting for a
//     retry, a session lock or a lapsed lease.
//  5. Forget this process's liveness, close the Redis clients and the spool.
func (c *Consumer) Run(ctx context.Context) error {
	defer c.closeClients()
	if err := c.coord.Load(ctx); err != nil {
		return err
	}
	if err := c.live.CheckName(ctx); err != nil {
		return err
	}
	if p, err := c.eviction.check(ctx); c.cfg.RequireNoEviction {
		if err := required(p, err); err != nil {
			return err
		}
	}
	c.checkReplicated(ctx)
	if err := c.live.Beat(ctx); err != nil {
		return fmt.Errorf("handlers: first liveness beat: %w", err)
	}
	if c.spool.Len() > 0 {
		// Write back what earlier processes spooled before taking any task over, so that a task
		// whose result is spooled is answered from it. A task of a key still spooled waits for
		// the write-back anyway.
		fctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		rep, err := c.spool.Flush(fctx, c.coord)
		cancel()
		c.log.Info().Int("written", rep.Written).Int("refused", rep.Refused).Int("kept", rep.Kept).
			Int("answered", rep.Answered).AnErr("error", err).Msg("spooled outcomes written back at start")
	}
	bgCtx, bgCancel := context.WithCancel(context.Background())
	var bg sync.WaitGroup
	bg.Add(4)
	if c.archive != nil {
		bg.Add(1)
		go func() { defer bg.Done(); c.archive.Run(bgCtx) }()
	}
	go func() { defer bg.Done(); c.live.Run(bgCtx) }()
	go func() { defer bg.Done(); c.statsLoop(bgCtx) }()
	bg.Add(1)
	go func() { defer bg.Done(); c.scheduleLoop(bgCtx, 500*time.Millisecond) }()
	go func() { defer bg.Done(); c.flushLoop(bgCtx) }()
	go func() { defer bg.Done(); c.trimLoop(bgCtx, c.cfg.TrimInterval) }()
	defer func() { bgCancel(); bg.Wait() }()

	for _, s := range c.cfg.Stages {
		proc := c.procs[s.Name]
		for _, topic := range c.cfg.Keyspace.TaskStreams(s.Name) {
			if err := c.subs[s.Name].Serve(ctx, topic, proc.serve); err != nil {
				for _, sub := range c.subs {
					_ = sub.Close()
				}
				return fmt.Errorf("handlers: stage %s: %w", s.Name, err)
			}
		}
	}
	close(c.started)
	c.log.Info().Int("stages", len(c.cfg.Stages)).Msg("consumer running")
	<-ctx.Done()

	// 1-3: drain.
	c.life.draining.Store(true)
	for _, sub := range c.subs {
		sub.StopReading()
	}
	c.log.Info().Dur("grace", c.cfg.Grace).Msg("shutting down: draining running owners")
	graceEnd := time.Now().Add(c.cfg.Grace)
	for c.life.running.Load() > 0 {
		if time.Now().After(graceEnd) && c.life.owners.Err() == nil {
			c.log.Warn().Int64("owners", c.life.running.Load()).Msg("grace period over: handing running owners over")
			c.abandon(ErrShuttingDown)
		}
		time.Sleep(20 * time.Millisecond)
	}
	// 4: close. The subscribers hand their held entries over.
	c.stop()
	for _, sub := range c.subs {
		_ = sub.Close()
	}
	// 5: liveness.
	bgCancel()
	bg.Wait()
	fctx, fcancel := context.WithTimeout(context.Background(), 2*time.Second)
	if err := c.live.Forget(fctx); err != nil {
		c.log.Warn().Err(err).Msg("could not remove liveness entry")
	}
	fcancel()
	c.stopped.Store(true)
	c.log.Info().Msg("consumer stopped")
	return nil
}

// limiter returns the process's limiter of name, made on first use: stages that name one
// limiter share it.
func (c *Consumer) limiter(coord *flight.Coordinator, name string, l flight.Limit) (*flight.Limiter, error) {
	if lim, ok := c.limiters[name]; ok {
		if !lim.Same(l) {
			return nil, fmt.Errorf("limiter %s: two stages give it different limits", name)
		}
		return lim, nil
	}
	lim, err := coord.NewLimiter(name, l)
	if err != nil {
		return nil, err
	}
	if c.limiters == nil {
		c.limiters = map[string]*flight.Limiter{}
	}
	c.limiters[name] = lim
	return lim, nil
}

func (c *Consumer) closeClients() {
	if c.archive != nil {
		// What the owners recorded last is written, or spooled for the next process.
		actx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		if err := c.archive.Close(actx); err != nil {
			c.log.Warn().Err(err).Msg("archive spool close")
		}
		cancel()
	}
	if c.batch != nil {
		_ = c.batch.Close()
	}
	for _, cl := range c.clients {
		_ = cl.Close()
	}
	_ = c.spool.Close()
}

// flushLoop writes spooled uncertain outcomes back every second while there are any. Each
// write-back answers the tasks waiting for its flight, the owner's own included.
func (c *Consumer) flushLoop(ctx context.Context) {
	t := time.NewTicker(time.Second)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if c.spool.Len() == 0 {
			continue
		}
		fctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		rep, err := c.spool.Flush(fctx, c.coord)
		cancel()
		if rep.Written+rep.Refused > 0 {
			c.log.Info().Int("written", rep.Written).Int("refused", rep.Refused).Int("kept", rep.Kept).
				Int("answered", rep.Answered).Msg("uncertain outcomes written back")
		} else if err != nil {
			c.log.Debug().Err(err).Msg("spool flush failed; retrying")
		}
	}
}
