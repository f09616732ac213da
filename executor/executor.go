// Package executor runs expensive calls of in-process callers once across a fleet. A caller
// leads in its process at L1, in Local, then owns or follows the key's flight in Redis at L2.
// Each stage degrades by its Mode behind a circuit breaker when Redis fails.
package executor

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"
	"github.com/rs/zerolog"
	"golang.org/x/sync/semaphore"
	"golang.org/x/time/rate"

	"github.com/flightdeck-ai/flightdeck/flight"
	"github.com/flightdeck-ai/flightdeck/internal/broker"
	"github.com/flightdeck-ai/flightdeck/internal/redisconn"
	"github.com/flightdeck-ai/flightdeck/topics"
)

// Mode is how a stage coordinates (DESIGN.md section 6).
type Mode string

// The four modes.
const (
	// ModeDistributedOnly coordinates through Redis at L1 and L2 and fails fast with
	// flight.ErrCoordinationUnavailable when Redis cannot be used.
	ModeDistributedOnly Mode = "DISTRIBUTED_ONLY"
	// ModeLocalOnly uses in-process single-flight, L1, only.
	ModeLocalOnly Mode = "LOCAL_ONLY"
	// ModeHybrid coordinates through Redis and falls back to in-process single-flight when
	// coordination fails before ownership is known.
	ModeHybrid Mode = "HYBRID"
	// ModeBypass runs every call, with no single-flight at all.
	ModeBypass Mode = "BYPASS"
)

// Budget splits a call's time. Coordination calls such as acquire, start and each wait, the
// model run, and storing the result each get their own deadline.
type Budget struct {
	// Coordination bounds each coordination round trip: acquire, start, heartbeat. It must
	// exceed a replicated policy's ReplicationTimeout. Defaults to 500 ms, plus the
	// ReplicationTimeout under DurabilityReplicated.
	Coordination time.Duration
	// Execution bounds the function's run. Defaults to the policy's RunningTTL.
	Execution time.Duration
	// Result bounds storing the result: complete or fail, and its events. Defaults to 2 s,
	// or the ReplicationTimeout plus 1 s under DurabilityReplicated when that is longer.
	Result time.Duration
}

// StageOptions are the executor's per-stage settings.
type StageOptions struct {
	// Mode defaults to ModeHybrid.
	Mode Mode
	// Policy is the stage's flight policy, as a stage file's stage embeds it. Zero fields take
	// their defaults.
	flight.Policy
	// HeartbeatInterval is how often an owner renews its lease. Defaults to Lease / 5.
	HeartbeatInterval time.Duration
	// WaitTimeout: a follower waiting this long without news re-acquires. The owner may be
	// dead, and the re-acquire then takes over. It never runs the function just because
	// waiting took long. Defaults to the lease.
	WaitTimeout time.Duration
	// L1Replay keeps a successful result in process memory this long. Defaults to 0, off.
	L1Replay time.Duration
	// Budget splits the call's time. Zero fields take their defaults.
	Budget Budget
	// DegradedConcurrency caps concurrent function runs of the stage in degraded mode, and in
	// LOCAL_ONLY and BYPASS, so a fleet running everything locally cannot swamp the model.
	// Defaults to 4.
	DegradedConcurrency int
	// DegradedRate caps function runs per second in degraded mode. 0 means no cap.
	// Defaults to 0.
	DegradedRate float64
	// DegradedBurst is the rate limiter's burst. Defaults to 1.
	DegradedBurst int
	// ArchiveRetention is how long Config.Archive keeps the stage's outcomes.
	// Defaults to the archive's default, 30 days for package archive.
	ArchiveRetention time.Duration
	// Limiter names the fleet-wide limiter whose Limit the stage's calls take from. Stages
	// and consumers naming one limiter share its budget. Empty means none.
	Limiter string
	// Limit is the limiter's budget. Required with Limiter.
	Limit *flight.Limit
	// EstimateTokens is the tokens a call reserves from a limiter with tokensPerMinute before
	// it runs. fn reports what it used with flight.ReportUsage. Defaults to 1024.
	EstimateTokens int
}

func (o StageOptions) withDefaults() StageOptions {
	if o.Mode == "" {
		o.Mode = ModeHybrid
	}
	o.Policy = o.Policy.WithDefaults()
	if o.HeartbeatInterval == 0 {
		o.HeartbeatInterval = o.Policy.Lease / 5
	}
	if o.WaitTimeout == 0 {
		o.WaitTimeout = o.Policy.Lease
	}
	if o.EstimateTokens == 0 {
		o.EstimateTokens = 1024
	}
	if o.Budget.Coordination == 0 {
		o.Budget.Coordination = 500 * time.Millisecond
		if o.Policy.Durability == flight.DurabilityReplicated {
			// An acquire waits up to the replication timeout for its replica.
			o.Budget.Coordination += o.Policy.ReplicationTimeout
		}
	}
	if o.Budget.Execution == 0 {
		o.Budget.Execution = o.Policy.RunningTTL
	}
	if o.Budget.Result == 0 {
		o.Budget.Result = 2 * time.Second
		if o.Policy.Durability == flight.DurabilityReplicated {
			o.Budget.Result = max(o.Budget.Result, o.Policy.ReplicationTimeout+time.Second)
		}
	}
	if o.DegradedConcurrency == 0 {
		o.DegradedConcurrency = 4
	}
	if o.DegradedBurst == 0 {
		o.DegradedBurst = 1
	}
	return o
}

// Config configures an Executor.
type Config struct {
	// Coordinator is the L2 state machine. Required unless every stage is LOCAL_ONLY or BYPASS.
	Coordinator *flight.Coordinator
	// Client reads result streams for followers and publishes owners' events. Defaults to the
	// coordinator's client.
	Client redis.UniversalClient
	// NodeID names this process as flight owner. Defaults to "<hostname>-<pid>".
	NodeID string
	// Stages are the per-stage options. Do refuses other stages with flight.ErrUnknownStage.
	Stages map[string]StageOptions
	// Breaker configures the coordination circuit breaker.
	Breaker BreakerConfig
	// SpoolDir is the base directory of the spool of uncertain outcomes. This executor's file
	// is in its deployment's subdirectory, flight.DeploymentSpoolDir, and named after NodeID.
	// The spools of dead processes found there are adopted and written back by
	// flight.OpenSpoolDir, so the directory must be this user's own. Defaults to flight.DefaultSpoolDir(os.Getenv).
	SpoolDir string
	// Deployment names the Redis in the spool directory's name, beside the keyspace prefix.
	// Defaults to redisconn.ClientDeployment of the client. A Sentinel client has none, so give
	// it as the consumer does, with redisconn.Deployment of its URL.
	Deployment string
	// FlushInterval is how often spooled outcomes are written back. Defaults to 1 s.
	FlushInterval time.Duration
	// Logger receives structured logs. Defaults to a disabled logger.
	Logger *zerolog.Logger
	// Registry receives the singleflight_* metrics. Defaults to none.
	Registry prometheus.Registerer
	// Archive, when set, is consulted before an owner runs the function. A key whose final
	// outcome it holds is answered from it by lazy rehydrate, with Result.Shared "archive", and
	// every outcome an owner settles is recorded in it. When it is also a Fencer, as package
	// archive's Writer is, an owner that takes a flight over claims the key in it before it
	// runs the function. Give the Coordinator flight.ArchiveFence(<the archive>.Fence, ...) as its
	// WriteBackFence, so that an older owner's write-back after a Redis data loss is refused.
	// New logs a warning when it has none. Defaults to none.
	Archive flight.Archive
	// MaxWaiters bounds the followers of other nodes' flights waiting in this process at once.
	// Past it, Do answers flight.ErrTooManyWaiters. Defaults to 10000.
	MaxWaiters int
}

// Fn is the expensive call. progress reports that it made progress, such as a streamed chunk
// or a finished step. The owner's heartbeat carries it, so a run whose heartbeat is fresh but
// whose progress stalled past the stall timeout is taken over.
type Fn func(ctx context.Context, progress func()) ([]byte, error)

// Result is what Do answers.
type Result struct {
	// Value is the function's result.
	Value []byte
	// Shared tells how this call got it: owner ran the function under coordination, follower
	// took another owner's run, hit a stored result, local ran in degraded or local mode, and
	// archive took the durable archive's outcome, with no run.
	Shared topics.Shared
	// Token is the flight's fencing token, or 0 for local runs.
	Token int64
	// Uncertain is true when the value could not be stored in Redis: it was spooled and is
	// written back when Redis answers again. The function is never run again for it.
	Uncertain bool
}

// Executor runs functions once per key. It puts L1 in-process single-flight in front of the L2
// Redis state machine, with per-stage modes, a circuit breaker on coordination, degraded-mode
// caps, time budgets and a spool for uncertain outcomes. Safe for concurrent use. Call Start
// before Do and Close when done.
type Executor struct {
	cfg     Config
	log     zerolog.Logger
	coord   *flight.Coordinator
	rdb     redis.UniversalClient
	writer  broker.Writer
	cb      *Breaker
	metrics *Metrics
	disp    *dispatcher
	spool   *flight.Spool
	stages  map[string]*stageRuntime

	cancel context.CancelFunc
	wg     sync.WaitGroup
}

type stageRuntime struct {
	name     string
	opt      StageOptions
	l1       *Local[Result]
	owner    *flight.Owner // the owner lifecycle of the stage's flights, for coordinated stages
	sem      *semaphore.Weighted
	limiter  *rate.Limiter
	degraded atomic.Bool
}

// New validates cfg and opens the spool.
func New(cfg Config) (*Executor, error) {
	if cfg.NodeID == "" {
		cfg.NodeID = flight.DefaultNodeID()
	}
	if cfg.Logger == nil {
		l := zerolog.Nop()
		cfg.Logger = &l
	}
	if cfg.FlushInterval == 0 {
		cfg.FlushInterval = time.Second
	}
	if cfg.MaxWaiters == 0 {
		cfg.MaxWaiters = 10000
	}
	if cfg.SpoolDir == "" {
		cfg.SpoolDir = flight.DefaultSpoolDir(os.Getenv)
	}
	e := &Executor{cfg: cfg, log: cfg.Logger.With().Str("node", cfg.NodeID).Logger(), coord: cfg.Coordinator,
		metrics: NewMetrics(cfg.Registry), stages: map[string]*stageRuntime{}}
	if _, ok := cfg.Archive.(flight.Fencer); ok && cfg.Coordinator != nil && !cfg.Coordinator.FencesWriteBacks() {
		e.log.Warn().Msg("the archive keeps claims but the coordinator has no WriteBackFence: set " +
			"flight.Config.WriteBackFence to flight.ArchiveFence(archive.Fence, ...) so that an older owner's " +
			"write-back after a Redis data loss is refused")
	}
	for name, o := range cfg.Stages {
		if topics.CheckStage(name) != nil || name[0] == '-' {
			return nil, fmt.Errorf("executor: stage %q: want [a-z0-9-], at most 64", name)
		}
		o = o.withDefaults()
		switch o.Mode {
		case ModeDistributedOnly, ModeHybrid:
			if cfg.Coordinator == nil {
				return nil, fmt.Errorf("executor: stage %s: mode %s needs a flight.Coordinator", name, o.Mode)
			}
		case ModeLocalOnly, ModeBypass:
		default:
			return nil, fmt.Errorf("executor: stage %s: unknown mode %q", name, o.Mode)
		}
		if err := o.Policy.Validate(); err != nil {
			return nil, fmt.Errorf("executor: stage %s: %w", name, err)
		}
		if o.Policy.Durability == flight.DurabilityReplicated && o.Budget.Coordination <= o.Policy.ReplicationTimeout {
			return nil, fmt.Errorf("executor: stage %s: budget.coordination %v must exceed replicationTimeout %v (an acquire waits for the replica)",
				name, o.Budget.Coordination, o.Policy.ReplicationTimeout)
		}
		if o.Policy.Durability == flight.DurabilityReplicated && o.Budget.Result <= o.Policy.ReplicationTimeout {
			return nil, fmt.Errorf("executor: stage %s: budget.result %v must exceed replicationTimeout %v (a complete waits for the replica)",
				name, o.Budget.Result, o.Policy.ReplicationTimeout)
		}
		lim := rate.Inf
		if o.DegradedRate > 0 {
			lim = rate.Limit(o.DegradedRate)
		}
		e.stages[name] = &stageRuntime{name: name, opt: o, l1: NewLocal[Result](LocalConfig{Replay: o.L1Replay}),
			sem: semaphore.NewWeighted(int64(o.DegradedConcurrency)), limiter: rate.NewLimiter(lim, o.DegradedBurst)}
	}
	e.cb = NewBreaker(cfg.Breaker, e.breakerChanged)
	if cfg.Coordinator != nil {
		e.rdb = cfg.Client
		if e.rdb == nil {
			e.rdb = cfg.Coordinator.Client()
		}
		e.writer = broker.Writer{Client: e.rdb, Keyspace: cfg.Coordinator.Keyspace()}
		e.disp = newDispatcher(e.rdb, e.log, e.breakerOpen, cfg.MaxWaiters)
		sp, err := flight.OpenSpoolDir(flight.DeploymentSpoolDir(cfg.SpoolDir, cfg.Coordinator.Keyspace().Prefix, cmp.Or(cfg.Deployment, redisconn.ClientDeployment(e.rdb))), cfg.NodeID)
		if err != nil {
			return nil, err
		}
		e.spool = sp
		e.metrics.spooled.Set(float64(sp.Len()))
		guard := func(call func() error) error {
			_, err := Guard(e.cb, func() (struct{}, error) { return struct{}{}, call() })
			return err
		}
		for _, st := range e.stages {
			o := st.opt
			st.owner = &flight.Owner{Coord: cfg.Coordinator, Spool: sp, Guard: guard, Heartbeat: o.HeartbeatInterval,
				HeartbeatTimeout: o.Budget.Coordination, Timeout: o.Budget.Coordination, AskTimeout: o.Budget.Coordination,
				HandoverTimeout: o.Budget.Coordination, WriteTimeout: o.Budget.Result,
				FailureTTL: o.Policy.FailureTTL, Retention: o.ArchiveRetention}
			if cfg.Archive != nil {
				st.owner.Archive = cfg.Archive
			}
			if o.Limiter != "" || o.Limit != nil {
				if o.Limit == nil {
					return nil, fmt.Errorf("executor: stage %s: limiter %q has no Limit", st.name, o.Limiter)
				}
				lim, err := cfg.Coordinator.NewLimiter(o.Limiter, *o.Limit)
				if err != nil {
					return nil, fmt.Errorf("executor: stage %s: %w", st.name, err)
				}
				// An in-process caller waits for its call anyway: up to a lease in place, longer
				// by following the flight until its retryAt.
				st.owner.Limiter, st.owner.LimitWait = lim, o.Policy.Lease
			}
		}
	}
	return e, nil
}

// Start runs the result dispatcher and the spool flusher until Close.
func (e *Executor) Start(ctx context.Context) {
	ctx, e.cancel = context.WithCancel(context.WithoutCancel(ctx))
	if e.disp == nil {
		return
	}
	e.wg.Add(2)
	go func() { defer e.wg.Done(); e.disp.run(ctx) }()
	go func() { defer e.wg.Done(); e.flushLoop(ctx) }()
}

// Close stops the background work and closes the spool. It does not close the Redis client.
func (e *Executor) Close() error {
	if e.cancel != nil {
		e.cancel()
	}
	e.wg.Wait()
	if e.spool != nil {
		return e.spool.Close()
	}
	return nil
}

// Spooled is the number of uncertain outcomes waiting to be written back.
func (e *Executor) Spooled() int {
	if e.spool == nil {
		return 0
	}
	return e.spool.Len()
}

func (e *Executor) breakerOpen() bool { return e.cb.Open() }

// BreakerState is the coordination breaker's state: closed, half-open or open.
func (e *Executor) BreakerState() string { return e.cb.State() }

func (e *Executor) breakerChanged(from, to string) {
	e.metrics.breakerState.Set(map[string]float64{"closed": 0, "half-open": 1, "open": 2}[to])
	switch to {
	case "open":
		e.metrics.circuitOpen.Inc()
		e.log.Warn().Str("from", from).Msg("coordination circuit breaker open: no Redis calls until the probe")
	case "half-open":
		e.log.Info().Msg("coordination circuit breaker half-open: probing Redis")
	case "closed":
		e.log.Info().Msg("coordination circuit breaker closed: coordinating again")
	}
}

// Do runs fn for key under the stage's mode. DISTRIBUTED_ONLY, and HYBRID while Redis answers,
// run it at most once across the fleet. LOCAL_ONLY and degraded HYBRID run it once per process,
// and BYPASS every time. Concurrent callers of one key in this process share one L1 run. A
// caller whose ctx ends returns ctx's error without cancelling the run others wait for. A panic
// in fn is re-raised in every caller waiting on that run. A model error is never retried
// locally: it fails the flight, which the state machine retries while attempts and
// retryability allow.
func (e *Executor) Do(ctx context.Context, stage, key string, fn Fn) (Result, error) {
	st, ok := e.stages[stage]
	if !ok {
		return Result{}, fmt.Errorf("%w: %q", flight.ErrUnknownStage, stage)
	}
	if err := flight.CheckKey(key); err != nil {
		return Result{}, err
	}
	if st.opt.Mode == ModeBypass {
		return e.runLocal(ctx, st, fn, false)
	}
	lr, err := st.l1.Do(ctx, key, func(ctx context.Context) (Result, error) {
		if st.opt.Mode == ModeLocalOnly {
			return e.runLocal(ctx, st, fn, false)
		}
		return e.distributed(ctx, st, key, fn)
	})
	if lr.Leader {
		e.metrics.localOwner.WithLabelValues(stage).Inc()
	} else {
		e.metrics.localWaiter.WithLabelValues(stage).Inc()
	}
	res := lr.Value
	if !lr.Leader && res.Shared == topics.SharedOwner {
		res.Shared = topics.SharedFollower
	}
	return res, err
}

// runLocal runs fn in this process under the stage's degraded caps.
func (e *Executor) runLocal(ctx context.Context, st *stageRuntime, fn Fn, degraded bool) (Result, error) {
	if err := st.sem.Acquire(ctx, 1); err != nil {
		return Result{}, err
	}
	defer st.sem.Release(1)
	if err := st.limiter.Wait(ctx); err != nil {
		return Result{}, err
	}
	if degraded {
		e.metrics.fallbackExecution.WithLabelValues(st.name).Inc()
	}
	ctx, cancel := context.WithTimeout(ctx, st.opt.Budget.Execution)
	defer cancel()
	v, err := fn(ctx, func() {})
	if err != nil {
		return Result{}, err
	}
	return Result{Value: v, Shared: topics.SharedLocal}, nil
}

// fallback handles a coordination failure before ownership is known. A key whose outcome
// this process holds unwritten is answered with it, in every mode, and fn is not run again
// for it (DESIGN.md section 6, "Held outcomes").
func (e *Executor) fallback(ctx context.Context, st *stageRuntime, key string, fn Fn, cause error) (Result, error) {
	if v, _, ok := e.spool.Held(key); ok {
		return Result{Value: v, Shared: topics.SharedLocal, Uncertain: true}, nil
	}
	kind := "unavailable"
	var ce *flight.CoordinationError
	switch {
	case errors.Is(cause, flight.ErrProtocol):
		kind = "protocol"
		e.metrics.unknownAction.WithLabelValues(st.name).Inc()
		e.log.Error().Err(cause).Str("stage", st.name).Msg("coordination protocol error")
	case errors.As(cause, &ce) && ce.BreakerOpen:
		kind = "breaker_open"
	}
	e.metrics.distributedFailure.WithLabelValues(st.name, kind).Inc()
	if st.opt.Mode == ModeDistributedOnly {
		if errors.Is(cause, flight.ErrCoordinationUnavailable) {
			return Result{}, cause
		}
		return Result{}, &flight.CoordinationError{Err: cause}
	}
	if st.degraded.CompareAndSwap(false, true) {
		e.metrics.degraded.WithLabelValues(st.name).Set(1)
		e.log.Warn().Err(cause).Str("stage", st.name).
			Msg("coordination unavailable: node degraded to in-process single-flight for this stage")
	}
	e.metrics.localFallback.WithLabelValues(st.name).Inc()
	return e.runLocal(ctx, st, fn, true)
}

func (e *Executor) coordinated(st *stageRuntime) {
	if st.degraded.CompareAndSwap(true, false) {
		e.metrics.degraded.WithLabelValues(st.name).Set(0)
		e.log.Info().Str("stage", st.name).Msg("coordination back: stage leaves degraded mode")
	}
}

// distributed is the L1 leader's path through the state machine.
