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
	// for the stream subscribers' reads (each topic's XREADGROUP blocks a connection while
	// idle), and once more to name the deployment when Deployment and RedisURL are unset. The
	// consumer closes every client it got. Required unless RedisURL is set.
	NewClient func() redis.UniversalClient
	// RedisURL is used when NewClient is nil: redis://[user:password@]host:port/db,
	// rediss:// for TLS, a Sentinel URL (master_name=, the host and addr= as sentinels), or a
	// cluster URL naming more nodes with addr= query parameters.
	RedisURL string
	// Keyspace names keys and streams. Defaults to the "ai" prefix.
	Keyspace topics.Keyspace
	// Name is this process's consumer name in the group. It must not contain '/' or
	// whitespace nor start with '~'. A consumer restarted under the same name picks up its own
	// pending entries at start. Defaults to "<hostname>-<pid>".
	Name string
	// Stages are the stages to consume (see LoadStages). A stage registered in Handlers and
	// missing here is added with its built-in policy (the four built-in stages) or the
	// generic defaults. Required unless Handlers registers a stage.
	Stages []StageConfig
	// Handlers runs each stage registered in it with its function or model adapter, whatever
	// the stage's Model names (the stage's Model becomes the adapter's name, "handler" for a
	// function). Other stages run the adapter that their Model names in Models.
	Handlers *Mux
	// Models are the model adapters by name (StageConfig.Model). Defaults to {"sim": &model.Sim{}}.
	Models map[string]model.Model
	// Limits bound task messages. Defaults to topics.Limits defaults, with Stages set to the
	// consumed stages.
	Limits topics.Limits
	// Logger receives structured logs. Defaults to a disabled logger.
	Logger *zerolog.Logger
	// Registry receives the consumer's metrics. Defaults to none.
	Registry prometheus.Registerer
	// RequireNoEviction makes Run refuse to start (ErrEvictionPolicy) unless Redis's
	// maxmemory-policy is noeviction. Defaults to false: another policy is logged as a warning.
	RequireNoEviction bool
	// LivenessInterval is how often the process records that it is alive. Defaults to 1 s.
	LivenessInterval time.Duration
	// LivenessTimeout: a process silent this long is shown as gone on the dashboard.
	// Defaults to 3 x LivenessInterval.
	LivenessTimeout time.Duration
	// ClaimInterval is how often each task stream is scanned for entries to claim (held by a
	// consumer that stopped touching them for a lease) and parked entries to check.
	// Defaults to 1 s.
	ClaimInterval time.Duration
	// Grace is how long running owners may finish after shutdown begins; the rest are failed
	// as retryable and their entries left for another consumer. Defaults to 10 s.
	Grace time.Duration
	// TrimInterval is how often acknowledged task entries are trimmed from the task streams
	// (XTRIM MINID below every group's delivered and pending entries). Defaults to 30 s.
	TrimInterval time.Duration
	// Breaker configures the circuit breaker around the consumer's flight acquires.
	Breaker executor.BreakerConfig
	// ResultRetention is how long terminal events stay on the result streams: every
	// TrimInterval each consumer trims its stages' result streams by age (XTRIM MINID ~, by
	// Redis's clock), as well as by count (ResultMaxLen). Clients whose start point was
	// trimmed read the flight's stored outcome instead. Zero means 1 h; negative turns the
	// age trim off.
	ResultRetention time.Duration
	// ResultMaxLen caps each result stream (XADD MAXLEN ~): clients that read an event later
	// than this many newer ones find the task's outcome in its flight instead (client.Await).
	// Zero means topics.DefaultResultMaxLen (1,000,000); negative turns the cap off.
	ResultMaxLen int64
	// AnswerAfterScript writes a flight script's answers (events, acknowledgements) in a
	// second call after the script, as on Redis Cluster, instead of inside it. Defaults to
	// false on a single node.
	AnswerAfterScript bool
	// Archive is the durable archive of outcomes (package archive), or nil for none. With it,
	// every outcome an owner settles is archived (batched, off the owner's path; spooled to
	// SpoolDir while the archive does not answer), and a new owner answers its key from the
	// archive when it holds the key's final outcome, without a model call. The consumer
	// does not close it.
	Archive archive.Store
	// SpoolDir is the base directory of the spools of uncertain outcomes (results the model
	// produced but Redis could not store) and of the archive: the consumer keeps its files in
	// the subdirectory of its deployment (flight.DeploymentSpoolDir: named after the keyspace
	// prefix and Deployment), named after Name, and adopts and writes back at start the spools that stopped
	// processes of its deployment left there. The directory must be this process's user's own
	// and writable by nobody else, or the consumer refuses to start.
	// Defaults to flight.DefaultSpoolDir(os.Getenv), which has no shared fallback; give it a
	// durable volume in production.
	SpoolDir string
	// Deployment names the Redis the consumer serves, for its spool directory: with the
	// keyspace prefix it keeps two deployments on one host apart. Defaults to RedisURL's
	// (redisconn.Deployment), else to the address of NewClient's client
	// (redisconn.ClientDeployment); a Sentinel client given as NewClient has none, so set it.
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

// withHandlerStages returns stages with the stages registered in mux added (built-in policy,
// else generic defaults) and the Model of every stage mux runs set to its adapter's name.
// stages is not modified.
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
