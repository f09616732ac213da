package gateway

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"time"
	"unicode/utf8"

	"github.com/flightdeck-ai/flightdeck/client"
	"github.com/flightdeck-ai/flightdeck/flight"
)

// maxReasonLen bounds a cancel reason, in bytes.
const maxReasonLen = 512

// msgNoKey answers every key the token may not see, and every key without a flight, alike:
// the API is no oracle of other tenants' keys.
const msgNoKey = "no flight and no scheduled task of this tenant has this request key"

// keyState is the body of GET /v1/keys/{requestKey}.
type keyState struct {
	RequestKey  string                 `json:"requestKey"`
	Status      string                 `json:"status"`
	Stage       string                 `json:"stage"`
	Tenant      string                 `json:"tenant"`
	SessionID   string                 `json:"sessionId,omitempty"`
	OwnerTaskID string                 `json:"ownerTaskId,omitempty"`
	OwnerToken  int64                  `json:"ownerToken,omitempty"`
	Attempts    int                    `json:"attempts"`
	CreatedAt   *time.Time             `json:"createdAt,omitempty"`
	UpdatedAt   *time.Time             `json:"updatedAt,omitempty"`
	HeartbeatAt *time.Time             `json:"heartbeatAt,omitempty"`
	ExpireAt    *time.Time             `json:"expireAt,omitempty"`
	Progress    string                 `json:"progress,omitempty"`
	Retryable   bool                   `json:"retryable,omitempty"`
	ErrorType   string                 `json:"errorType,omitempty"`
	ErrorCode   string                 `json:"errorCode,omitempty"`
	Error       string                 `json:"error,omitempty"`
	Parked      []string               `json:"parked"`
	Scheduled   []client.ScheduledTask `json:"scheduled,omitempty"`
}

// cancelResult is the body of POST /v1/keys/{requestKey}/cancel.
type cancelResult struct {
	RequestKey string `json:"requestKey"`
	// Previous is the flight's status before the cancel, "" when it had no flight.
	Previous    string `json:"previous,omitempty"`
	Already     bool   `json:"already"`
	Reason      string `json:"reason"`
	OwnerTaskID string `json:"ownerTaskId,omitempty"`
	Answered    int    `json:"answered"`
	// Scheduled counts the tasks of the key cancelled in the stage's scheduled set.
	Scheduled int `json:"scheduled"`
}

// tenantKey returns the request key of r's path when it is one of tok's tenant, of an
// allowed stage, and a key a consumer builds (flight.TaskKey). Else it writes the answer: 404
// for a key that is not the tenant's, as for one without a flight, and 403 stage_not_allowed
// for the tenant's key of a stage this gateway does not serve.
func (s *Server) tenantKey(w http.ResponseWriter, r *http.Request, tok *tenantToken) (string, bool) {
	key := r.PathValue("requestKey")
	scope, ok := flight.ParseKey(key)
	if flight.CheckKey(key) != nil || !ok || scope.Tenant != tok.Tenant {
		writeError(w, http.StatusNotFound, codeNotFound, msgNoKey)
		return "", false
	}
	if !s.cfg.stageAllowed(scope.Stage) {
		writeError(w, http.StatusForbidden, codeStageNotAllowed, "this gateway does not serve stage "+scope.Stage)
		return "", false
	}
	return key, true
}

// getKey serves GET /v1/keys/{requestKey}: the state of the key's flight, or its tasks
// waiting in the scheduled set when it has no flight yet.
func (s *Server) getKey(w http.ResponseWriter, r *http.Request, tok *tenantToken) {
	key, ok := s.tenantKey(w, r, tok)
	if !ok {
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), s.cfg.Timeout)
	defer cancel()
	m, err := tok.cl.Inspect(ctx, key)
	if errors.Is(err, flight.ErrNotFound) {
		sched, serr := tok.cl.Scheduled(ctx, key)
		switch {
		case serr != nil:
			err = serr
		case len(sched) == 0:
			writeError(w, http.StatusNotFound, codeNotFound, msgNoKey)
			return
		default:
			scope, _ := flight.ParseKey(key)
			writeJSON(w, http.StatusOK, keyState{RequestKey: key, Status: "SCHEDULED", Stage: scope.Stage,
				Tenant: scope.Tenant, Parked: []string{}, Scheduled: sched})
			return
		}
	}
	if err != nil {
		if writeErr(w, err) {
			s.log.Warn().Err(err).Msg("inspect")
		}
		return
	}
	st := keyState{RequestKey: key, Status: string(m.Status), Stage: m.Stage, Tenant: m.Tenant, SessionID: m.SessionID,
		OwnerTaskID: m.TaskID, OwnerToken: m.OwnerToken, Attempts: m.Attempts, CreatedAt: stamp(m.CreatedAt),
		UpdatedAt: stamp(m.UpdatedAt), HeartbeatAt: stamp(m.HeartbeatAt), ExpireAt: stamp(m.ExpireAt),
		Progress: m.Progress, Retryable: m.Retryable, ErrorType: m.ErrorType, ErrorCode: m.ErrorCode, Error: m.Error,
		Parked: m.Parked}
	if st.Parked == nil {
		st.Parked = []string{}
	}
	writeJSON(w, http.StatusOK, st)
}

// cancelKey serves POST /v1/keys/{requestKey}/cancel: it cancels the key's tasks waiting in
// the scheduled set and its flight, as producer cancel does.
func (s *Server) cancelKey(w http.ResponseWriter, r *http.Request, tok *tenantToken) {
	key, ok := s.tenantKey(w, r, tok)
	if !ok {
		return
	}
	body, err := readBody(w, r, s.cfg.MaxBodyBytes)
	if err != nil {
		writeRequestError(w, err)
		return
	}
	reason := "cancelled through the HTTP API"
	if len(body) > 0 {
		var req struct {
			Reason *string
		}
		err := decodeObject(body, func(name string, dec *json.Decoder) error {
			if name != "reason" {
				return badRequest("unknown field %q: the only field is reason", cut(name, 40))
			}
			if err := dec.Decode(&req.Reason); err != nil {
				return badRequest("field reason: %v", err)
			}
			return nil
		})
		if err != nil {
			writeRequestError(w, err)
			return
		}
		if req.Reason != nil && *req.Reason != "" {
			if len(*req.Reason) > maxReasonLen || !utf8.ValidString(*req.Reason) {
				writeError(w, http.StatusBadRequest, codeBadRequest, "reason: want at most 512 bytes of UTF-8")
				return
			}
			reason = *req.Reason
		}
	}
	ctx, cancel := context.WithTimeout(r.Context(), s.cfg.Timeout)
	defer cancel()
	scheduled, err := tok.cl.CancelScheduled(ctx, key, reason)
	if err != nil {
		if writeErr(w, err) {
			s.log.Warn().Err(err).Msg("cancel scheduled")
		}
		return
	}
	res, err := tok.cl.Cancel(ctx, key, reason)
	out := cancelResult{RequestKey: key, Previous: string(res.Previous), Already: res.Already, Reason: reason,
		OwnerTaskID: res.OwnerTaskID, Answered: res.Answered, Scheduled: scheduled}
	if res.Already {
		out.Reason = res.Reason
	}
	if se, final := errors.AsType[*flight.StateError](err); final {
		if scheduled > 0 {
			writeJSON(w, http.StatusOK, out)
			return
		}
		writeJSON(w, http.StatusConflict, errorBody{Code: codeAlreadyFinal, Status: string(se.Status),
			Error: "the flight already ended with status " + string(se.Status) + "; nothing to cancel"})
		return
	}
	if errors.Is(err, flight.ErrNotFound) {
		if scheduled > 0 {
			writeJSON(w, http.StatusOK, out)
			return
		}
		writeError(w, http.StatusNotFound, codeNotFound, msgNoKey)
		return
	}
	if err != nil {
		if writeErr(w, err) {
			s.log.Warn().Err(err).Msg("cancel")
		}
		return
	}
	writeJSON(w, http.StatusOK, out)
}

// stamp returns a pointer to t in UTC, or nil for the zero time.
func stamp(t time.Time) *time.Time {
	if t.IsZero() {
		return nil
	}
	u := t.UTC()
	return &u
}
