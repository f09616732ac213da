package topics

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"
)

// TimeLayout is the layout of the times Flightdeck writes: RFC 3339 with milliseconds.
// Readers accept any RFC 3339 time.
const TimeLayout = "2006-01-02T15:04:05.000Z07:00"

// FormatTime formats t in UTC with TimeLayout, e.g. for Task.EnqueuedAt.
func FormatTime(t time.Time) string { return t.UTC().Format(TimeLayout) }

// Task is the JSON payload of a task message on ai:tasks:<stage>. A Task is a plain value.
// DecodeTask returns one that satisfies Validate.
type Task struct {
	// TaskID identifies this message. Clients match terminal events to it. Required,
	// [A-Za-z0-9._:-], at most Limits.MaxIDLen bytes.
	TaskID string `json:"taskId"`
	// Stage names the pipeline stage, which picks the stage policy. It equals the stage of
	// the stream the task is on. Required, [a-z0-9-], at most 64 bytes, one of
	// Limits.Stages when that is set.
	Stage string `json:"stage"`
	// Tenant owns the task. It is part of every semantic key, so results are never shared
	// across tenants. Required, [a-z0-9_-], at most 64 bytes, one of Limits.Tenants when
	// that is set.
	Tenant string `json:"tenant"`
	// SessionID groups the tasks of one user session for the session lock of heavy stages.
	// Optional, same rules as TaskID.
	SessionID string `json:"sessionId,omitempty"`
	// RequestKey, when set, is the single-flight key chosen by the producer. When empty,
	// the consumer derives the semantic key from Stage, Tenant, Input, ModelVersion,
	// PromptVersion and Params. Optional, [A-Za-z0-9._:/=+-], at most Limits.MaxKeyLen
	// bytes. Only its syntax is checked here, not that it belongs to Tenant.
	RequestKey string `json:"requestKey,omitempty"`
	// Input is the model input, any JSON value except null. Required, at most
	// Limits.MaxInputBytes. DecodeTask returns it compacted.
	Input json.RawMessage `json:"input"`
	// ModelVersion names the model. It enters the semantic key. Optional, printable ASCII
	// without spaces, at most 64 bytes.
	ModelVersion string `json:"modelVersion,omitempty"`
	// PromptVersion names the prompt template. It enters the semantic key. Optional, same
	// rules as ModelVersion.
	PromptVersion string `json:"promptVersion,omitempty"`
	// Deadline is the RFC 3339 time after which the task's result is no longer wanted.
	// Optional. DeadlineTime parses it and CheckDeadline enforces it.
	Deadline string `json:"deadline,omitempty"`
	// Attempt counts earlier deliveries as seen by the producer, starting at 0. Optional,
	// >= 0.
	Attempt int `json:"attempt,omitempty"`
	// EnqueuedAt is the RFC 3339 time, written with FormatTime, at which the producer
	// enqueued the task, for the producer's own use. Consumers measure the queue wait from
	// the stream entry instead, with EntryQueueWait. Optional. EnqueuedTime parses it.
	EnqueuedAt string `json:"enqueuedAt,omitempty"`
	// Params holds the key params: a JSON object of extra values that enter the semantic
	// key. Irrelevant values such as request ids must stay out of it. Optional, and null is
	// the same as absent. DecodeTask returns it compacted, and nil when null.
	Params json.RawMessage `json:"params,omitempty"`
	// NotBefore is the RFC 3339 time before which the task must not start, for a scheduled
	// task like asynq's ProcessAt or river's ScheduledAt. Optional. A consumer that reads it
	// earlier keeps it aside and starts it then: in memory for a moment, or in the stage's
	// scheduled set when it is further away. NotBeforeTime parses it.
	NotBefore string `json:"notBefore,omitempty"`
	// Traceparent and Tracestate carry the W3C trace context of the request that enqueued the
	// task, as the HTTP headers of those names do, so that the consumer's spans join its
	// trace. They never enter the semantic key. Optional: traceparent at most 128 bytes of
	// [0-9a-f-], tracestate at most 512 bytes of printable ASCII. A value of the right form
	// that is not a valid trace context is ignored.
	Traceparent string `json:"traceparent,omitempty"`
	Tracestate  string `json:"tracestate,omitempty"`
}

// DeadlineTime returns the parsed Deadline and true, or the zero time and false when
// Deadline is empty or not RFC 3339.
func (t Task) DeadlineTime() (time.Time, bool) { return parseTime(t.Deadline) }

// NotBeforeTime returns the parsed NotBefore and true, or the zero time and false when
// NotBefore is empty or not RFC 3339.
func (t Task) NotBeforeTime() (time.Time, bool) { return parseTime(t.NotBefore) }

// EnqueuedTime returns the parsed EnqueuedAt and true, or the zero time and false when
// EnqueuedAt is empty or not RFC 3339.
func (t Task) EnqueuedTime() (time.Time, bool) { return parseTime(t.EnqueuedAt) }

// MaxClockSkew bounds the queue waits that count for metrics and events. A longer wait, such
// as from an entry id given by a producer on a stream idle since long, or a time of year 1 or
// 9999, would put up to ±9.2e9 seconds into the queue-wait histogram.
const MaxClockSkew = 24 * time.Hour

// QueueWait returns how long the task has waited since EnqueuedAt, as of now, and true. The
// wait is 0 when EnqueuedAt lies ahead of now. It returns 0 and false when EnqueuedAt is
// empty, not RFC 3339, or more than MaxClockSkew before or after now.
//
// Deprecated: EnqueuedAt is the producer's claim, which any producer may set 23 hours back.
// Consumers measure the wait from the stream entry with EntryQueueWait.
func (t Task) QueueWait(now time.Time) (time.Duration, bool) {
	enq, ok := t.EnqueuedTime()
	if !ok {
		return 0, false
	}
	d := now.Sub(enq) // saturates, so no overflow for any parsed time
	if d > MaxClockSkew || d < -MaxClockSkew {
		return 0, false
	}
	return max(d, 0), true
}

// EntryTime returns the time in a stream entry id "<ms>-<seq>" and true, or false when id is
// not one. That is Redis's clock when the entry was added, unless its producer gave the id.
func EntryTime(id string) (time.Time, bool) {
	ms, _, ok := strings.Cut(id, "-")
	n, err := strconv.ParseInt(ms, 10, 64)
	if !ok || err != nil || n < 0 {
		return time.Time{}, false
	}
	return time.UnixMilli(n), true
}

// EntryQueueWait returns how long the task of stream entry entryID has waited for a consumer
// as of now, and true. The wait runs since the latest of the entry's EntryTime, addedAfter and
// the task's NotBefore, and is 0 when that lies ahead. addedAfter is a time the entry is known
// to be added after, or zero when unknown. It returns 0 and false when entryID holds no time
// or the wait exceeds MaxClockSkew. Such a wait must not be used for a metric or an event.
func (t Task) EntryQueueWait(entryID string, addedAfter, now time.Time) (time.Duration, bool) {
	from, ok := EntryTime(entryID)
	if !ok {
		return 0, false
	}
	if addedAfter.After(from) {
		from = addedAfter
	}
	if nb, ok := t.NotBeforeTime(); ok && nb.After(from) {
		from = nb
	}
	d := now.Sub(from)
	if d > MaxClockSkew {
		return 0, false
	}
	return max(d, 0), true
}

func parseTime(s string) (time.Time, bool) {
	if s == "" {
		return time.Time{}, false
	}
	tm, err := time.Parse(time.RFC3339, s)
	if err != nil {
		return time.Time{}, false
	}
	return tm, true
}

// CheckDeadline returns an *InvalidTaskError with ReasonDeadlinePassed when t has a
// deadline that is not after now, and nil otherwise. A missing deadline returns nil, and so
// does an unparsable one, which Validate reports.
func (t Task) CheckDeadline(now time.Time) error {
	d, ok := t.DeadlineTime()
	if !ok || now.Before(d) {
		return nil
	}
	return invalid(ReasonDeadlinePassed, "deadline", fmt.Sprintf("%s is not after %s", t.Deadline, FormatTime(now)))
}

// DefaultScheduleHorizon is how far ahead of now a task's NotBefore may lie unless a stage's
// handlers.StageConfig.ScheduleHorizon or a producer's Writer.ScheduleHorizon says otherwise.
const DefaultScheduleHorizon = 7 * 24 * time.Hour

// CheckNotBefore returns an *InvalidTaskError with ReasonNotBeforeTooFar when t's NotBefore
// lies more than horizon after now, and nil otherwise. A horizon of 0 means
// DefaultScheduleHorizon, and a negative one means no limit. A missing notBefore returns nil,
// and so does an unparsable one, which Validate reports.
func (t Task) CheckNotBefore(now time.Time, horizon time.Duration) error {
	if horizon == 0 {
		horizon = DefaultScheduleHorizon
	}
	nb, ok := t.NotBeforeTime()
	if !ok || horizon < 0 || nb.Sub(now) <= horizon {
		return nil
	}
	return invalid(ReasonNotBeforeTooFar, "notBefore",
		fmt.Sprintf("%s lies more than the schedule horizon %v after %s", t.NotBefore, horizon, FormatTime(now)))
}

// Encode validates t under the default Limits and returns its JSON payload. Input and
// Params are compacted, and no HTML escaping is applied. The error is an *InvalidTaskError,
// or a json error when Input or Params cannot be marshalled.
func (t Task) Encode() ([]byte, error) { return t.EncodeWith(Limits{}) }

// EncodeWith is Encode under lim. Zero fields of lim take their defaults.
func (t Task) EncodeWith(lim Limits) ([]byte, error) {
	lim = lim.WithDefaults()
	if err := t.validate(lim, true); err != nil {
		return nil, err
	}
	b, err := marshal(t)
	if err != nil {
		return nil, fmt.Errorf("topics: encode task %q: %w", t.TaskID, err)
	}
	if len(b) > lim.MaxPayloadBytes {
		return nil, invalid(ReasonPayloadTooLarge, "", fmt.Sprintf("%d bytes, limit %d", len(b), lim.MaxPayloadBytes))
	}
	return b, nil
}

// DecodeTask parses and validates a task payload under lim, whose zero fields take their
// defaults. It never panics and bounds its work by the payload size: the size, UTF-8,
// nesting depth and member names are checked before anything is unmarshalled.
//
// Decoding is strict, so that every JSON parser reads the same task from an accepted
// payload. The payload object's member names must be task fields spelled exactly, each at
// most once, compared after JSON unescaping. So "\u0074enant" is tenant, while "Tenant",
// "TENANT" and "requeſtKey" are not, although encoding/json would fold them. Violations are
// ReasonUnknownField and ReasonDuplicateField. Inside input and params any member name goes,
// but no object at any depth may have one twice. That is ReasonDuplicateField too, with the
// detail naming the member's path, such as input.answer or params.rubric.items[2].id. A
// semantic key's canonical form would keep one of the members, while a model reads both.
// Every error is an *InvalidTaskError, so errors.Is(err, ErrInvalidTask) holds.
//
// The returned Task has Input and Params compacted and Params nil when null, so that
// DecodeTask(t.Encode()) returns t again.
func DecodeTask(payload []byte, lim Limits) (Task, error) { return decodeTask(payload, lim, true) }

// decodeTask is DecodeTask; plain lets it read plain payloads without reflection (decodePlain).
func decodeTask(payload []byte, lim Limits, plain bool) (Task, error) {
	lim.setDefaults()
	if len(payload) > lim.MaxPayloadBytes {
		return Task{}, invalid(ReasonPayloadTooLarge, "", fmt.Sprintf("%d bytes, limit %d", len(payload), lim.MaxPayloadBytes))
	}
	if !utf8.Valid(payload) {
		return Task{}, invalid(ReasonInvalidUTF8, "", "payload is not valid UTF-8")
	}
	first, err := walkTask(payload, lim.MaxJSONDepth)
	if err != nil {
		return Task{}, err
	}
	if first != '{' {
		return Task{}, invalid(ReasonBadJSON, "", "payload is not a JSON object")
	}

	var t Task
	if !plain || !decodePlain(payload, &t) {
		t = Task{}
		err = json.Unmarshal(payload, &t)
	}
	if err != nil {
		if te, ok := errors.AsType[*json.UnmarshalTypeError](err); ok {
			v := te.Value
			if len(v) > 40 {
				v = v[:40] + "…"
			}
			return Task{}, invalid(ReasonBadType, te.Field, fmt.Sprintf("JSON %s where %s expected", v, te.Type))
		}
		return Task{}, invalid(ReasonBadJSON, "", err.Error())
	}
	if t.Input, err = compact(t.Input); err != nil {
		return Task{}, invalid(ReasonBadJSON, "input", err.Error())
	}
	if string(t.Params) == "null" {
		t.Params = nil
	}
	if t.Params, err = compact(t.Params); err != nil {
		return Task{}, invalid(ReasonBadJSON, "params", err.Error())
	}
	if err := t.validate(lim, false); err != nil {
		return Task{}, err
	}
	return t, nil
}

// compact returns a compacted copy of raw, or nil when raw is empty.
func compact(raw json.RawMessage) (json.RawMessage, error) {
	if len(raw) == 0 {
		return nil, nil
	}
	var buf bytes.Buffer
	buf.Grow(len(raw))
	if err := json.Compact(&buf, raw); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// marshal is json.Marshal without HTML escaping, so that encoded bytes survive a decode
// and re-encode unchanged.
func marshal(v any) ([]byte, error) {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return nil, err
	}
	return bytes.TrimSuffix(buf.Bytes(), []byte("\n")), nil
}
