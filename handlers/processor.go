package handlers

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/ThreeDotsLabs/watermill/message/router/middleware"
	"github.com/redis/go-redis/v9"
	"github.com/rs/zerolog"
	"go.opentelemetry.io/otel/trace"

	"github.com/flightdeck-ai/flightdeck/archive"
	"github.com/flightdeck-ai/flightdeck/executor"
	"github.com/flightdeck-ai/flightdeck/flight"
	"github.com/flightdeck-ai/flightdeck/handlers/model"
	"github.com/flightdeck-ai/flightdeck/internal/broker"
	"github.com/flightdeck-ai/flightdeck/lua"
	"github.com/flightdeck-ai/flightdeck/stream"
	"github.com/flightdeck-ai/flightdeck/topics"
)

// Errors that end a handler run without acknowledging its message.
var (
	// ErrShuttingDown means the consumer is stopping and the entry is handed over to the other
	// consumers. It is never retried and never dead-lettered.
	ErrShuttingDown = errors.New("handlers: consumer shutting down")
)

// leavesPending reports errors after which the message stays pending on purpose.
func leavesPending(err error) bool { return errors.Is(err, ErrShuttingDown) }

// lifecycle is shared by a consumer's processors: it tells them when to stop taking work
// and when to abandon running owners.
type lifecycle struct {
	// stop is cancelled when handlers must return, after the grace period.
	stop context.Context
	// owners is cancelled, with cause ErrShuttingDown, when running owners must give up.
	owners   context.Context
	draining atomic.Bool
	running  atomic.Int64 // owner runs in progress
}

// processor turns the task messages of one stage into flight runs. It decodes and validates
// each message and dead-letters what it cannot read, with a FAILED event when the task names
// itself. It acquires the flight and, as owner, runs the model with a heartbeat. The flight
// scripts themselves park followers and answer final outcomes. Every task gets one terminal
// event, at least once. Safe for concurrent use.
type processor struct {
	stage   StageConfig
	pol     flight.Policy
	coord   *flight.Coordinator
	writer  broker.Writer
	rdb     redis.UniversalClient
	ks      topics.Keyspace
	model   model.Model
	name    string
	limits  topics.Limits
	log     zerolog.Logger
	metrics *metrics
	ledger  *stageLedger
	tracer  trace.Tracer // nil without tracing
	// modelName is the model the stage calls, as spans name it.
	modelName string
	life      *lifecycle
	sessions  *flight.SessionLock
	spool     *flight.Spool
	local     *executor.Local[[]byte] // LOCAL_ONLY stages
	breaker   *executor.Breaker
	archive   *archive.Writer // nil without an archive
	owner     *flight.Owner   // the owner lifecycle of the stage's flights
	joins     *joins          // the keys' leaders among the running tasks, see join.go
	gone      goneFlights     // parked entries whose flight the claim check found gone
}

// entry is the stream entry a handler run holds.
type entry struct {
	stream string // the task stream partition it came from
	id     string // stream entry id
}

func (p *processor) handle(msg *message.Message, retried bool) (err error) {
	ctx := p.life.stop
	ent := entry{stream: msg.Metadata.Get(stream.MetaStream), id: msg.Metadata.Get(stream.MetaEntry)}
	corr := middleware.MessageCorrelationID(msg) // a producer's metadata: up to 16 KiB
	if corr == "" {
		corr = msg.UUID
	}
	corr = logID(corr)
	log := func() zerolog.Logger { // only a dead letter logs before the task is known
		return p.log.With().Str("entry", ent.id).Str("correlationId", corr).Logger()
	}
	if reason := msg.Metadata.Get(metaBadEntry); reason != "" {
		var raw map[string]any
		if md := msg.Metadata.Get(metaRawMetadata); md != "" {
			raw = map[string]any{"metadata": md}
		}
		return p.deadLetter(ctx, log(), msg, reason, msg.Metadata.Get(metaBadDetail), raw)
	}
	task, err := topics.DecodeTask(msg.Payload, p.limits)
	if err != nil {
		reason := "invalid_task"
		var ite *topics.InvalidTaskError
		if errors.As(err, &ite) {
			reason = string(ite.Reason)
		}
		return p.deadLetter(ctx, log(), msg, reason, err.Error(), nil)
	}
	if task.Stage != p.stage.Name {
		return p.deadLetter(ctx, log(), msg, "stage_mismatch",
			fmt.Sprintf("task stage %q arrived on the stream of stage %q", task.Stage, p.stage.Name), nil)
	}
	key, err := TaskKey(task)
	if err != nil {
		return p.deadLetter(ctx, log(), msg, "bad_key", err.Error(), nil)
	}
	t := &taskRun{p: p, msg: msg, task: task, key: key, ent: ent, corr: corr, received: time.Now(), retried: retried}
	ctx = t.startTask(ctx)
	defer func() { t.endTask(err) }()
	if nb, ok := task.NotBeforeTime(); ok && nb.After(t.received) {
		// A task scheduled past the horizon would sit in the scheduled set for as long as it
		// names, up to year 9999. It is refused, as producers refuse it before XADD.
		if err := task.CheckNotBefore(t.received, p.stage.ScheduleHorizon); err != nil {
			return p.deadLetter(ctx, log(), msg, string(topics.ReasonNotBeforeTooFar),
				err.Error()+" (the stage's scheduleHorizon)", nil)
		}
		return t.wait(ctx, nb, "not_before")
	}
	// The wait counts from the entry's id by Redis's clock and from the notBefore, never from
	// the producer's enqueuedAt. It is bounded by when the subscriber knew the stream drained,
	// since an id a producer gave may lie further back. A wait over topics.MaxClockSkew counts
	// as unknown: queued 0 in events and metrics, and no queue-wait sample.
	var after time.Time
	if ms, err := strconv.ParseInt(msg.Metadata.Get(stream.MetaAddedAfter), 10, 64); err == nil {
		after = time.UnixMilli(ms)
	}
	if queued, ok := task.EntryQueueWait(ent.id, after, t.received); ok {
		t.queued = queued
		if msg.Metadata.Get(stream.MetaHow) == "read" {
			p.metrics.queueWait.WithLabelValues(task.Stage).Observe(t.queued.Seconds())
		}
	}
	return t.run(ctx)
}

// maxLogID bounds a logged id taken from a message, its correlation id or uuid.
const maxLogID = 128

// logID returns s cut to maxLogID bytes.
func logID(s string) string {
	if len(s) <= maxLogID {
		return s
	}
	return s[:maxLogID]
}

// TaskKey returns the flight key of a task, as flight.TaskKey does.
func TaskKey(t topics.Task) (string, error) { return flight.TaskKey(t) }

// deadLetter writes msg to the stage's dead-letter stream with reason. Payload, raw metadata,
// detail and uuid are cut to at most topics.MaxDeadLetterBytes in all, and the detail names
// what is cut with its size and SHA-256. When the payload names a readable task id, deadLetter
// also writes a FAILED terminal event for that task, so that a client waiting for it does not
// hang. The event has errorType invalid_task, errorCode the reason, and entry the message's
// stream entry, by which its client matches it. The message is then acknowledged.
func (p *processor) deadLetter(ctx context.Context, log zerolog.Logger, msg *message.Message, reason, detail string, raw map[string]any) error {
	dl := topics.DeadLetter{Stage: p.stage.Name, UUID: msg.UUID, Payload: msg.Payload,
		Raw: raw, Reason: reason, Detail: detail, Consumer: p.name}.Bound()
	ctx = context.WithoutCancel(ctx)
	if err := p.writer.DeadLetter(ctx, dl); err != nil {
		return fmt.Errorf("handlers: dead-letter %s: %w", dl.UUID, err)
	}
	p.metrics.deadLetters.WithLabelValues(p.stage.Name, dl.Reason).Inc()
	log.Warn().Str("reason", dl.Reason).Str("detail", dl.Detail).Str("uuid", dl.UUID).Msg("task dead-lettered")
	if id := namedTaskID(msg.Payload, p.limits); id != "" {
		ev := topics.Event{TaskID: id, Stage: p.stage.Name, Status: topics.StatusFailed, Shared: topics.SharedOwner,
			ErrorType: "invalid_task", ErrorCode: dl.Reason, Error: dl.Detail, FinishedAt: time.Now(), Consumer: p.name,
			Entry: msg.Metadata.Get(stream.MetaEntry)}
		if tenant := namedField(msg.Payload, "tenant"); topics.CheckTenant(tenant) == nil {
			ev.Tenant = tenant
		}
		if err := p.writer.PublishEvents(ctx, ev); err != nil {
			return fmt.Errorf("handlers: dead-letter event of %s: %w", id, err)
		}
		p.metrics.tasks.WithLabelValues(p.stage.Name, "owner_FAILED").Inc()
	}
	return nil
}

// namedTaskID returns the taskId a refused payload names, else "". The payload must be a JSON
// object with a string taskId that passes the id rules.
func namedTaskID(payload []byte, lim topics.Limits) string {
	id := namedField(payload, "taskId")
	if id == "" || topics.CheckID(id, lim) != nil {
		return ""
	}
	return id
}

// namedField returns the string field name of a JSON object payload, or "". It reads names as
// DecodeTask does, by topics.NamedField: exact and not duplicated.
func namedField(payload []byte, name string) string { return topics.NamedField(payload, name) }

// redisUnavailable reports errors that mean Redis could not be used for a while, as opposed to
// errors of the task itself. They include a refused or reset connection, timeouts, a closed or
// exhausted pool, a restarting or failing-over server, and a flight library Redis lost that
// this consumer may not load again. A message whose handling failed that way is never
// dead-lettered: it stays pending and comes back when Redis answers again.
func redisUnavailable(err error) bool {
	if err == nil {
		return false
	}
	var ne net.Error
	if errors.Is(err, flight.ErrCoordinationUnavailable) || errors.Is(err, lua.ErrLibraryMissing) || errors.As(err, &ne) ||
		errors.Is(err, redis.ErrClosed) || errors.Is(err, redis.ErrPoolTimeout) ||
		errors.Is(err, context.DeadlineExceeded) || errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) ||
		errors.Is(err, syscall.ECONNREFUSED) || errors.Is(err, syscall.ECONNRESET) {
		return true
	}
	msg := err.Error()
	for _, s := range []string{"LOADING", "BUSY", "MASTERDOWN", "CLUSTERDOWN", "TRYAGAIN", "READONLY",
		"connection refused", "connection reset", "broken pipe", "i/o timeout"} {
		if strings.Contains(msg, s) {
			return true
		}
	}
	return false
}

func sleep(ctx context.Context, d time.Duration) bool {
	tm := time.NewTimer(d)
	defer tm.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-tm.C:
		return true
	}
}
