package gateway

import (
	"encoding/json"
	"errors"
	"net/http"
	"strconv"
	"time"

	"github.com/flightdeck-ai/flightdeck/internal/redisconn"
	"github.com/flightdeck-ai/flightdeck/lua"
	"github.com/flightdeck-ai/flightdeck/topics"
)

// The stable codes of error responses. docs/HTTP.md describes each.
const (
	codeBadRequest            = "bad_request"
	codeInvalidTask           = "invalid_task"
	codeTokenRequired         = "token_required"
	codeTokenRefused          = "token_refused"
	codeTenantMismatch        = "tenant_mismatch"
	codeStageNotAllowed       = "stage_not_allowed"
	codeNotFound              = "not_found"
	codeMethodNotAllowed      = "method_not_allowed"
	codeTaskIDTaken           = "task_id_taken"
	codeAlreadyFinal          = "already_final"
	codeIdempotencyInProgress = "idempotency_in_progress"
	codeIdempotencyMismatch   = "idempotency_mismatch"
	codeBodyTooLarge          = "body_too_large"
	codeUnsupportedMediaType  = "unsupported_media_type"
	codeRateLimited           = "rate_limited"
	codeTooManyWaits          = "too_many_waits"
	codeTooManyStreams        = "too_many_streams"
	codeInternal              = "internal"
	codeRedisUnavailable      = "redis_unavailable"
	codeShuttingDown          = "shutting_down"
)

// Errors of the gateway's Redis records, mapped to responses by writeErr.
var (
	// errTaskIDTaken: the tenant enqueued a task under this id before, within RecordTTL.
	errTaskIDTaken = errors.New("gateway: task id taken")
	// errIdempotencyMismatch: an Idempotency-Key used before with another request.
	errIdempotencyMismatch = errors.New("gateway: idempotency key used with another request")
	// errIdempotencyInProgress: the first request of an Idempotency-Key is still enqueueing.
	errIdempotencyInProgress = errors.New("gateway: idempotency key in progress")
	// errMalformedRecord: a gateway record in Redis that does not decode; answered as Redis
	// being unavailable, and logged.
	errMalformedRecord = errors.New("gateway: malformed record")
)

// errorBody is the JSON body of every error response.
type errorBody struct {
	// Error is a message for people.
	Error string `json:"error"`
	// Code is the stable code for programs.
	Code string `json:"code"`
	// Reason and Field are the topics reason and field of an invalid_task.
	Reason string `json:"reason,omitempty"`
	Field  string `json:"field,omitempty"`
	// Status is the flight's status of an already_final.
	Status string `json:"status,omitempty"`
}

// writeJSON writes v as the JSON response with status.
func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

// writeError writes an error response.
func writeError(w http.ResponseWriter, status int, code, msg string) {
	writeJSON(w, status, errorBody{Error: msg, Code: code})
}

// retryAfter sets Retry-After to d rounded up to whole seconds, at least 1.
func retryAfter(w http.ResponseWriter, d time.Duration) {
	secs := int((d + time.Second - 1) / time.Second)
	w.Header().Set("Retry-After", strconv.Itoa(max(secs, 1)))
}

// writeErr maps an error of the enqueue and record paths to its response: an invalid task,
// a record refusal, Redis refusing the gateway's ACL user a command, or Redis being
// unavailable. It reports whether the error was the server's, which the caller logs.
func writeErr(w http.ResponseWriter, err error) (serverErr bool) {
	if te, ok := errors.AsType[*topics.InvalidTaskError](err); ok {
		writeJSON(w, http.StatusBadRequest, errorBody{Error: te.Error(), Code: codeInvalidTask,
			Reason: string(te.Reason), Field: te.Field})
		return false
	}
	switch {
	case errors.Is(err, errTaskIDTaken):
		writeError(w, http.StatusConflict, codeTaskIDTaken,
			"this tenant enqueued a task under this taskId already; choose another id or use an Idempotency-Key")
	case errors.Is(err, errIdempotencyMismatch):
		writeError(w, http.StatusUnprocessableEntity, codeIdempotencyMismatch,
			"this Idempotency-Key was used with another request (stage or body)")
	case errors.Is(err, errIdempotencyInProgress):
		retryAfter(w, time.Second)
		writeError(w, http.StatusConflict, codeIdempotencyInProgress,
			"the first request of this Idempotency-Key is still being processed; retry shortly")
	case errors.Is(err, lua.ErrLibraryMissing):
		// Redis lost its functions (a restart without data) and this credential may not load
		// them: the consumers load them at start, or an operator does.
		retryAfter(w, 5*time.Second)
		writeError(w, http.StatusServiceUnavailable, codeRedisUnavailable,
			"Redis does not hold the flight functions yet: a consumer loads them at start, or an operator with `consumer --load-functions`")
		return true
	case redisconn.Refused(err):
		// Retrying will not help: the gateway's ACL user lacks a command (docs/SECURITY.md).
		writeError(w, http.StatusInternalServerError, codeInternal,
			"Redis refused the gateway's credential a command: its log has Redis's error, Redis's ACL LOG the command")
		return true
	default:
		retryAfter(w, time.Second)
		writeError(w, http.StatusServiceUnavailable, codeRedisUnavailable, "Redis did not answer; retry shortly")
		return true
	}
	return false
}
