package model

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"strings"
	"time"

	"github.com/flightdeck-ai/flightdeck/flight"
)

// Sim is a simulated model: it answers deterministically from its input and can be told,
// per task, to be slow, to fail, to hang and to report progress. It lets the whole pipeline
// run, and fault paths be exercised, with no API key.
//
// The input may be any JSON. When it is an object with a "sim" member, that member directs
// the call. Every field is optional:
//   - latencyMs: sleep that long before answering, returning early when ctx is done.
//     Defaults to DefaultLatency.
//   - fail: "retryable" or "final": after the latency, return an *Error of TypeSimulated with
//     Code "sim_retryable" or "sim_final" and Retryable to match, on attempts
//     1..failAttempts, or on every attempt when failAttempts is 0 or absent.
//   - hang: after the latency, block until ctx is done, then return ctx's error classified.
//   - progressEveryMs: while sleeping or hanging, report progress every that many ms, so a
//     hang with progress looks alive and a hang without progress looks stalled.
//
// For example:
//
//	{"text": "...", "sim": {"latencyMs": 250, "fail": "retryable", "failAttempts": 2, "progressEveryMs": 50}}
//
// A "sim" member of the wrong shape is a final TypeBadRequest error, as is input that is not
// valid JSON. Wrong types, unknown fields, negative numbers and an unknown fail value are all
// of the wrong shape.
//
// On success the output is a JSON object:
//
//	{"model":"sim","stage":"...","taskId":"...","attempt":1,"consumer":"...","answer":"sim-…","score":42}
//
// where answer and score, 0..100, derive only from ModelVersion, PromptVersion and the SHA-256
// of the input. The input is canonicalised first: object keys sorted, insignificant space
// removed.
//
// The zero value is ready to use. A Sim is safe for concurrent use. Do not change its fields
// while calls run.
type Sim struct {
	// OnRun, if set, is called synchronously once at the start of every Call, before the input
	// is parsed. It must be safe for concurrent use. Tests use it to count model runs. Defaults
	// to nil, no hook.
	OnRun func(Request)
	// DefaultLatency is how long a call sleeps when its input sets no latencyMs. Defaults to 0,
	// which answers at once.
	DefaultLatency time.Duration
}

var _ Model = (*Sim)(nil)

// Name returns "sim".
func (s *Sim) Name() string { return "sim" }

// simDirective is the "sim" member of an input object.
type simDirective struct {
	LatencyMs       *int64 `json:"latencyMs"`
	Fail            string `json:"fail"`
	FailAttempts    int    `json:"failAttempts"`
	Hang            bool   `json:"hang"`
	ProgressEveryMs int64  `json:"progressEveryMs"`
}

// simOutput is the JSON a successful Sim call returns.
type simOutput struct {
	Model    string `json:"model"`
	Stage    string `json:"stage"`
	TaskID   string `json:"taskId"`
	Attempt  int    `json:"attempt"`
	Consumer string `json:"consumer"`
	Answer   string `json:"answer"`
	Score    int    `json:"score"`
}

const maxMillis = int64(math.MaxInt64 / int64(time.Millisecond))

// Call runs the simulation described on Sim. progress may be nil.
func (s *Sim) Call(ctx context.Context, req Request, progress ProgressFunc) (json.RawMessage, error) {
	if s.OnRun != nil {
		s.OnRun(req)
	}
	canon, d, err := parseSimInput(req.Input)
	if err != nil {
		return nil, err
	}
	latency := s.DefaultLatency
	if d.LatencyMs != nil {
		latency = time.Duration(*d.LatencyMs) * time.Millisecond
	}
	every := time.Duration(d.ProgressEveryMs) * time.Millisecond
	if err := pause(ctx, latency, every, progress); err != nil {
		return nil, err
	}
	if d.Hang {
		if err := pause(ctx, -1, every, progress); err != nil {
			return nil, err
		}
	}
	if d.Fail != "" && (d.FailAttempts == 0 || req.Attempt <= d.FailAttempts) {
		return nil, &Error{
			Retryable: d.Fail == "retryable",
			Type:      TypeSimulated,
			Code:      "sim_" + d.Fail,
			Message:   fmt.Sprintf("sim: %s failure on attempt %d", d.Fail, req.Attempt),
		}
	}

	h := sha256.New()
	h.Write(canon)
	h.Write([]byte{0})
	h.Write([]byte(req.ModelVersion))
	h.Write([]byte{0})
	h.Write([]byte(req.PromptVersion))
	sum := h.Sum(nil)
	out, err := json.Marshal(simOutput{
		Model:    "sim",
		Stage:    req.Stage,
		TaskID:   req.TaskID,
		Attempt:  req.Attempt,
		Consumer: req.Consumer,
		Answer:   "sim-" + hex.EncodeToString(sum[:8]),
		Score:    int(binary.BigEndian.Uint64(sum[8:16]) % 101),
	})
	if err != nil {
		return nil, fmt.Errorf("sim: encode output: %w", err)
	}
	return out, nil
}

// parseSimInput returns the canonical form of input and its validated "sim" directive. Empty
// input counts as null.
func parseSimInput(input json.RawMessage) ([]byte, simDirective, error) {
	var d simDirective
	if len(bytes.TrimSpace(input)) == 0 {
		return []byte("null"), d, nil
	}
	canon, err := flight.Canonical(input)
	if err != nil {
		msg := "sim: input is not valid JSON"
		if errors.Is(err, flight.ErrDuplicateMember) {
			msg = "sim: input has a member name twice in one object"
		}
		return nil, d, &Error{Type: TypeBadRequest, Code: "invalid_input", Message: msg, Err: err}
	}
	if bytes.IndexAny(canon, "<>&\u2028\u2029") >= 0 {
		// The answer hashes json.Marshal's form, which escapes these. A raw message is
		// marshalled as its compact, escaped copy.
		if canon, err = json.Marshal(json.RawMessage(canon)); err != nil {
			return nil, d, fmt.Errorf("sim: canonicalise input: %w", err)
		}
	}
	if !bytes.Contains(canon, []byte(`"sim":`)) {
		return canon, d, nil // no "sim" member at any depth
	}
	var top map[string]json.RawMessage
	if json.Unmarshal(input, &top) != nil {
		return canon, d, nil // not an object
	}
	directive, ok := top["sim"]
	if !ok {
		return canon, d, nil
	}
	folded := 0 // members whose name matches "sim" without regard to case, as struct fields do
	for name := range top {
		if strings.EqualFold(name, "sim") {
			folded++
		}
	}
	if folded > 1 {
		// Decoding into a struct picks the last of them, as the sim always has.
		var members struct {
			Sim json.RawMessage `json:"sim"`
		}
		if err := json.Unmarshal(input, &members); err != nil {
			return nil, d, &Error{Type: TypeBadRequest, Code: "invalid_input", Message: "sim: input is not valid JSON", Err: err}
		}
		directive = members.Sim
	}
	bad := func(msg string, err error) error {
		return &Error{Type: TypeBadRequest, Code: "sim_bad_directive", Message: "sim: bad \"sim\" member: " + msg, Err: err}
	}
	dd := json.NewDecoder(bytes.NewReader(directive))
	dd.DisallowUnknownFields()
	if err := dd.Decode(&d); err != nil {
		return nil, d, bad("decode", err)
	}
	switch {
	case d.LatencyMs != nil && (*d.LatencyMs < 0 || *d.LatencyMs > maxMillis):
		return nil, d, bad(fmt.Sprintf("latencyMs %d out of range", *d.LatencyMs), nil)
	case d.ProgressEveryMs < 0 || d.ProgressEveryMs > maxMillis:
		return nil, d, bad(fmt.Sprintf("progressEveryMs %d out of range", d.ProgressEveryMs), nil)
	case d.FailAttempts < 0:
		return nil, d, bad(fmt.Sprintf("failAttempts %d is negative", d.FailAttempts), nil)
	case d.Fail != "" && d.Fail != "retryable" && d.Fail != "final":
		return nil, d, bad(fmt.Sprintf("fail %q is not \"retryable\" or \"final\"", d.Fail), nil)
	}
	return canon, d, nil
}

// pause waits for d, or until ctx is done when d < 0. It reports progress every interval when
// every > 0. It returns the classified ctx error when ctx ends the wait, also when ctx is
// already done and d is 0.
func pause(ctx context.Context, d, every time.Duration, progress ProgressFunc) error {
	if ctx.Err() != nil {
		return contextError(ctx)
	}
	if d == 0 {
		return nil
	}
	var elapsed <-chan time.Time
	if d > 0 {
		t := time.NewTimer(d)
		defer t.Stop()
		elapsed = t.C
	}
	var tick <-chan time.Time
	if every > 0 {
		t := time.NewTicker(every)
		defer t.Stop()
		tick = t.C
	}
	for {
		select {
		case <-ctx.Done():
			return contextError(ctx)
		case <-elapsed:
			return nil
		case <-tick:
			progress.report()
		}
	}
}
