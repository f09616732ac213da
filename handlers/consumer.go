// Package handlers runs Flightdeck's consumers: watermill handlers that turn task messages
// into flight runs (Processor), the consumer runtime with its subscribers, liveness, reclaim
// and graceful shutdown (Consumer), and the stage policies. Model adapters live in
// handlers/model.
package handlers

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/ThreeDotsLabs/watermill-redisstream/pkg/redisstream"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/ThreeDotsLabs/watermill/message/router/middleware"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"
	"github.com/rs/zerolog"

	"github.com/flightdeck-ai/flightdeck/flight"
	"github.com/flightdeck-ai/flightdeck/handlers/model"
	"github.com/flightdeck-ai/flightdeck/topics"
)

// Config configures a Consumer.
type Config struct {
	// NewClient returns a new Redis client. Required. The consumer calls it once for its
	// shared client and once per subscriber (watermill's subscriber closes the client it is
	// given, and each subscriber's client carries its own stream hook). The consumer closes
	// every client it got.
	NewClient func() redis.UniversalClient
	// Keyspace names keys and streams. Defaults to the "ai" prefix.
	Keyspace topics.Keyspace
	// Name is this process's consumer name; its subscribers are "<Name>/<n>". It must not
	// contain '/'. Defaults to "<hostname>-<pid>".
	Name string
	// Stages are the stages to consume (see LoadStages). Required.
	Stages []StageConfig
	// Models are the model adapters by name (StageConfig.Model). Defaults to {"sim": &model.Sim{}}.
	Models map[string]model.Model
	// Limits bound task messages. Defaults to topics.Limits defaults, with Stages set to the
	// consumed stages.
	Limits topics.Limits
	// Logger receives structured logs. Defaults to a disabled logger.
	Logger *zerolog.Logger
	// Registry receives the consumer's metrics. Defaults to none.
	Registry prometheus.Registerer
	// LivenessInterval is how often the process records that it is alive. Defaults to 1 s.
	LivenessInterval time.Duration
	// LivenessTimeout: a process silent this long is dead and its pending entries are claimed.
	// Defaults to 3 x LivenessInterval.
	LivenessTimeout time.Duration
	// ClaimInterval is how often each subscriber looks for claimable entries. Defaults to 1 s.
	ClaimInterval time.Duration
	// MinClaimIdle is the idle time below which an entry is never claimed (XCLAIM MIN-IDLE;
	// it also keeps two claimers from taking one entry). Defaults to 1 s.
	MinClaimIdle time.Duration
	// HardIdle: an entry idle this long is claimed even from a live consumer. A live owner
	// resets its entry's idle time at every heartbeat, so this reaches only entries a busy
	// subscriber prefetched (watermill holds up to two per subscriber) or a stuck delivery;
	// a handler that finds its entry claimed away drops it. Defaults to three heartbeat
	// intervals of the slowest stage, at least 10 s.
	HardIdle time.Duration
	// Grace is how long running owners may finish after shutdown begins; the rest are failed
	// as retryable and their entries left for another consumer. Defaults to 10 s.
	Grace time.Duration
	// TrimInterval is how often acknowledged task entries are trimmed from the task streams
	// (XTRIM MINID below every group's delivered and pending entries). Defaults to 30 s.
	TrimInterval time.Duration
	// Breaker configures the circuit breaker around the consumer's flight acquires.
	Breaker flight.BreakerConfig
	// SpoolPath is the append-only file of uncertain outcomes (results the model produced but
	// Redis could not store). Defaults to $TMPDIR/flightdeck-spool-<Name>.jsonl; give each
	// consumer its own durable path in production.
	SpoolPath string
}

func (c *Config) setDefaults() {
	if c.Name == "" {
		c.Name = flight.DefaultNodeID()
	}
	if len(c.Models) == 0 {
		c.Models = map[string]model.Model{"sim": &model.Sim{}}
	}
	if c.Logger == nil {
		l := zerolog.Nop()
		c.Logger = &l
	}
	if c.LivenessInterval == 0 {
		c.LivenessInterval = time.Second
	}
	if c.LivenessTimeout == 0 {
		c.LivenessTimeout = 3 * c.LivenessInterval
	}
	if c.ClaimInterval == 0 {
		c.ClaimInterval = time.Second
	}
	if c.MinClaimIdle == 0 {
		c.MinClaimIdle = time.Second
	}
	if c.HardIdle == 0 {
		// Owners touch their entry every heartbeat; three missed heartbeats (and never less
		// than 10 s) mean the entry waits in a busy subscriber's read-ahead, or is stuck.
		c.HardIdle = 10 * time.Second
		for _, s := range c.Stages {
			c.HardIdle = max(c.HardIdle, 3*s.HeartbeatInterval)
		}
	}
	if c.Grace == 0 {
		c.Grace = 10 * time.Second
	}
	if c.TrimInterval == 0 {
		c.TrimInterval = 30 * time.Second
	}
	if c.SpoolPath == "" {
		c.SpoolPath = filepath.Join(os.TempDir(), "flightdeck-spool-"+c.Name+".jsonl")
	}
	if len(c.Limits.Stages) == 0 {
		for _, s := range c.Stages {
			c.Limits.Stages = append(c.Limits.Stages, s.Name)
		}
	}
	c.Limits = c.Limits.WithDefaults()
}

func (c *Config) validate() error {
	var errs []error
	if c.NewClient == nil {
		errs = append(errs, errors.New("NewClient is required"))
	}
	if len(c.Stages) == 0 {
		errs = append(errs, errors.New("no stages"))
	}
	if strings.ContainsAny(c.Name, "/ \t\n") {
		errs = append(errs, fmt.Errorf("name %q must not contain '/' or whitespace", c.Name))
	}
	for _, s := range c.Stages {
		if err := s.Validate(); err != nil {
			errs = append(errs, err)
		}
		if _, ok := c.Models[s.Model]; !ok {
			errs = append(errs, fmt.Errorf("stage %s: no model adapter %q", s.Name, s.Model))
		}
	}
	if c.LivenessTimeout <= c.LivenessInterval {
		errs = append(errs, fmt.Errorf("livenessTimeout %v must exceed livenessInterval %v", c.LivenessTimeout, c.LivenessInterval))
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("handlers: invalid consumer config: %w", err)
	}
	return nil
}

// Consumer reads the task streams of its stages in consumer group "flightdeck" and runs each
// task through its flight. Create it with NewConsumer and run it with Run.
type Consumer struct {
	cfg     Config
	log     zerolog.Logger
	rdb     redis.UniversalClient
	coord   *flight.Coordinator
	live    *Liveness
	metrics *Metrics
	spool   *flight.Spool
	clients []redis.UniversalClient
	procs   map[string]*Processor
	life    *lifecycle
	stop    context.CancelFunc
	abandon context.CancelCauseFunc
	started chan struct{}
	breaker *flight.Breaker
	stopped atomic.Bool
	// subscribers counts the subscribers made, for unique stream consumer names.
	subscribers int
}

// NewConsumer validates cfg and prepares a consumer; nothing connects until Run.
func NewConsumer(cfg Config) (*Consumer, error) {
	cfg.setDefaults()
	cfg.Keyspace = Keyspace(cfg.Keyspace, cfg.Stages)
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	c := &Consumer{cfg: cfg, log: cfg.Logger.With().Str("consumer", cfg.Name).Logger(),
		metrics: NewMetrics(cfg.Registry), procs: map[string]*Processor{}, started: make(chan struct{})}
	c.breaker = flight.NewBreaker(cfg.Breaker, func(from, to string) {
		c.metrics.breaker.Set(map[string]float64{"closed": 0, "half-open": 1, "open": 2}[to])
		c.log.Warn().Str("from", from).Str("to", to).Msg("coordination circuit breaker changed state")
	})
	c.rdb = cfg.NewClient()
	c.clients = append(c.clients, c.rdb)
	if cfg.Registry != nil {
		stages := make([]string, len(cfg.Stages))
		for i, s := range cfg.Stages {
			stages[i] = s.Name
		}
		if err := cfg.Registry.Register(newRedisCollector(c.rdb, cfg.Keyspace, stages)); err != nil {
			return nil, fmt.Errorf("handlers: register metrics: %w", err)
		}
	}
	coord, err := flight.NewCoordinator(flight.Config{Client: c.rdb, Keyspace: cfg.Keyspace})
	if err != nil {
		return nil, err
	}
	c.coord = coord
	c.live = &Liveness{rdb: c.rdb, key: cfg.Keyspace.Consumers(topics.ConsumerGroup), name: cfg.Name,
		interval: cfg.LivenessInterval, timeout: cfg.LivenessTimeout, log: c.log}
	stop, stopCancel := context.WithCancel(context.Background())
	owners, abandon := context.WithCancelCause(stop)
	c.life = &lifecycle{stop: stop, owners: owners}
	c.stop, c.abandon = stopCancel, abandon
	sp, err := flight.OpenSpool(cfg.SpoolPath)
	if err != nil {
		_ = c.rdb.Close()
		return nil, err
	}
	c.spool = sp
	writer := topics.Writer{Client: c.rdb, Keyspace: cfg.Keyspace}
	for _, s := range cfg.Stages {
		c.procs[s.Name] = &Processor{stage: s, pol: s.Policy(), coord: coord, writer: writer, rdb: c.rdb,
			ks: cfg.Keyspace, model: cfg.Models[s.Model], name: cfg.Name, limits: cfg.Limits,
			log: c.log, metrics: c.metrics, life: c.life, sessions: flight.NewSessionLock(c.rdb, cfg.Keyspace), spool: sp,
			local: flight.NewLocal[[]byte](flight.LocalConfig{}), breaker: c.breaker}
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
	// Started is true once every subscriber runs; Draining once shutdown began.
	Started  bool `json:"started"`
	Draining bool `json:"draining"`
	// RunningOwners counts model calls in progress.
	RunningOwners int64 `json:"runningOwners"`
	// Spooled counts uncertain outcomes waiting for write-back.
	Spooled int `json:"spooled"`
	// Breaker is the coordination breaker's state: closed, half-open or open.
	Breaker string `json:"breaker"`
}

// Status reports the consumer's own state.
func (c *Consumer) Status() Status {
	st := Status{Name: c.cfg.Name, Stages: map[string]string{}, Draining: c.life.draining.Load(),
		RunningOwners: c.life.running.Load(), Spooled: c.spool.Len(), Breaker: c.breaker.State()}
	select {
	case <-c.started:
		st.Started = !c.stopped.Load()
	default:
	}
	for _, s := range c.cfg.Stages {
		st.Stages[s.Name] = s.Mode
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
//  1. stop taking new work: handlers receiving a message from now on leave it pending;
//  2. wait up to Grace for running owners to finish and publish their events;
//  3. fail the remaining owners as retryable (another consumer takes over at once);
//  4. forget this process's liveness, so the others claim its pending entries right away;
//  5. close the router and the subscribers, then the shared Redis client.
func (c *Consumer) Run(ctx context.Context) error {
	defer c.closeClients()
	if err := c.coord.Load(ctx); err != nil {
		return err
	}
	if err := c.live.Beat(ctx); err != nil {
		return fmt.Errorf("handlers: first liveness beat: %w", err)
	}
	liveCtx, liveCancel := context.WithCancel(context.Background())
	liveDone := make(chan struct{})
	go func() { defer close(liveDone); c.live.Run(liveCtx) }()
	flushDone := make(chan struct{})
	go func() { defer close(flushDone); c.flushLoop(liveCtx) }()
	trimDone := make(chan struct{})
	go func() { defer close(trimDone); c.trimLoop(liveCtx, c.cfg.TrimInterval) }()
	defer func() { liveCancel(); <-flushDone; <-trimDone }()
	defer func() { liveCancel(); <-liveDone }()

	router, err := message.NewRouter(message.RouterConfig{CloseTimeout: c.cfg.Grace + 5*time.Second}, wmLogger{c.log, &c.life.draining})
	if err != nil {
		return err
	}
	for _, s := range c.cfg.Stages {
		if err := c.addStage(router, s); err != nil {
			return err
		}
	}
	routerDone := make(chan error, 1)
	go func() { routerDone <- router.Run(context.Background()) }()
	select {
	case <-router.Running():
		close(c.started)
		c.log.Info().Int("stages", len(c.cfg.Stages)).Msg("consumer running")
	case err := <-routerDone:
		return fmt.Errorf("handlers: router: %w", err)
	}

	select {
	case <-ctx.Done():
	case err := <-routerDone:
		c.log.Error().Err(err).Msg("router stopped")
		return fmt.Errorf("handlers: router stopped: %w", err)
	}

	// 1-3: drain.
	c.life.draining.Store(true)
	c.log.Info().Dur("grace", c.cfg.Grace).Msg("shutting down: draining running owners")
	graceEnd := time.Now().Add(c.cfg.Grace)
	for c.life.running.Load() > 0 {
		if time.Now().After(graceEnd) && c.life.owners.Err() == nil {
			c.log.Warn().Int64("owners", c.life.running.Load()).Msg("grace period over: abandoning running owners")
			c.abandon(ErrShuttingDown)
		}
		time.Sleep(20 * time.Millisecond)
	}
	// 4: liveness.
	liveCancel()
	<-liveDone
	fctx, fcancel := context.WithTimeout(context.Background(), 2*time.Second)
	if err := c.live.Forget(fctx); err != nil {
		c.log.Warn().Err(err).Msg("could not remove liveness entry; peers claim after the liveness timeout")
	}
	fcancel()
	// 5: close.
	c.stop()
	if err := router.Close(); err != nil {
		c.log.Warn().Err(err).Msg("router close")
	}
	<-routerDone
	c.stopped.Store(true)
	c.log.Info().Msg("consumer stopped")
	return nil
}

func (c *Consumer) closeClients() {
	for _, cl := range c.clients {
		_ = cl.Close()
	}
	_ = c.spool.Close()
}

// flushLoop writes spooled uncertain outcomes back every second while there are any.
// Redelivered tasks also flush their own key before acquiring.
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
				Msg("uncertain outcomes written back")
		} else if err != nil {
			c.log.Debug().Err(err).Msg("spool flush failed; retrying")
		}
	}
}

// addStage adds the stage's Concurrency subscribers per task stream (partition) to router,
// each with its own client and the middleware chain PoisonQueue -> Retry -> Recoverer.
func (c *Consumer) addStage(router *message.Router, s StageConfig) error {
	proc := c.procs[s.Name]
	// Only errors of the task itself end in the DLQ: a message that failed because Redis was
	// away stays pending (nacked, redelivered after NackResendSleep) until Redis answers.
	poisonable := func(err error) bool { return !leavesPending(err) && !redisUnavailable(err) }
	pq, err := middleware.PoisonQueueWithFilter(dlqPublisher{w: proc.writer, stage: s.Name, consumer: c.cfg.Name},
		c.cfg.Keyspace.DLQ(s.Name), poisonable)
	if err != nil {
		return err
	}
	retry := middleware.Retry{MaxRetries: 3, InitialInterval: 200 * time.Millisecond, MaxInterval: 2 * time.Second,
		Multiplier: 2, RandomizationFactor: 0.3, Logger: wmLogger{c.log, &c.life.draining},
		ShouldRetry: func(p middleware.RetryParams) bool { return !leavesPending(p.Err) }}
	for part, topic := range c.cfg.Keyspace.TaskStreams(s.Name) {
		for i := range s.Concurrency {
			sub, sl, consumer, err := c.subscriber()
			name := fmt.Sprintf("%s/%d/%d", s.Name, part, i)
			if err != nil {
				return fmt.Errorf("handlers: subscriber %s: %w", name, err)
			}
			h := router.AddNoPublisherHandler(name, topic, sub, proc.HandlerFunc(topic, consumer, sl))
			h.AddMiddleware(pq, retry.Middleware, middleware.Recoverer)
		}
	}
	return nil
}

// subscriber makes one watermill subscriber on its own client, with the stream hook and the
// claim veto; its stream consumer name is "<Name>/<n>" with n unique in this process.
func (c *Consumer) subscriber() (*redisstream.Subscriber, *slot, string, error) {
	consumer := c.cfg.Name + "/" + strconv.Itoa(c.subscribers)
	c.subscribers++
	cl := c.cfg.NewClient()
	c.clients = append(c.clients, cl)
	sl := &slot{}
	cl.AddHook(&streamHook{rdb: cl, group: topics.ConsumerGroup, consumer: consumer, slot: sl})
	sub, err := redisstream.NewSubscriber(redisstream.SubscriberConfig{
		Client: cl, Unmarshaller: Unmarshaller{}, Consumer: consumer, ConsumerGroup: topics.ConsumerGroup,
		NackResendSleep: 500 * time.Millisecond, BlockTime: 500 * time.Millisecond,
		ClaimInterval: c.cfg.ClaimInterval, MaxIdleTime: c.cfg.MinClaimIdle,
		ShouldClaimPendingMessage: func(xp redis.XPendingExt) bool {
			if xp.Consumer == consumer {
				return false // our own prefetched entry: the read loop delivers it
			}
			if xp.Idle < c.cfg.HardIdle {
				ctx, cancel := context.WithTimeout(context.Background(), time.Second)
				defer cancel()
				if c.live.Alive(ctx, xp.Consumer) {
					return false
				}
			}
			return sl.mayClaim()
		},
		DisableIndefiniteInitialBlock: true,
	}, wmLogger{c.log, &c.life.draining})
	return sub, sl, consumer, err
}

// dlqPublisher lets watermill's PoisonQueue middleware write to the dead-letter stream in the
// same format as the consumer's own refusals.
type dlqPublisher struct {
	w        topics.Writer
	stage    string
	consumer string
}

func (d dlqPublisher) Publish(_ string, msgs ...*message.Message) error {
	for _, m := range msgs {
		err := d.w.DeadLetter(m.Context(), topics.DeadLetter{Stage: d.stage, UUID: m.UUID, Payload: m.Payload,
			Reason: "handler_failed", Detail: m.Metadata.Get(middleware.ReasonForPoisonedKey), Consumer: d.consumer})
		if err != nil {
			return err
		}
	}
	return nil
}

func (d dlqPublisher) Close() error { return nil }
