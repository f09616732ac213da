package gateway

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"net/url"
	"time"

	"github.com/flightdeck-ai/flightdeck/client"
	"github.com/flightdeck-ai/flightdeck/internal/tracing"
	"github.com/flightdeck-ai/flightdeck/topics"
)

// peekWindow is how long GET /v1/tasks/{taskId} without wait looks for the task's event.
const peekWindow = 100 * time.Millisecond

// done is the body of a task that has its terminal event.
type done struct {
	Receipt client.Receipt `json:"receipt"`
	Event   topics.Event   `json:"event"`
}

// pending is the body of GET /v1/tasks/{taskId} for a task without its terminal event yet.
type pending struct {
	Status  string          `json:"status"`
	Receipt *client.Receipt `json:"receipt,omitempty"`
}

// postTask serves POST /v1/stages/{stage}/tasks: it enqueues a task of the token's tenant
// and answers 202 with its receipt, or, with wait, 200 with the receipt and the terminal
// event when it arrives in time.
func (s *Server) postTask(w http.ResponseWriter, r *http.Request, tok *tenantToken) {
	stage := r.PathValue("stage")
	if err := topics.CheckStage(stage); err != nil {
		writeErr(w, err)
		return
	}
	if !s.cfg.stageAllowed(stage) {
		writeError(w, http.StatusForbidden, codeStageNotAllowed, "this gateway does not serve stage "+stage)
		return
	}
	wait, err := parseWait(r, s.cfg.MaxWait)
	if err != nil {
		writeRequestError(w, err)
		return
	}
	body, err := readBody(w, r, s.cfg.MaxBodyBytes)
	if err != nil {
		writeRequestError(w, err)
		return
	}
	req, err := decodeTaskRequest(body)
	if err != nil {
		if !writeRequestError(w, err) {
			writeErr(w, err)
		}
		return
	}
	if req.Tenant != "" && req.Tenant != tok.Tenant {
		writeError(w, http.StatusForbidden, codeTenantMismatch,
			"the tenant comes from the token; this token acts for another tenant than the body names")
		return
	}
	if string(req.Params) == "null" {
		req.Params = nil
	}
	task := topics.Task{TaskID: req.TaskID, Stage: stage, Tenant: tok.Tenant, SessionID: req.SessionID,
		RequestKey: req.RequestKey, Input: req.Input, ModelVersion: req.ModelVersion, PromptVersion: req.PromptVersion,
		Deadline: req.Deadline, Params: req.Params, NotBefore: req.NotBefore}
	if wait > 0 {
		if !acquire(&tok.waits, s.cfg.MaxWaitsPerToken) {
			retryAfter(w, time.Second)
			writeError(w, http.StatusTooManyRequests, codeTooManyWaits,
				"this token has too many requests waiting at once; retry, or enqueue without wait")
			return
		}
		defer tok.waits.Add(-1)
	}
	// The client's Enqueue writes the span context of ctx into the task: the request's own,
	// or the producer span it starts under it when the gateway traces.
	tp, ts := traceContext(r.Header)
	ctx, cancel := context.WithTimeout(tracing.Extract(r.Context(), tp, ts), s.cfg.Timeout)
	defer cancel()
	var (
		receipt  client.Receipt
		replayed bool
	)
	if iks, sent := r.Header["Idempotency-Key"]; sent {
		ik := iks[0]
		if len(iks) != 1 || ik == "" || len(ik) > 255 || !printable(ik) {
			writeError(w, http.StatusBadRequest, codeBadRequest, "Idempotency-Key: want one header of 1 to 255 bytes of printable ASCII")
			return
		}
		receipt, replayed, err = s.enqueueOnce(ctx, tok, ik, fingerprint(stage, body), task)
	} else {
		receipt, err = s.enqueue(ctx, tok, task)
	}
	if err != nil {
		if writeErr(w, err) {
			s.log.Warn().Err(err).Str("tenant", tok.Tenant).Str("stage", stage).Msg("enqueue failed")
		}
		return
	}
	w.Header().Set("Location", "/v1/tasks/"+url.PathEscape(receipt.TaskID))
	if replayed {
		w.Header().Set("Idempotent-Replayed", "true")
	}
	if wait > 0 {
		if ev, ok := s.await(r.Context(), tok, receipt, wait); ok {
			writeJSON(w, http.StatusOK, done{Receipt: receipt, Event: ev})
			return
		}
	}
	writeJSON(w, http.StatusAccepted, receipt)
}

// getTask serves GET /v1/tasks/{taskId}: the task's terminal event, 200, or 202 while it has
// none. A task id the tenant never enqueued through the gateway is 404, whoever else used it.
func (s *Server) getTask(w http.ResponseWriter, r *http.Request, tok *tenantToken) {
	id := r.PathValue("taskId")
	wait, err := parseWait(r, s.cfg.MaxWait)
	if err != nil {
		writeRequestError(w, err)
		return
	}
	if topics.CheckID(id, s.cfg.Limits) != nil {
		writeError(w, http.StatusNotFound, codeNotFound, "no task of this tenant has this id")
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), s.cfg.Timeout)
	rec, err := s.loadTask(ctx, tok, id)
	cancel()
	switch {
	case err != nil:
		writeErr(w, err)
		s.log.Warn().Err(err).Msg("task record")
		return
	case rec == nil:
		writeError(w, http.StatusNotFound, codeNotFound, "no task of this tenant has this id")
		return
	case rec.Pending:
		writeJSON(w, http.StatusAccepted, pending{Status: "pending"})
		return
	case rec.Event != nil:
		writeJSON(w, http.StatusOK, done{Receipt: *rec.Receipt, Event: *rec.Event})
		return
	}
	if wait > 0 {
		if !acquire(&tok.waits, s.cfg.MaxWaitsPerToken) {
			retryAfter(w, time.Second)
			writeError(w, http.StatusTooManyRequests, codeTooManyWaits, "this token has too many requests waiting at once")
			return
		}
		defer tok.waits.Add(-1)
	}
	if ev, ok := s.await(r.Context(), tok, *rec.Receipt, max(wait, peekWindow)); ok {
		writeJSON(w, http.StatusOK, done{Receipt: *rec.Receipt, Event: ev})
		return
	}
	writeJSON(w, http.StatusAccepted, pending{Status: "pending", Receipt: rec.Receipt})
}

// await waits up to wait for the terminal event of r's task, and keeps it in the task's
// receipt record. It reports false when the wait ran out, the request ended or the Server
// drains.
func (s *Server) await(ctx context.Context, tok *tenantToken, r client.Receipt, wait time.Duration) (topics.Event, bool) {
	ctx, cancel := s.until(ctx, wait)
	defer cancel()
	ev, err := tok.cl.Await(ctx, r)
	if err != nil {
		return topics.Event{}, false
	}
	s.keepEvent(tok, r, ev)
	return ev, true
}

// printable reports whether s is printable ASCII.
func printable(s string) bool {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 0x20 || c >= 0x7f {
			return false
		}
	}
	return true
}

// compactJSON returns b without insignificant white space, or b itself when it is not JSON.
func compactJSON(b []byte) []byte {
	var buf bytes.Buffer
	if err := json.Compact(&buf, b); err != nil {
		return b
	}
	return buf.Bytes()
}
