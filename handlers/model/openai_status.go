package model

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"strconv"
	"strings"
	"syscall"
	"time"
	"unicode/utf8"
)

// What an OpenAI-compatible endpoint says besides its content: failures, in the body or the
// status, and the headers of its limits.

// inBandError returns a retryable TypeUpstream for an "error" member of a 2xx response or
// stream chunk, nil when there is none.
func (o *OpenAI) inBandError(raw json.RawMessage) error {
	if len(raw) == 0 || string(raw) == "null" {
		return nil
	}
	return &Error{Retryable: true, Type: TypeUpstream, Code: "response_error", Message: "openai: " + o.errorMessage(raw, "error in response")}
}

// statusError classifies a non-2xx response.
func (o *OpenAI) statusError(ctx context.Context, resp *http.Response) error {
	raw, err := io.ReadAll(io.LimitReader(resp.Body, maxErrorBodyBytes))
	if err != nil && ctx.Err() != nil {
		return contextError(ctx)
	}
	var body struct {
		Error json.RawMessage `json:"error"`
	}
	if json.Unmarshal(raw, &body) == nil && len(body.Error) > 0 {
		raw = body.Error
	}
	e := &Error{
		Code:       "http_" + strconv.Itoa(resp.StatusCode),
		Message:    "openai: " + o.errorMessage(raw, resp.Status),
		RetryAfter: retryAfter(resp.Header.Get("Retry-After"), time.Now()),
	}
	switch s := resp.StatusCode; {
	case s == http.StatusTooManyRequests:
		e.Retryable, e.Type = true, TypeRateLimited
	case s == http.StatusRequestTimeout:
		e.Retryable, e.Type = true, TypeTimeout
	case s >= 500:
		e.Retryable, e.Type = true, TypeUpstream
	case s >= 400:
		e.Type = TypeBadRequest
	default:
		e.Retryable, e.Type = true, TypeUpstream
	}
	return e
}

// errorMessage extracts a provider error message from raw, falling back to fallback. raw is a
// whole body or an "error" member, which is {"message": ...} or a string. The result has the
// API key redacted and is at most maxErrorMessageBytes long.
func (o *OpenAI) errorMessage(raw []byte, fallback string) string {
	msg := fallback
	var text string
	var obj struct {
		Message string `json:"message"`
	}
	switch {
	case json.Unmarshal(raw, &text) == nil:
		if text != "" {
			msg = text
		}
	case json.Unmarshal(raw, &obj) == nil:
		if obj.Message != "" {
			msg = obj.Message
		}
	case len(bytes.TrimSpace(raw)) > 0: // not JSON: a plain-text or HTML body
		msg = strings.TrimSpace(string(raw))
	}
	if key := o.cfg.APIKey.Reveal(); key != "" {
		msg = strings.ReplaceAll(msg, key, redacted)
	}
	return truncate(strings.ToValidUTF8(msg, "\uFFFD"), maxErrorMessageBytes)
}

// truncate cuts s to at most n bytes on a rune boundary.
func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n]
}

// reportRemaining reports the budget the provider's x-ratelimit-remaining-requests and
// -tokens headers give, when it sent either.
func reportRemaining(ctx context.Context, h http.Header) {
	req, tok := headerInt(h, "X-Ratelimit-Remaining-Requests"), headerInt(h, "X-Ratelimit-Remaining-Tokens")
	if req >= 0 || tok >= 0 {
		ReportRemaining(ctx, Remaining{Requests: req, Tokens: tok})
	}
}

// headerInt is the header's value as a non-negative integer, or -1.
func headerInt(h http.Header, name string) int {
	n, err := strconv.Atoi(strings.TrimSpace(h.Get(name)))
	if err != nil || n < 0 {
		return -1
	}
	return n
}

// retryAfter parses a Retry-After header value: delay seconds or an HTTP date.
func retryAfter(v string, now time.Time) time.Duration {
	v = strings.TrimSpace(v)
	if v == "" {
		return 0
	}
	if secs, err := strconv.ParseInt(v, 10, 64); err == nil {
		if secs <= 0 || secs > int64(math.MaxInt64/time.Second) {
			return 0
		}
		return time.Duration(secs) * time.Second
	}
	if t, err := http.ParseTime(v); err == nil && t.After(now) {
		return t.Sub(now)
	}
	return 0
}

// transportError classifies a failure to send a request or read a response.
func transportError(ctx context.Context, err error) *Error {
	if ctx.Err() != nil {
		return contextError(ctx)
	}
	if errors.Is(err, syscall.ECONNRESET) {
		return &Error{Retryable: true, Type: TypeTimeout, Code: "connection_reset", Message: "openai: connection reset", Err: err}
	}
	return Classify(err)
}

func tooLarge() *Error {
	return &Error{Retryable: true, Type: TypeBadOutput, Code: "response_too_large", Message: fmt.Sprintf("openai: response exceeds %d bytes", maxResponseBytes)}
}
