package gateway

import (
	"crypto/sha256"
	"errors"
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/rs/zerolog"
	"go.opentelemetry.io/otel/trace"

	"github.com/flightdeck-ai/flightdeck/topics"
)

// ErrConfig is wrapped by every error about a Config or a tokens file that cannot work.
var ErrConfig = errors.New("gateway: invalid configuration")

// Config configures a Server. Zero fields take the defaults their comments name.
type Config struct {
	// Client is the Redis client of every tenant's streams and keys: the gateway's one Redis
	// credential. Required. The Server does not close it.
	Client redis.UniversalClient
	// Tokens are the API tokens and what each may reach. Required: at least one.
	Tokens []Token
	// Stages, when set, are the only stages a token may enqueue to, follow or name in a key.
	// Defaults to any stage.
	Stages []string
	// MaxWait bounds the wait query parameter. Defaults to 60 s.
	MaxWait time.Duration
	// MaxBodyBytes bounds a request body. Defaults to 1 MiB.
	MaxBodyBytes int64
	// Limits bounds the tasks as the consumers check them. Zero fields take the topics
	// defaults.
	Limits topics.Limits
	// ScheduleHorizon is how far ahead a task's notBefore may lie, as the stages' own
	// scheduleHorizon. Defaults to topics.DefaultScheduleHorizon, 7 days.
	ScheduleHorizon time.Duration
	// MaxWaitsPerToken bounds the requests of one token that wait for an event at once.
	// Defaults to 64.
	MaxWaitsPerToken int
	// MaxStreamsPerToken bounds the event streams of one token open at once. Defaults to 8.
	MaxStreamsPerToken int
	// MaxStreamStages bounds the stages one event stream follows. Defaults to 16.
	MaxStreamStages int
	// StreamDuration bounds the life of one event stream; the client then reconnects with
	// Last-Event-ID. Defaults to 30 min.
	StreamDuration time.Duration
	// Heartbeat is how often an event stream sends a comment, and its position when it
	// advanced. Defaults to 15 s.
	Heartbeat time.Duration
	// RecordTTL is how long the receipt and idempotency records of a task live. Defaults to
	// 24 h.
	RecordTTL time.Duration
	// Timeout bounds the Redis work of one request, its wait aside. Defaults to 5 s.
	Timeout time.Duration
	// FailuresPerMinute bounds the requests with a wrong token per client network, as
	// authlimit counts them. Defaults to 5.
	FailuresPerMinute int
	// Logger receives a line per request at debug level, and warnings. It never receives a
	// token. Defaults to a logger that drops everything.
	Logger *zerolog.Logger
	// Now is the clock of enqueue times and rate limits. Defaults to time.Now.
	Now func() time.Time
	// TracerProvider, when set, makes a producer span of every enqueue, a child of the
	// request's traceparent when it has one. Defaults to none: the task carries the request's
	// trace context as it came.
	TracerProvider trace.TracerProvider
}

// Token is one API token: the SHA-256 of its secret, and the tenant and key prefix it acts
// for. A token reaches only its tenant's tasks, keys and events under its prefix.
type Token struct {
	// Name identifies the token in logs, where the token itself never appears. Defaults to
	// the tenant.
	Name string
	// SHA256 is the SHA-256 of the token's secret, as HashToken computes it.
	SHA256 [sha256.Size]byte
	// Tenant is the tenant of every task the token enqueues, and the only one it reads.
	// Required.
	Tenant string
	// Prefix is the key prefix of the tenant's streams and keys, the consumers' --prefix.
	// Defaults to "ai".
	Prefix string
	// Partitions are the task stream partitions of the prefix's stages, as
	// topics.Keyspace.Partitions. Tokens of one prefix must agree. Defaults to none.
	Partitions map[string]int
}

// HashToken returns the SHA-256 of a token's secret, the value a Token holds.
func HashToken(secret string) [sha256.Size]byte { return sha256.Sum256([]byte(secret)) }

func (c *Config) setDefaults() {
	if c.MaxWait <= 0 {
		c.MaxWait = time.Minute
	}
	if c.MaxBodyBytes <= 0 {
		c.MaxBodyBytes = 1 << 20
	}
	if c.ScheduleHorizon == 0 {
		c.ScheduleHorizon = topics.DefaultScheduleHorizon
	}
	if c.MaxWaitsPerToken <= 0 {
		c.MaxWaitsPerToken = 64
	}
	if c.MaxStreamsPerToken <= 0 {
		c.MaxStreamsPerToken = 8
	}
	if c.MaxStreamStages <= 0 {
		c.MaxStreamStages = 16
	}
	if c.StreamDuration <= 0 {
		c.StreamDuration = 30 * time.Minute
	}
	if c.Heartbeat <= 0 {
		c.Heartbeat = 15 * time.Second
	}
	if c.RecordTTL <= 0 {
		c.RecordTTL = 24 * time.Hour
	}
	if c.Timeout <= 0 {
		c.Timeout = 5 * time.Second
	}
	if c.Logger == nil {
		nop := zerolog.Nop()
		c.Logger = &nop
	}
	if c.Now == nil {
		c.Now = time.Now
	}
	c.Limits = c.Limits.WithDefaults()
	for i := range c.Tokens {
		t := &c.Tokens[i]
		if t.Prefix == "" {
			t.Prefix = topics.DefaultPrefix
		}
		if t.Name == "" {
			t.Name = t.Tenant
		}
	}
}

func (c *Config) validate() error {
	if c.Client == nil {
		return fmt.Errorf("%w: Client is required", ErrConfig)
	}
	if len(c.Tokens) == 0 {
		return fmt.Errorf("%w: no tokens", ErrConfig)
	}
	for _, s := range c.Stages {
		if err := topics.CheckStage(s); err != nil {
			return fmt.Errorf("%w: stage %q: %w", ErrConfig, s, err)
		}
	}
	seen := map[[sha256.Size]byte]string{}
	parts := map[string]map[string]int{} // prefix -> partitions
	for i, t := range c.Tokens {
		if err := topics.CheckTenant(t.Tenant); err != nil {
			return fmt.Errorf("%w: token %d (%s): tenant: %w", ErrConfig, i+1, t.Name, err)
		}
		ks := topics.Keyspace{Prefix: t.Prefix, Partitions: t.Partitions}
		if err := ks.Validate(); err != nil {
			return fmt.Errorf("%w: token %d (%s): %w", ErrConfig, i+1, t.Name, err)
		}
		if t.SHA256 == ([sha256.Size]byte{}) {
			return fmt.Errorf("%w: token %d (%s): no SHA-256", ErrConfig, i+1, t.Name)
		}
		if other, dup := seen[t.SHA256]; dup {
			return fmt.Errorf("%w: tokens %s and %s have the same SHA-256", ErrConfig, other, t.Name)
		}
		seen[t.SHA256] = t.Name
		if p, ok := parts[t.Prefix]; ok && !maps.Equal(p, t.Partitions) && !(len(p) == 0 && len(t.Partitions) == 0) {
			return fmt.Errorf("%w: token %s: the partitions of prefix %q differ from another token's", ErrConfig, t.Name, t.Prefix)
		}
		parts[t.Prefix] = t.Partitions
	}
	return nil
}

// stageAllowed reports whether the configured allow-list, if any, holds stage.
func (c *Config) stageAllowed(stage string) bool {
	return len(c.Stages) == 0 || slices.Contains(c.Stages, stage)
}
