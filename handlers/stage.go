package handlers

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"sort"
	"strings"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/flightdeck-ai/flightdeck/archive"
	"github.com/flightdeck-ai/flightdeck/executor"
	"github.com/flightdeck-ai/flightdeck/flight"
	"github.com/flightdeck-ai/flightdeck/topics"
)

// The four built-in stages. See DESIGN.md section 7.
const (
	stageEvaluation = "interview-evaluation"
	stageFollowup   = "interview-followup"
	stageExtraction = "interview-extraction"
	stageDemeanor   = "interview-demeanor"
)

// StageConfig is the policy of one stage. A zero field takes the stage's built-in default if it
// has one, else the generic default named in the field's comment.
type StageConfig struct {
	// Name is the stage name. Its task stream is ai:tasks:<Name>.
	Name string `yaml:"-"`
	// Model names the model adapter: "sim" or "openai". Defaults to "sim". A stage given a
	// handler in Config.Handlers runs that instead.
	Model string `yaml:"model"`
	// OpenAI overrides the shared OpenAI settings for this stage. It is valid only with Model
	// "openai".
	OpenAI *OpenAIStage `yaml:"openai"`
	// Mode is the stage's coordination mode. HYBRID and DISTRIBUTED_ONLY run each key once
	// across the fleet. A consumer cannot degrade further: without Redis it has no stream to
	// read and nowhere to publish, so a message whose coordination fails is retried and then
	// redelivered. LOCAL_ONLY runs each key once per consumer process, by in-process
	// single-flight. BYPASS runs every task. Both still publish one event per task. Defaults to
	// HYBRID.
	Mode executor.Mode `yaml:"mode"`
	// Limiter names the limiter in the stage file's limiters whose budget the stage's model
	// calls take from, fleet-wide. Stages naming one limiter share it. Empty means none.
	Limiter string `yaml:"limiter"`
	// Limit is the named limiter's budget, set from the stage file's limiters.
	Limit *flight.Limit `yaml:"-"`
	// Prices is the stage file's price table, which the savings ledger prices the stage's
	// model calls by.
	Prices Prices `yaml:"-"`
	// EstimateTokens is the output part of a call's token estimate, which a limiter with
	// tokensPerMinute reserves before the call. The input adds a token per 4 bytes. Defaults to
	// openai.maxTokens, else 1024.
	EstimateTokens int `yaml:"estimateTokens"`
	// Policy is the stage's flight policy. Its fields sit at the stage's level in the file.
	// MaxParked defaults to 10000 here. See DESIGN.md section 7.
	flight.Policy `yaml:",inline"`
	// HeartbeatInterval is how often an owner renews its lease. Defaults to 1 s.
	HeartbeatInterval time.Duration `yaml:"heartbeatInterval"`
	// WaitTimeout bounds how long an in-process follower waits before it re-acquires.
	// Defaults to the lease.
	WaitTimeout time.Duration `yaml:"waitTimeout"`
	// L1Replay keeps a finished result in process memory for a short replay. Defaults per stage.
	L1Replay *bool `yaml:"l1Replay"`
	// Concurrency is how many tasks of the stage one consumer process runs at once, and so
	// its most model calls at once; tasks that only wait (joined or parked) do not count. A
	// joined task that goes on to run after its owner failed counts again, and may pass it
	// until the consumer is back under it, reading nothing meanwhile. Defaults to 64.
	Concurrency int `yaml:"concurrency"`
	// RateLimit caps model calls per second per consumer in degraded mode. 0 means none.
	RateLimit float64 `yaml:"rateLimit"`
	// SessionLock runs one task per session at a time across the fleet. Defaults per stage.
	SessionLock *bool `yaml:"sessionLock"`
	// Partitions splits the stage's task stream into this many streams ai:tasks:<stage>:<p>, as
	// topics.Keyspace.Partitions describes. Each consumer runs Concurrency subscribers on each.
	// Producers must use the same count. Defaults to 1, one stream ai:tasks:<stage>.
	Partitions int `yaml:"partitions"`
	// MaxInlineResult is the largest result carried inline in the owner's own event. Larger
	// ones carry only resultRef. Defaults to 64 KiB.
	MaxInlineResult int `yaml:"maxInlineResult"`
	// MaxSharedInlineResult is the largest result carried inline in the events of tasks
	// answered by another task's run: followers, joined tasks and hits. It keeps a burst of
	// small duplicates from copying a big result into the result stream once each. Larger ones
	// carry only resultRef, which clients read. Defaults to 1 KiB, never above MaxInlineResult.
	MaxSharedInlineResult int `yaml:"maxSharedInlineResult"`
	// Retry is the backoff between owner attempts after a retryable failure. A provider's
	// Retry-After wins when it is longer. A delay over 2 s is waited in the stage's scheduled
	// set, holding no handler. Every task of the key waits for it.
	Retry RetryPolicy `yaml:"retry"`
	// ScheduleHorizon is how far ahead of the consumer's clock a task's notBefore may lie. A
	// task scheduled further ahead is dead-lettered not_before_too_far with a FAILED event, and
	// a retry delay is cut to it. Defaults to 7 days, topics.DefaultScheduleHorizon.
	ScheduleHorizon time.Duration `yaml:"scheduleHorizon"`
	// ArchiveRetention is how long the durable archive, Config.Archive, keeps the stage's
	// outcomes. A result answers its key from the archive this long after it was produced,
	// whatever Redis still holds. Defaults to 30 days.
	ArchiveRetention time.Duration `yaml:"archiveRetention"`
	// ParkCheck is how long a parked task rests between checks of its flight by the claim
	// loops. Normally the flight's owner answers a parked task at once. One whose flight ended
	// is answered by whoever checks it, and one whose flight vanished once its owner could have
	// written the flight back (a lease). Defaults to twice the lease.
	ParkCheck time.Duration `yaml:"parkCheck"`
	// JoinWait is how long a task waits for its key's owner when that owner runs in the same
	// consumer. The task holds no handler while it waits. The owner's complete answers it too,
	// in the same call, and the task makes no call to Redis of its own. After JoinWait it
	// acquires the flight like any task and parks on it, holding no handler. Defaults to 50 ms,
	// or the lease when shorter. Negative turns it off. At most the lease.
	JoinWait time.Duration `yaml:"joinWait"`
}

func ptr(b bool) *bool { return &b }

// defaultStages returns the built-in policies of the four stages of DESIGN.md section 7.
func defaultStages() map[string]StageConfig {
	stage := func(name string, beat, lease, running, result time.Duration, replay, session bool) StageConfig {
		return StageConfig{Name: name, HeartbeatInterval: beat, L1Replay: ptr(replay), SessionLock: ptr(session),
			Policy: flight.Policy{Lease: lease, RunningTTL: running, ResultTTL: result}}
	}
	return map[string]StageConfig{
		stageEvaluation: stage(stageEvaluation, time.Second, 5*time.Second, 2*time.Minute, 10*time.Minute, true, false),
		stageFollowup:   stage(stageFollowup, time.Second, 5*time.Second, 2*time.Minute, 10*time.Minute, true, false),
		stageExtraction: stage(stageExtraction, 5*time.Second, 20*time.Second, 15*time.Minute, 24*time.Hour, true, true),
		stageDemeanor:   stage(stageDemeanor, 5*time.Second, 20*time.Second, 10*time.Minute, time.Hour, false, true),
	}
}

// WithDefaults returns c with every zero field set to its generic default.
func (c StageConfig) WithDefaults() StageConfig {
	if c.Model == "" {
		c.Model = "sim"
	}
	if c.Mode == "" {
		c.Mode = executor.ModeHybrid
	}
	if c.ArchiveRetention == 0 {
		c.ArchiveRetention = archive.DefaultRetention
	}
	if c.ScheduleHorizon == 0 {
		c.ScheduleHorizon = topics.DefaultScheduleHorizon
	}
	if c.MaxParked == 0 {
		c.MaxParked = 10000
	}
	if c.EstimateTokens == 0 {
		c.EstimateTokens = 1024
		if c.OpenAI != nil && c.OpenAI.MaxTokens > 0 {
			c.EstimateTokens = c.OpenAI.MaxTokens
		}
	}
	c.Policy = c.Policy.WithDefaults()
	if c.HeartbeatInterval == 0 {
		c.HeartbeatInterval = time.Second
	}
	if c.WaitTimeout == 0 {
		c.WaitTimeout = c.Lease
	}
	if c.L1Replay == nil {
		c.L1Replay = ptr(false)
	}
	if c.Concurrency == 0 {
		c.Concurrency = 64
	}
	if c.SessionLock == nil {
		c.SessionLock = ptr(false)
	}
	if c.Partitions == 0 {
		c.Partitions = 1
	}
	if c.MaxInlineResult == 0 {
		c.MaxInlineResult = 64 << 10
	}
	if c.MaxSharedInlineResult == 0 {
		c.MaxSharedInlineResult = min(1<<10, c.MaxInlineResult)
	}
	if c.ParkCheck == 0 {
		c.ParkCheck = 2 * c.Lease
	}
	if c.JoinWait == 0 {
		c.JoinWait = min(50*time.Millisecond, c.Lease)
	}
	return c
}

// Validate reports values a consumer cannot run with.
func (c StageConfig) Validate() error {
	var errs []error
	if _, err := flight.SemanticKey(flight.KeyParams{Stage: c.Name, Tenant: "t", Input: []byte("0")}); err != nil {
		errs = append(errs, fmt.Errorf("name: %w", err))
	}
	switch c.Mode {
	case executor.ModeDistributedOnly, executor.ModeLocalOnly, executor.ModeHybrid, executor.ModeBypass:
	default:
		errs = append(errs, fmt.Errorf("mode %q: want DISTRIBUTED_ONLY, LOCAL_ONLY, HYBRID or BYPASS", c.Mode))
	}
	if c.HeartbeatInterval <= 0 || 2*c.HeartbeatInterval > c.Lease {
		errs = append(errs, fmt.Errorf("heartbeatInterval %v must be positive and at most half the lease %v", c.HeartbeatInterval, c.Lease))
	}
	if err := c.Retry.validate(); err != nil {
		errs = append(errs, err)
	}
	if c.ArchiveRetention < 0 {
		errs = append(errs, fmt.Errorf("archiveRetention %v must not be negative", c.ArchiveRetention))
	}
	if c.ScheduleHorizon < 0 {
		errs = append(errs, fmt.Errorf("scheduleHorizon %v must not be negative", c.ScheduleHorizon))
	}
	if c.ParkCheck < 0 {
		errs = append(errs, fmt.Errorf("parkCheck %v must not be negative", c.ParkCheck))
	}
	if c.JoinWait > c.Lease {
		errs = append(errs, fmt.Errorf("joinWait %v must be at most the lease %v", c.JoinWait, c.Lease))
	}
	if c.Durability == flight.DurabilityReplicated && c.ReplicationTimeout >= c.Lease {
		errs = append(errs, fmt.Errorf("replicationTimeout %v must be shorter than the lease %v (an owner's calls are bounded by it)", c.ReplicationTimeout, c.Lease))
	}
	if c.Partitions < 1 || c.Partitions > 64 {
		errs = append(errs, fmt.Errorf("partitions %d: want 1-64", c.Partitions))
	}
	if c.Concurrency < 1 || c.Concurrency > 256 {
		errs = append(errs, fmt.Errorf("concurrency %d: want 1-256", c.Concurrency))
	}
	if err := c.Policy.Validate(); err != nil {
		errs = append(errs, err)
	}
	if c.Limiter != "" && c.Limit == nil {
		errs = append(errs, fmt.Errorf("limiter %q has no limit", c.Limiter))
	}
	if c.Limit != nil {
		if err := flight.CheckLimiterName(c.Limiter); err != nil {
			errs = append(errs, err)
		} else if err := c.Limit.WithDefaults().Validate(); err != nil {
			errs = append(errs, fmt.Errorf("limiter %s: %w", c.Limiter, err))
		}
	}
	if err := c.Prices.Validate(); err != nil {
		errs = append(errs, fmt.Errorf("prices: %w", err))
	}
	if c.EstimateTokens < 0 {
		errs = append(errs, fmt.Errorf("estimateTokens %d must not be negative", c.EstimateTokens))
	}
	if c.OpenAI != nil && c.Model != "openai" {
		errs = append(errs, fmt.Errorf("openai settings given, but the stage's model is %q", c.Model))
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("stage %s: %w", c.Name, err)
	}
	return nil
}

// fileConfig is the YAML stage file: {stages: {<name>: {<field>: <value>}}}.
type fileConfig struct {
	Stages   map[string]yaml.Node    `yaml:"stages"`
	Limiters map[string]flight.Limit `yaml:"limiters"`
	Prices   Prices                  `yaml:"prices"`
}

// errNoStages reports a stage file without a stages mapping: the file is empty, or the stages
// are not under it.
var errNoStages = errors.New("no stages: want stages: {<stage name>: {<field>: <value>}}")

// decodeStageFile reads the YAML stage file strictly. A misspelt field, a top-level key other
// than stages, limiters and prices, or a file without stages is reported with its line, rather than
// silently leaving the defaults in place. Keys x-<anything> are free, for YAML anchors to merge
// from. "stages:" with nothing under it is an empty set of overrides.
func decodeStageFile(raw []byte) (fileConfig, error) {
	var strict struct {
		Stages   map[string]StageConfig  `yaml:"stages"`
		Limiters map[string]flight.Limit `yaml:"limiters"`
		Prices   Prices                  `yaml:"prices"`
		Extra    map[string]yaml.Node    `yaml:",inline"`
	}
	dec := yaml.NewDecoder(bytes.NewReader(raw))
	dec.KnownFields(true)
	if err := dec.Decode(&strict); err != nil {
		if errors.Is(err, io.EOF) {
			return fileConfig{}, errNoStages
		}
		return fileConfig{}, err
	}
	var top map[string]yaml.Node
	if err := yaml.Unmarshal(raw, &top); err != nil {
		return fileConfig{}, err
	}
	keys := make([]string, 0, len(top))
	for k := range top {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		if k != "stages" && k != "limiters" && k != "prices" && !strings.HasPrefix(k, "x-") {
			return fileConfig{}, fmt.Errorf("line %d: %q is not a stage file key: want stages: {<stage name>: {...}}, limiters: {<name>: {...}} and prices: {<model>: {...}} (x-... keys are free)",
				top[k].Line, k)
		}
	}
	if _, ok := top["stages"]; !ok {
		return fileConfig{}, errNoStages
	}
	// The stages decoded again as nodes, each over its built-in stage's fields.
	var fc fileConfig
	if err := yaml.Unmarshal(raw, &fc); err != nil {
		return fileConfig{}, err
	}
	return fc, nil
}

// LoadStages returns the built-in stages overridden by the YAML file at path, if path is not
// "". A file may override any field of a built-in stage and may add stages. When only is
// non-empty, just those stages are returned. Every returned stage has its defaults set and is
// valid.
func LoadStages(path string, only []string) ([]StageConfig, error) {
	stages := defaultStages()
	var limiters map[string]flight.Limit
	var prices Prices
	if path != "" {
		raw, err := os.ReadFile(path)
		if err != nil {
			return nil, fmt.Errorf("handlers: stage config: %w", err)
		}
		fc, err := decodeStageFile(raw)
		if err != nil {
			return nil, fmt.Errorf("handlers: stage config %s: %w", path, err)
		}
		for name, node := range fc.Stages {
			sc := stages[name]
			if err := node.Decode(&sc); err != nil {
				return nil, fmt.Errorf("handlers: stage config %s: stage %s: %w", path, name, err)
			}
			sc.Name = name
			stages[name] = sc
		}
		limiters, prices = fc.Limiters, fc.Prices
		if err := prices.Validate(); err != nil {
			return nil, fmt.Errorf("handlers: stage config %s: prices: %w", path, err)
		}
		for name, l := range limiters {
			if err := flight.CheckLimiterName(name); err != nil {
				return nil, fmt.Errorf("handlers: stage config %s: %w", path, err)
			}
			if err := l.WithDefaults().Validate(); err != nil {
				return nil, fmt.Errorf("handlers: stage config %s: limiter %s: %w", path, name, err)
			}
		}
	}
	names := only
	if len(names) == 0 {
		for n := range stages {
			names = append(names, n)
		}
		sort.Strings(names)
	}
	out := make([]StageConfig, 0, len(names))
	for _, n := range names {
		sc, ok := stages[n]
		if !ok {
			known := make([]string, 0, len(stages))
			for k := range stages {
				known = append(known, k)
			}
			sort.Strings(known)
			return nil, fmt.Errorf("%w %q (known: %s; define it in the stage config file)",
				ErrUnknownStage, n, strings.Join(known, ", "))
		}
		if sc.Limiter != "" {
			l, ok := limiters[sc.Limiter]
			if !ok {
				return nil, fmt.Errorf("handlers: stage %s: limiter %q is not in the stage file's limiters", n, sc.Limiter)
			}
			sc.Limit = &l
		}
		sc.Prices = prices
		sc = sc.WithDefaults()
		if err := sc.Validate(); err != nil {
			return nil, fmt.Errorf("handlers: %w", err)
		}
		out = append(out, sc)
	}
	return out, nil
}

// ErrUnknownStage reports a stage named in LoadStages' only that neither the built-in stages
// nor the config file define.
var ErrUnknownStage = errors.New("handlers: unknown stage")

// Keyspace returns ks with the stages' partition counts set.
func Keyspace(ks topics.Keyspace, stages []StageConfig) topics.Keyspace {
	parts := map[string]int{}
	for k, v := range ks.Partitions {
		parts[k] = v
	}
	for _, s := range stages {
		if s.Partitions > 1 {
			parts[s.Name] = s.Partitions
		}
	}
	ks.Partitions = parts
	return ks
}
