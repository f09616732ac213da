package handlers

import (
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"
	"github.com/rs/zerolog"
	"go.opentelemetry.io/otel/trace"

	"github.com/flightdeck-ai/flightdeck/archive"
	"github.com/flightdeck-ai/flightdeck/executor"
	"github.com/flightdeck-ai/flightdeck/flight"
	"github.com/flightdeck-ai/flightdeck/handlers/model"
	"github.com/flightdeck-ai/flightdeck/internal/redisconn"
	"github.com/flightdeck-ai/flightdeck/topics"
)

// Config configures a Consumer.
type Config struct {
	// NewClient returns a new Redis client. The consumer calls it for the handlers' client and
	// for the stream subscribers' reads, since each topic's XREADGROUP blocks a connection
	// while idle. It calls it once more to name the deployment when Deployment and RedisURL are
	// unset. The consumer closes every client it got. Required unless RedisURL is set.
	NewClient func() redis.UniversalClient
	// RedisURL is used when NewClient is nil. It is redis://[user:password@]host:port/db,
	// rediss:// for TLS, a Sentinel URL with master_name= and the host and addr= as sentinels,
	// or a cluster URL naming more nodes with addr= query parameters.
	RedisURL string
	// Keyspace names keys and streams. Defaults to the "ai" prefix.
	Keyspace topics.Keyspace
	// Name is this process's consumer name in the group. It must not contain '/' or
	// whitespace nor start with '~'. A consumer restarted under the same name picks up its own
	// pending entries at start. Defaults to "<hostname>-<pid>".
	Name string
	// Stages are the stages to consume, as LoadStages returns them. A stage registered in
	// Handlers and missing here is added with its built-in policy if it is one of the four
	// built-in stages, else with the generic defaults. Required unless Handlers registers a
	// stage.
	Stages []StageConfig
	// Handlers runs each stage registered in it with its function or model adapter, whatever
	// the stage's Model names. The stage's Model becomes the adapter's name, "handler" for a
	// function. Other stages run the adapter that their Model names in Models.
	Handlers *Mux
	// Models are the model adapters by StageConfig.Model name.
	// Defaults to {"sim": &model.Sim{}}.
	Models map[string]model.Model
	// Limits bound task messages. Defaults to topics.Limits defaults, with Stages set to the
	// consumed stages.
	Limits topics.Limits
	// Logger receives structured logs. Defaults to a disabled logger.
	Logger *zerolog.Logger
	// Registry receives the consumer's metrics. Defaults to none.
	Registry prometheus.Registerer
	// TracerProvider receives the spans of every task, its flight's calls and its model call.
	// Nil means no tracing. Build it with sdktrace.WithIDGenerator(TraceIDGenerator()) so that
	// the spans of followers and hits link to the model call that answered them.
	TracerProvider trace.TracerProvider
	// RequireNoEviction makes Run refuse to start with ErrEvictionPolicy unless Redis's
	// maxmemory-policy is noeviction. Defaults to false: another policy is logged as a warning.
	RequireNoEviction bool
	// LivenessInterval is how often the process records that it is alive. Defaults to 1 s.
	LivenessInterval time.Duration
	// LivenessTimeout is how long a process may be silent before the dashboard shows it as
	// gone. Defaults to 3 x LivenessInterval.
	LivenessTimeout time.Duration
	// ClaimInterval is how often each task stream is scanned for parked entries to check and
	// for entries to claim, those held by a consumer that stopped touching them for a lease.
	// Defaults to 1 s.
	ClaimInterval time.Duration
	// Grace is how long running owners may finish after shutdown begins. The rest are failed as
	// retryable and their entries left for another consumer. Defaults to 10 s.
	Grace time.Duration
	// TrimInterval is how often acknowledged task entries are trimmed from the task streams, by
	// XTRIM MINID below every group's delivered and pending entries. Defaults to 30 s.
	TrimInterval time.Duration
	// Breaker configures the circuit breaker around the consumer's flight acquires.
	Breaker executor.BreakerConfig
	// ResultRetention is how long terminal events stay on the result streams. Every
	// TrimInterval each consumer trims its stages' result streams by age with XTRIM MINID ~ by
	// Redis's clock, as well as by count with ResultMaxLen. Clients whose start point was
	// trimmed read the flight's stored outcome instead. Zero means 1 h. Negative turns the age
	// trim off.
	ResultRetention time.Duration
	// ResultMaxLen caps each result stream with XADD MAXLEN ~. A client that reads an event
	// later than this many newer ones finds the task's outcome in its flight instead, as
	// client.Await does. Zero means topics.DefaultResultMaxLen, 1,000,000. Negative turns the
	// cap off.
	ResultMaxLen int64
	// AnswerAfterScript writes a flight script's answers, its events and acknowledgements, in a
	// second call after the script instead of inside it, as on Redis Cluster. Defaults to false
	// on a single node.
	AnswerAfterScript bool
	// Archive is the durable archive of outcomes from package archive, or nil for none. With
	// it, every outcome an owner settles is archived in batches, off the owner's path, and
	// spooled to SpoolDir while the archive does not answer. A new owner answers its key from
	// the archive when it holds the key's final outcome, without a model call. The consumer
	// does not close it.
	Archive archive.Store
	// SpoolDir is the base directory of the archive's spools and of the spools of uncertain
	// outcomes, the results the model produced but Redis could not store. The consumer keeps
	// its files in its deployment's subdirectory, which flight.DeploymentSpoolDir names after
	// the keyspace prefix and Deployment. Its files are named after Name. At start it adopts
	// and writes back the spools that stopped processes of its deployment left there. The
	// directory must be owned by this process's user and writable by nobody else, or the
	// consumer refuses to start. Defaults to flight.DefaultSpoolDir(os.Getenv), which has no
	// shared fallback. Give it a durable volume in production.
	SpoolDir string
	// Deployment names the Redis the consumer serves, for its spool directory. With the
	// keyspace prefix it keeps two deployments on one host apart. Defaults to
	// redisconn.Deployment of RedisURL, else to redisconn.ClientDeployment of NewClient's
	// client. ClientDeployment finds none for a Sentinel client given as NewClient, so set
	// Deployment then.
	Deployment string
}

func (c *Config) setDefaults() error {
	if c.NewClient == nil && c.RedisURL != "" {
		f, err := redisconn.UniversalWithTLS(c.RedisURL, redisconn.TLSFiles{})
		if err != nil {
			return fmt.Errorf("handlers: RedisURL: %w", err)
		}
		c.NewClient = f
	}
	if c.Deployment == "" && c.RedisURL != "" {
		c.Deployment = redisconn.Deployment(c.RedisURL)
	}
	if c.Deployment == "" && c.NewClient != nil {
		probe := c.NewClient() // closed at once: it is only asked its address
		c.Deployment = redisconn.ClientDeployment(probe)
		_ = probe.Close()
	}
	c.Stages = withHandlerStages(c.Stages, c.Handlers)
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
	if c.Grace == 0 {
		c.Grace = 10 * time.Second
	}
	if c.ResultRetention == 0 {
		c.ResultRetention = time.Hour
	}
	if c.TrimInterval == 0 {
		c.TrimInterval = 30 * time.Second
	}
	if c.SpoolDir == "" {
		c.SpoolDir = flight.DefaultSpoolDir(os.Getenv)
	}
	if len(c.Limits.Stages) == 0 {
		for _, s := range c.Stages {
			c.Limits.Stages = append(c.Limits.Stages, s.Name)
		}
	}
	c.Limits = c.Limits.WithDefaults()
	return nil
}

// withHandlerStages returns stages plus the stages registered in mux, with the built-in policy
// or else the generic defaults. It sets the Model of every stage mux runs to its adapter's
// name. stages is not modified.
func withHandlerStages(stages []StageConfig, mux *Mux) []StageConfig {
	if mux == nil {
		return stages
	}
	out := slices.Clone(stages)
	builtin := defaultStages()
	for _, name := range mux.Stages() {
		if !slices.ContainsFunc(out, func(s StageConfig) bool { return s.Name == name }) {
			sc, ok := builtin[name]
			if !ok {
				sc = StageConfig{Name: name}
			}
			out = append(out, sc.WithDefaults())
		}
	}
	for i := range out {
		if mdl, ok := mux.handler(out[i].Name); ok {
			out[i].Model = mdl.Name()
		}
	}
	return out
}

// modelFor returns the model that runs stage s: its Handlers entry, else Models[s.Model].
func (c *Config) modelFor(s StageConfig) (model.Model, bool) {
	if mdl, ok := c.Handlers.handler(s.Name); ok {
		return mdl, true
	}
	mdl, ok := c.Models[s.Model]
	return mdl, ok
}

func (c *Config) validate() error {
	var errs []error
	if c.NewClient == nil {
		errs = append(errs, errors.New("NewClient or RedisURL is required"))
	}
	if len(c.Stages) == 0 {
		errs = append(errs, errors.New("no stages"))
	}
	if strings.ContainsAny(c.Name, "/ \t\n") || strings.HasPrefix(c.Name, "~") || c.Name == "" {
		errs = append(errs, fmt.Errorf("name %q must not contain '/' or whitespace nor start with '~'", c.Name))
	}
	if err := c.Keyspace.Validate(); err != nil {
		errs = append(errs, err)
	}
	for _, s := range c.Stages {
		if err := s.Validate(); err != nil {
			errs = append(errs, err)
		}
		if _, ok := c.modelFor(s); !ok {
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
