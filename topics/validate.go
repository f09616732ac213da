package topics

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"time"
	"unicode/utf8"
)

// ErrInvalidTask matches, through errors.Is, every *InvalidTaskError.
var ErrInvalidTask = errors.New("topics: invalid task")

// Reason is the machine-readable cause of an InvalidTaskError. It is safe to use as a
// metric label or as the refusal reason of a dead-lettered message.
type Reason string

// Reasons a task is refused.
const (
	// ReasonPayloadTooLarge: the payload exceeds Limits.MaxPayloadBytes.
	ReasonPayloadTooLarge Reason = "payload_too_large"
	// ReasonInvalidUTF8: the payload, or a Go-built task's input or params, is not valid UTF-8.
	ReasonInvalidUTF8 Reason = "invalid_utf8"
	// ReasonBadJSON: the payload is not one JSON object, or input is not valid JSON.
	ReasonBadJSON Reason = "bad_json"
	// ReasonBadType: a known field holds the wrong JSON type, such as a number for taskId.
	ReasonBadType Reason = "bad_type"
	// ReasonTooDeep: arrays and objects nest deeper than Limits.MaxJSONDepth.
	ReasonTooDeep Reason = "too_deep"
	// ReasonMissingField: a required field is absent or empty, or input is null.
	ReasonMissingField Reason = "missing_field"
	// ReasonBadCharset: a string field holds a byte outside its character set.
	ReasonBadCharset Reason = "bad_charset"
	// ReasonTooLong: a string field exceeds its length limit.
	ReasonTooLong Reason = "too_long"
	// ReasonUnknownStage: the stage is not in Limits.Stages.
	ReasonUnknownStage Reason = "unknown_stage"
	// ReasonUnknownTenant: the tenant is not in Limits.Tenants.
	ReasonUnknownTenant Reason = "unknown_tenant"
	// ReasonInputTooLarge: input exceeds Limits.MaxInputBytes.
	ReasonInputTooLarge Reason = "input_too_large"
	// ReasonBadParams: params is neither absent, null nor a JSON object.
	ReasonBadParams Reason = "bad_params"
	// ReasonBadDeadline: deadline is set but is not an RFC 3339 time.
	ReasonBadDeadline Reason = "bad_deadline"
	// ReasonBadEnqueuedAt: enqueuedAt is set but is not an RFC 3339 time.
	ReasonBadEnqueuedAt Reason = "bad_enqueued_at"
	// ReasonBadNotBefore: notBefore is set but is not an RFC 3339 time.
	ReasonBadNotBefore Reason = "bad_not_before"
	// ReasonDeadlinePassed: the deadline is not after now. Only Task.CheckDeadline
	// returns it. DecodeTask and Validate never look at the clock.
	ReasonDeadlinePassed Reason = "deadline_passed"
	// ReasonNotBeforeTooFar: notBefore lies further ahead than the schedule horizon. Only
	// Task.CheckNotBefore returns it. DecodeTask and Validate never look at the clock.
	ReasonNotBeforeTooFar Reason = "not_before_too_far"
	// ReasonBadAttempt: attempt is negative.
	ReasonBadAttempt Reason = "bad_attempt"
	// ReasonUnknownField: the payload object has a member that is not a task field spelled
	// exactly, compared after JSON unescaping. "Tenant", "TENANT" and "requeſtKey" are unknown.
	ReasonUnknownField Reason = "unknown_field"
	// ReasonDuplicateField: a task field occurs more than once in the payload object, compared
	// after JSON unescaping, so "\u0074enant" is tenant. Or an object inside input or params
	// has a member name twice. Field is then input or params and Detail names the path.
	ReasonDuplicateField Reason = "duplicate_field"
)

// InvalidTaskError reports why a task payload or value was refused. errors.Is(err,
// ErrInvalidTask) holds for it. Retrying the same payload always fails the same way, so a
// consumer dead-letters it. The exception is ReasonDeadlinePassed, which depends on the clock.
type InvalidTaskError struct {
	// Reason is the machine-readable cause.
	Reason Reason
	// Field is the JSON name of the offending field, or "" when the payload as a whole
	// is refused.
	Field string
	// Detail is a short human-readable explanation. It never quotes more than a few
	// bytes of the payload.
	Detail string
}

// Error returns "topics: invalid task: <reason> in <field>: <detail>".
func (e *InvalidTaskError) Error() string {
	s := "topics: invalid task: " + string(e.Reason)
	if e.Field != "" {
		s += " in " + e.Field
	}
	if e.Detail != "" {
		s += ": " + e.Detail
	}
	return s
}

// Is reports whether target is ErrInvalidTask.
func (e *InvalidTaskError) Is(target error) bool { return target == ErrInvalidTask }

func invalid(r Reason, field, detail string) error {
	return &InvalidTaskError{Reason: r, Field: field, Detail: detail}
}

// Limits bounds what DecodeTask and Task.Validate accept. The zero value means all
// defaults, and a field <= 0 takes its default. A Limits is a plain value, safe to share.
type Limits struct {
	// MaxPayloadBytes caps the size of the whole payload. Defaults to 1 MiB.
	MaxPayloadBytes int
	// MaxInputBytes caps the size of input as compacted JSON. Defaults to 256 KiB.
	MaxInputBytes int
	// MaxJSONDepth caps the nesting of arrays and objects in the payload. The payload
	// object itself is depth 1, so input may nest MaxJSONDepth-1 deep. Defaults to 32.
	MaxJSONDepth int
	// MaxIDLen caps the length in bytes of taskId and sessionId. Defaults to 128.
	MaxIDLen int
	// MaxKeyLen caps the length in bytes of requestKey. Defaults to 200.
	MaxKeyLen int
	// Stages lists the accepted stage names. Empty accepts any stage name that matches
	// [a-z0-9-]{1,64}. Defaults to empty.
	Stages []string
	// Tenants lists the accepted tenant names. Empty accepts any tenant name that matches
	// [a-z0-9_-]{1,64}. A consumer of a tenant's own key prefix sets it to that tenant, so
	// that a payload cannot name another one. Defaults to empty.
	Tenants []string
}

// Default limits of Limits.
const (
	defaultMaxPayloadBytes = 1 << 20
	defaultMaxInputBytes   = 256 << 10
	defaultMaxJSONDepth    = 32
	defaultMaxIDLen        = 128
	defaultMaxKeyLen       = 200
	maxNameLen             = 64 // stage, tenant, modelVersion, promptVersion
)

// WithDefaults returns a copy of l in which every field <= 0 holds its default.
// Stages and Tenants are shared with l, not copied.
func (l Limits) WithDefaults() Limits {
	l.setDefaults()
	return l
}

func (l *Limits) setDefaults() {
	if l.MaxPayloadBytes <= 0 {
		l.MaxPayloadBytes = defaultMaxPayloadBytes
	}
	if l.MaxInputBytes <= 0 {
		l.MaxInputBytes = defaultMaxInputBytes
	}
	if l.MaxJSONDepth <= 0 {
		l.MaxJSONDepth = defaultMaxJSONDepth
	}
	if l.MaxIDLen <= 0 {
		l.MaxIDLen = defaultMaxIDLen
	}
	if l.MaxKeyLen <= 0 {
		l.MaxKeyLen = defaultMaxKeyLen
	}
}

// Validate checks t against the field rules of DecodeTask under lim, whose zero fields take
// their defaults. Producers that build a Task in Go call it, or Encode, before publishing.
// It does not look at the clock: see CheckDeadline. The error is an *InvalidTaskError.
func (t Task) Validate(lim Limits) error {
	lim.setDefaults()
	return t.validate(lim, true)
}

// validate checks the field rules. lim must have its defaults set. checkJSON also checks
// that input and params are valid JSON within the depth limit. DecodeTask skips that
// because it has checked the whole payload already.
func (t Task) validate(lim Limits, checkJSON bool) error {
	if err := checkString("taskId", t.TaskID, true, lim.MaxIDLen, isIDByte, idChars); err != nil {
		return err
	}
	if err := checkString("stage", t.Stage, true, maxNameLen, isStageByte, stageChars); err != nil {
		return err
	}
	if len(lim.Stages) > 0 && !slices.Contains(lim.Stages, t.Stage) {
		return invalid(ReasonUnknownStage, "stage", fmt.Sprintf("%q is not served here", t.Stage))
	}
	if err := checkString("tenant", t.Tenant, true, maxNameLen, isTenantByte, tenantChars); err != nil {
		return err
	}
	if len(lim.Tenants) > 0 && !slices.Contains(lim.Tenants, t.Tenant) {
		return invalid(ReasonUnknownTenant, "tenant", fmt.Sprintf("%q is not served here", t.Tenant))
	}
	if err := checkString("sessionId", t.SessionID, false, lim.MaxIDLen, isIDByte, idChars); err != nil {
		return err
	}
	if err := checkString("requestKey", t.RequestKey, false, lim.MaxKeyLen, isKeyByte, keyChars); err != nil {
		return err
	}
	if err := checkString("modelVersion", t.ModelVersion, false, maxNameLen, isVersionByte, versionChars); err != nil {
		return err
	}
	if err := checkString("promptVersion", t.PromptVersion, false, maxNameLen, isVersionByte, versionChars); err != nil {
		return err
	}

	in := bytes.TrimSpace(t.Input)
	if len(in) == 0 || string(in) == "null" {
		return invalid(ReasonMissingField, "input", "required, and must not be null")
	}
	if len(t.Input) > lim.MaxInputBytes {
		return invalid(ReasonInputTooLarge, "input", fmt.Sprintf("%d bytes, limit %d", len(t.Input), lim.MaxInputBytes))
	}
	if checkJSON {
		if err := checkJSONValue("input", t.Input, lim.MaxJSONDepth-1); err != nil {
			return err
		}
	}

	if p := bytes.TrimSpace(t.Params); len(p) > 0 && string(p) != "null" {
		if p[0] != '{' {
			return invalid(ReasonBadParams, "params", "must be a JSON object")
		}
		if checkJSON {
			if err := checkJSONValue("params", t.Params, lim.MaxJSONDepth-1); err != nil {
				return err
			}
		}
	}

	if t.NotBefore != "" {
		if _, err := time.Parse(time.RFC3339, t.NotBefore); err != nil {
			return invalid(ReasonBadNotBefore, "notBefore", "not an RFC 3339 time")
		}
	}
	if t.Deadline != "" {
		if _, err := time.Parse(time.RFC3339, t.Deadline); err != nil {
			return invalid(ReasonBadDeadline, "deadline", "not an RFC 3339 time")
		}
	}
	if t.EnqueuedAt != "" {
		if _, err := time.Parse(time.RFC3339, t.EnqueuedAt); err != nil {
			return invalid(ReasonBadEnqueuedAt, "enqueuedAt", "not an RFC 3339 time")
		}
	}
	if t.Attempt < 0 {
		return invalid(ReasonBadAttempt, "attempt", fmt.Sprintf("%d is negative", t.Attempt))
	}
	if err := checkString("traceparent", t.Traceparent, false, 128, isTraceparentByte, traceparentChars); err != nil {
		return err
	}
	return checkString("tracestate", t.Tracestate, false, 512, isTracestateByte, tracestateChars)
}

// CheckID reports whether id is a valid taskId under lim, whose zero fields take their
// defaults: 1 to MaxIDLen bytes of [A-Za-z0-9._:-]. The error is an *InvalidTaskError.
func CheckID(id string, lim Limits) error {
	lim.setDefaults()
	return checkString("taskId", id, true, lim.MaxIDLen, isIDByte, idChars)
}

// CheckTenant reports whether tenant is a valid tenant: 1 to 64 bytes of [a-z0-9_-]. The
// error is an *InvalidTaskError.
func CheckTenant(tenant string) error {
	return checkString("tenant", tenant, true, maxNameLen, isTenantByte, tenantChars)
}

// CheckStage reports whether stage is a valid stage name: 1 to 64 bytes of [a-z0-9-]. The
// error is an *InvalidTaskError.
func CheckStage(stage string) error {
	return checkString("stage", stage, true, maxNameLen, isStageByte, stageChars)
}

// checkString checks that s is non-empty when required, at most max bytes long and made
// only of bytes accepted by ok.
func checkString(field, s string, required bool, max int, ok func(byte) bool, chars string) error {
	if s == "" {
		if required {
			return invalid(ReasonMissingField, field, "required")
		}
		return nil
	}
	if len(s) > max {
		return invalid(ReasonTooLong, field, fmt.Sprintf("%d bytes, limit %d", len(s), max))
	}
	for i := 0; i < len(s); i++ {
		if !ok(s[i]) {
			return invalid(ReasonBadCharset, field, fmt.Sprintf("byte %#02x at offset %d not allowed (want %s)", s[i], i, chars))
		}
	}
	return nil
}

// The characters each field allows, as its errors name them.
const (
	idChars      = "[A-Za-z0-9._:-]"
	stageChars   = "[a-z0-9-]"
	tenantChars  = "[a-z0-9_-]"
	keyChars     = "[A-Za-z0-9._:/=+-]"
	versionChars = "printable ASCII without space"
	// The W3C trace context fields.
	traceparentChars = "[0-9a-f-]"
	tracestateChars  = "printable ASCII"
)

// isTraceparentByte: [0-9a-f-].
func isTraceparentByte(c byte) bool { return c >= '0' && c <= '9' || c >= 'a' && c <= 'f' || c == '-' }

// isTracestateByte: printable ASCII, space included.
func isTracestateByte(c byte) bool { return c >= 0x20 && c < 0x7f }

func isLower(c byte) bool { return c >= 'a' && c <= 'z' }
func isUpper(c byte) bool { return c >= 'A' && c <= 'Z' }
func isDigit(c byte) bool { return c >= '0' && c <= '9' }

// isIDByte: [A-Za-z0-9._:-], for taskId and sessionId.
func isIDByte(c byte) bool {
	return isLower(c) || isUpper(c) || isDigit(c) || c == '.' || c == '_' || c == ':' || c == '-'
}

// isStageByte: [a-z0-9-]. A stage is part of stream names, so never ':'.
func isStageByte(c byte) bool { return isLower(c) || isDigit(c) || c == '-' }

// isTenantByte: [a-z0-9_-]. A tenant is a segment of the semantic key, so never ':'.
func isTenantByte(c byte) bool { return isLower(c) || isDigit(c) || c == '_' || c == '-' }

// isKeyByte: [A-Za-z0-9._:/=+-]. A request key sits inside a {hash tag}, so never braces,
// never '*' or whitespace.
func isKeyByte(c byte) bool {
	return isIDByte(c) || c == '/' || c == '=' || c == '+'
}

// isVersionByte: printable ASCII without space.
func isVersionByte(c byte) bool { return c > ' ' && c < 0x7f }

// checkJSONValue checks that data is exactly one valid JSON value nesting at most
// maxDepth deep, with no member name twice in one object.
func checkJSONValue(field string, data []byte, maxDepth int) error {
	if _, err := walkJSON(field, data, maxDepth); err != nil {
		return err
	}
	if !json.Valid(data) {
		return invalid(ReasonBadJSON, field, "not valid JSON")
	}
	if !utf8.Valid(data) { // json.Valid lets bytes that are not UTF-8 through in strings
		return invalid(ReasonInvalidUTF8, field, "not valid UTF-8")
	}
	return nil
}

// walkJSON scans data byte by byte and fails as soon as arrays and objects nest deeper than
// maxDepth, so that no input can make a later Unmarshal recurse deeply. In the same pass it
// finds a member name that occurs twice in one object, compared after JSON unescaping. It
// reports that when the scan ends as ReasonDuplicateField, the detail naming its path. It
// returns the first byte that is not white space. It checks nesting and names only: the
// caller validates the syntax.
func walkJSON(field string, data []byte, maxDepth int) (byte, error) {
	var first byte
	inString := false
	var members memberScan
	for i := 0; i < len(data); i++ {
		c := data[i]
		if inString {
			switch c {
			case '\\':
				i++
			case '"':
				inString = false
			}
			continue
		}
		switch c {
		case ' ', '\t', '\n', '\r':
			continue
		case '"':
			inString = true
		case '[', '{':
			end, ok := members.scan(data, i, 1, maxDepth, field)
			if !ok {
				return 0, tooDeep(field, maxDepth)
			}
			if first == 0 {
				first = c
			}
			i = end
			continue
		}
		if first == 0 {
			first = c
		}
	}
	if first == 0 {
		return 0, invalid(ReasonBadJSON, field, "empty")
	}
	if members.found {
		return 0, duplicateMember(field, members.path)
	}
	return first, nil
}
