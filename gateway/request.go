package gateway

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/flightdeck-ai/flightdeck/topics"
)

// bodyTimeout bounds the reading of one request body.
const bodyTimeout = 30 * time.Second

// taskRequest is the body of POST /v1/stages/{stage}/tasks.
type taskRequest struct {
	TaskID        string
	Tenant        string
	Input         json.RawMessage
	RequestKey    string
	SessionID     string
	NotBefore     string
	Deadline      string
	Params        json.RawMessage
	ModelVersion  string
	PromptVersion string
}

// requestError is a request the API refuses before doing anything: a response status, a
// code and a message.
type requestError struct {
	status int
	code   string
	msg    string
}

// Error returns the message the response carries.
func (e *requestError) Error() string { return e.msg }

func badRequest(format string, args ...any) error {
	return &requestError{status: http.StatusBadRequest, code: codeBadRequest, msg: fmt.Sprintf(format, args...)}
}

// writeRequestError writes a *requestError, or reports false for any other error.
func writeRequestError(w http.ResponseWriter, err error) bool {
	re, ok := errors.AsType[*requestError](err)
	if ok {
		writeError(w, re.status, re.code, re.msg)
	}
	return ok
}

// readBody reads r's body, at most max bytes, within bodyTimeout. A body of another media
// type than JSON is refused with 415, a larger one with 413.
func readBody(w http.ResponseWriter, r *http.Request, max int64) ([]byte, error) {
	if ct := r.Header.Get("Content-Type"); ct != "" {
		mt, _, err := mime.ParseMediaType(ct)
		if err != nil || mt != "application/json" {
			return nil, &requestError{status: http.StatusUnsupportedMediaType, code: codeUnsupportedMediaType,
				msg: "the body must be JSON: send Content-Type: application/json"}
		}
	}
	rc := http.NewResponseController(w)
	_ = rc.SetReadDeadline(time.Now().Add(bodyTimeout)) // not supported by every writer, e.g. in tests
	// Clear it once read: a deadline left on the connection would end a long wait.
	defer func() { _ = rc.SetReadDeadline(time.Time{}) }()
	b, err := io.ReadAll(http.MaxBytesReader(w, r.Body, max))
	if _, ok := errors.AsType[*http.MaxBytesError](err); ok {
		return nil, &requestError{status: http.StatusRequestEntityTooLarge, code: codeBodyTooLarge,
			msg: fmt.Sprintf("the body exceeds %d bytes", max)}
	}
	if err != nil {
		return nil, badRequest("reading the body: %v", err)
	}
	if !utf8.Valid(b) {
		// JSON is UTF-8: the consumers would dead-letter the task invalid_utf8 after the 202.
		return nil, badRequest("the body is not valid UTF-8")
	}
	return b, nil
}

// decodeTaskRequest parses a task request strictly: one JSON object whose members are the
// request's fields spelled exactly, each at most once.
func decodeTaskRequest(body []byte) (taskRequest, error) {
	var req taskRequest
	fields := map[string]any{
		"taskId": &req.TaskID, "tenant": &req.Tenant, "input": &req.Input, "requestKey": &req.RequestKey,
		"sessionId": &req.SessionID, "notBefore": &req.NotBefore, "deadline": &req.Deadline, "params": &req.Params,
		"modelVersion": &req.ModelVersion, "promptVersion": &req.PromptVersion,
	}
	err := decodeObject(body, func(name string, dec *json.Decoder) error {
		dst, ok := fields[name]
		if !ok {
			return badRequest("unknown field %q: the fields are taskId, input, requestKey, sessionId, notBefore, deadline, params, modelVersion, promptVersion", cut(name, 40))
		}
		if err := dec.Decode(dst); err != nil {
			return badRequest("field %q: %v", name, err)
		}
		return nil
	})
	if err != nil {
		return req, err
	}
	if req.Input == nil {
		return req, &topics.InvalidTaskError{Reason: topics.ReasonMissingField, Field: "input", Detail: "the request has no input"}
	}
	return req, nil
}

// decodeObject reads body as one JSON object and calls member for each member name, with
// the decoder positioned at its value, which member must consume. Names are compared after
// JSON unescaping, and a name twice is refused.
func decodeObject(body []byte, member func(name string, dec *json.Decoder) error) error {
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.UseNumber()
	if t, err := dec.Token(); err != nil || t != json.Delim('{') {
		return badRequest("the body must be one JSON object")
	}
	seen := map[string]bool{}
	for dec.More() {
		t, err := dec.Token()
		if err != nil {
			return badRequest("the body is not valid JSON: %v", err)
		}
		name, _ := t.(string)
		if seen[name] {
			return badRequest("field %q appears twice", cut(name, 40))
		}
		seen[name] = true
		if err := member(name, dec); err != nil {
			return err
		}
	}
	if _, err := dec.Token(); err != nil {
		return badRequest("the body is not valid JSON: %v", err)
	}
	if _, err := dec.Token(); err != io.EOF {
		return badRequest("the body holds data after its JSON object")
	}
	return nil
}

// cut returns s cut to n bytes, marked with an ellipsis.
func cut(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}

// parseWait reads the wait query parameter: a Go duration such as 30s or 1500ms, or a number
// of seconds. Absent is 0, no wait. It must not exceed max.
func parseWait(r *http.Request, max time.Duration) (time.Duration, error) {
	v := r.URL.Query().Get("wait")
	if v == "" {
		return 0, nil
	}
	d, err := time.ParseDuration(v)
	if err != nil {
		secs, ferr := strconv.ParseFloat(v, 64)
		if ferr != nil || secs != secs { // NaN
			return 0, badRequest("wait %q: want a duration such as 30s or 1500ms, or a number of seconds", cut(v, 40))
		}
		d = time.Duration(min(secs, max.Seconds()+1) * float64(time.Second))
	}
	if d < 0 || d > max {
		return 0, badRequest("wait %q: want 0 to %v", cut(v, 40), max)
	}
	return d, nil
}

// traceContext returns the W3C trace context of r: its traceparent header when it is
// well-formed, and its tracestate headers, joined, when they are well-formed too and the
// traceparent is. Anything else is dropped, never refused, as the W3C recommendation says.
func traceContext(h http.Header) (traceparent, tracestate string) {
	tp := h.Values("Traceparent")
	if len(tp) != 1 || !validTraceparent(tp[0]) {
		return "", ""
	}
	ts := strings.Join(h.Values("Tracestate"), ",")
	if !validTracestate(ts) {
		ts = ""
	}
	return tp[0], ts
}

// validTraceparent reports whether s is a W3C traceparent: version-traceid-parentid-flags,
// lowercase hex, with a version other than ff, and trace and parent ids not all zeros. A
// version above 00 may carry more fields after the flags, up to topics' bound of 128 bytes.
func validTraceparent(s string) bool {
	if len(s) < 55 || len(s) > 128 || s[2] != '-' || s[35] != '-' || s[52] != '-' {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c >= '0' && c <= '9' || c >= 'a' && c <= 'f' || c == '-') {
			return false
		}
	}
	version, traceID, parentID, flags := s[:2], s[3:35], s[36:52], s[53:55]
	switch {
	case version == "ff", strings.Contains(version+traceID+parentID+flags, "-"):
		return false
	case traceID == strings.Repeat("0", 32), parentID == strings.Repeat("0", 16):
		return false
	case version == "00":
		return len(s) == 55
	}
	return len(s) == 55 || s[55] == '-'
}

// validTracestate reports whether s is a tracestate topics accepts and the W3C allows in
// form: at most 512 bytes of printable ASCII, at most 32 comma-separated members, each
// empty or key=value.
func validTracestate(s string) bool {
	if s == "" || len(s) > 512 {
		return false
	}
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 0x20 || c >= 0x7f {
			return false
		}
	}
	members := strings.Split(s, ",")
	if len(members) > 32 {
		return false
	}
	for _, m := range members {
		m = strings.Trim(m, " \t")
		if m == "" {
			continue
		}
		k, v, ok := strings.Cut(m, "=")
		if !ok || k == "" || v == "" || strings.ContainsAny(k, " \t") {
			return false
		}
	}
	return true
}
