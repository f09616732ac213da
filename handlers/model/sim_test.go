package model_test

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/flightdeck-ai/flightdeck/handlers/model"
)

func simRequest(input string) model.Request {
	return model.Request{
		Stage: "interview-evaluation", TaskID: "t1", Tenant: "acme", SessionID: "s1",
		Input: json.RawMessage(input), ModelVersion: "m1", PromptVersion: "p1",
		Attempt: 1, Consumer: "c1",
	}
}

type simOut struct {
	Model, Stage, TaskID, Consumer, Answer string
	Attempt, Score                         int
}

func decodeSim(t *testing.T, raw json.RawMessage) simOut {
	t.Helper()
	var out simOut
	dec := json.NewDecoder(strings.NewReader(string(raw)))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&out); err != nil {
		t.Fatalf("decode %s: %v", raw, err)
	}
	return out
}

func TestSim(t *testing.T) {
	t.Parallel()

	t.Run("DeterministicOutput", func(t *testing.T) {
		t.Parallel()
		var sim model.Sim
		call := func(req model.Request) simOut {
			t.Helper()
			raw, err := sim.Call(t.Context(), req, nil)
			if err != nil {
				t.Fatalf("Call: %v", err)
			}
			return decodeSim(t, raw)
		}

		first := call(simRequest(`{"q": "why", "n": 1}`))
		if !strings.HasPrefix(first.Answer, "sim-") || first.Score < 0 || first.Score > 100 {
			t.Fatalf("answer %q score %d: want sim-… and 0..100", first.Answer, first.Score)
		}
		want := simOut{Model: "sim", Stage: "interview-evaluation", TaskID: "t1", Consumer: "c1", Attempt: 1, Answer: first.Answer, Score: first.Score}
		if diff := cmp.Diff(want, first); diff != "" {
			t.Errorf("output mismatch (-want +got):\n%s", diff)
		}

		// Key order and white space do not matter; attempt and consumer are echoed.
		again := simRequest("{\n  \"n\": 1, \"q\": \"why\"\n}")
		again.Attempt, again.Consumer = 3, "c2"
		want.Attempt, want.Consumer = 3, "c2"
		if diff := cmp.Diff(want, call(again)); diff != "" {
			t.Errorf("same input, other layout (-want +got):\n%s", diff)
		}

		// Input, model version and prompt version each change the answer.
		for name, req := range map[string]model.Request{
			"Input":         simRequest(`{"q": "why", "n": 2}`),
			"ModelVersion":  func() model.Request { r := simRequest(`{"q": "why", "n": 1}`); r.ModelVersion = "m2"; return r }(),
			"PromptVersion": func() model.Request { r := simRequest(`{"q": "why", "n": 1}`); r.PromptVersion = "p2"; return r }(),
		} {
			if got := call(req); got.Answer == first.Answer {
				t.Errorf("%s changed but answer stayed %q", name, got.Answer)
			}
		}

		// Any JSON is an input.
		for _, in := range []string{`"text"`, `[1, 2]`, `42`, `null`, ``} {
			call(simRequest(in))
		}
	})

	t.Run("LatencyHonoured", func(t *testing.T) {
		t.Parallel()
		var sim model.Sim
		start := time.Now()
		if _, err := sim.Call(t.Context(), simRequest(`{"sim": {"latencyMs": 80}}`), nil); err != nil {
			t.Fatalf("Call: %v", err)
		}
		if d := time.Since(start); d < 80*time.Millisecond {
			t.Errorf("Call took %v, want >= 80ms", d)
		}
	})

	t.Run("DefaultLatency", func(t *testing.T) {
		t.Parallel()
		sim := model.Sim{DefaultLatency: 60 * time.Millisecond}
		start := time.Now()
		if _, err := sim.Call(t.Context(), simRequest(`{}`), nil); err != nil {
			t.Fatalf("Call: %v", err)
		}
		if d := time.Since(start); d < 60*time.Millisecond {
			t.Errorf("Call took %v, want >= 60ms", d)
		}
		// latencyMs 0 overrides the default: with a default of an hour the call still answers
		// (within a deadline that an hour's wait would overrun).
		long := model.Sim{DefaultLatency: time.Hour}
		ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
		defer cancel()
		if _, err := long.Call(ctx, simRequest(`{"sim": {"latencyMs": 0}}`), nil); err != nil {
			t.Fatalf("Call with latencyMs 0 and a default latency of an hour: %v", err)
		}
	})

	t.Run("CancelDuringLatency", func(t *testing.T) {
		t.Parallel()
		var sim model.Sim
		ctx, cancel := context.WithCancel(t.Context())
		time.AfterFunc(30*time.Millisecond, cancel)
		start := time.Now()
		_, err := sim.Call(ctx, simRequest(`{"sim": {"latencyMs": 60000}}`), nil)
		requireErr(t, err, errShape{Type: model.TypeCancelled, Code: "canceled"})
		if d := time.Since(start); d > 5*time.Second {
			t.Errorf("Call returned after %v", d)
		}
	})

	t.Run("DeadlineDuringHang", func(t *testing.T) {
		t.Parallel()
		var sim model.Sim
		ctx, cancel := context.WithTimeout(t.Context(), 30*time.Millisecond)
		defer cancel()
		_, err := sim.Call(ctx, simRequest(`{"sim": {"hang": true}}`), nil)
		requireErr(t, err, errShape{Retryable: true, Type: model.TypeTimeout, Code: "deadline_exceeded"})
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("err = %v, want it to wrap context.DeadlineExceeded", err)
		}
	})

	t.Run("CancelDuringHangKeepsCause", func(t *testing.T) {
		t.Parallel()
		var sim model.Sim
		cause := errors.New("flight cancelled")
		ctx, cancel := context.WithCancelCause(t.Context())
		time.AfterFunc(30*time.Millisecond, func() { cancel(cause) })
		_, err := sim.Call(ctx, simRequest(`{"sim": {"hang": true}}`), nil)
		requireErr(t, err, errShape{Type: model.TypeCancelled, Code: "canceled"})
		if !errors.Is(err, cause) {
			t.Errorf("err = %v, want it to wrap the cancel cause", err)
		}
	})

	t.Run("AlreadyCancelled", func(t *testing.T) {
		t.Parallel()
		var sim model.Sim
		ctx, cancel := context.WithCancel(t.Context())
		cancel()
		_, err := sim.Call(ctx, simRequest(`{}`), nil)
		requireErr(t, err, errShape{Type: model.TypeCancelled, Code: "canceled"})
	})

	t.Run("FailByAttempt", func(t *testing.T) {
		t.Parallel()
		retryable := &errShape{Retryable: true, Type: model.TypeSimulated, Code: "sim_retryable"}
		final := &errShape{Type: model.TypeSimulated, Code: "sim_final"}
		tests := []struct {
			name    string
			sim     string
			attempt int
			want    *errShape // nil: success
		}{
			{"RetryableEveryAttempt", `{"fail": "retryable"}`, 7, retryable},
			{"RetryableFirstOfTwo", `{"fail": "retryable", "failAttempts": 2}`, 1, retryable},
			{"RetryableLastOfTwo", `{"fail": "retryable", "failAttempts": 2}`, 2, retryable},
			{"SucceedsAfterFailAttempts", `{"fail": "retryable", "failAttempts": 2}`, 3, nil},
			{"FinalEveryAttempt", `{"fail": "final", "failAttempts": 0}`, 4, final},
			{"FinalOnce", `{"fail": "final", "failAttempts": 1}`, 2, nil},
			{"NoFail", `{"failAttempts": 3}`, 1, nil},
		}
		for _, tt := range tests {
			t.Run(tt.name, func(t *testing.T) {
				t.Parallel()
				var sim model.Sim
				req := simRequest(`{"sim": ` + tt.sim + `}`)
				req.Attempt = tt.attempt
				out, err := sim.Call(t.Context(), req, nil)
				if tt.want == nil {
					if err != nil {
						t.Fatalf("Call: %v", err)
					}
					if got := decodeSim(t, out).Attempt; got != tt.attempt {
						t.Errorf("attempt = %d, want %d", got, tt.attempt)
					}
					return
				}
				requireErr(t, err, *tt.want)
			})
		}
	})

	t.Run("ProgressDuringLatency", func(t *testing.T) {
		t.Parallel()
		var sim model.Sim
		var n atomic.Int64
		if _, err := sim.Call(t.Context(), simRequest(`{"sim": {"latencyMs": 300, "progressEveryMs": 10}}`), func() { n.Add(1) }); err != nil {
			t.Fatalf("Call: %v", err)
		}
		// Ideally 29 or 30; a busy machine drops ticks, never adds them.
		if got := n.Load(); got < 2 || got > 30 {
			t.Errorf("progress reported %d times, want 2..30", got)
		}
	})

	t.Run("HangWithProgressLooksAlive", func(t *testing.T) {
		t.Parallel()
		var sim model.Sim
		var n atomic.Int64
		ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
		defer cancel()
		// The hang keeps reporting progress until the flight gives up on it.
		_, err := sim.Call(ctx, simRequest(`{"sim": {"hang": true, "progressEveryMs": 10}}`), func() {
			if n.Add(1) == 5 {
				cancel()
			}
		})
		requireErr(t, err, errShape{Type: model.TypeCancelled, Code: "canceled"})
		if got := n.Load(); got < 5 {
			t.Errorf("progress reported %d times, want >= 5", got)
		}
	})

	t.Run("HangWithoutProgressLooksStalled", func(t *testing.T) {
		t.Parallel()
		var sim model.Sim
		var n atomic.Int64
		ctx, cancel := context.WithTimeout(t.Context(), 80*time.Millisecond)
		defer cancel()
		_, err := sim.Call(ctx, simRequest(`{"sim": {"hang": true}}`), func() { n.Add(1) })
		requireErr(t, err, errShape{Retryable: true, Type: model.TypeTimeout, Code: "deadline_exceeded"})
		if got := n.Load(); got != 0 {
			t.Errorf("progress reported %d times, want 0", got)
		}
	})

	t.Run("BadSimMember", func(t *testing.T) {
		t.Parallel()
		for name, directive := range map[string]string{
			"NotAnObject":          `5`,
			"LatencyString":        `{"latencyMs": "10"}`,
			"LatencyFraction":      `{"latencyMs": 1.5}`,
			"LatencyNegative":      `{"latencyMs": -1}`,
			"LatencyOverflow":      `{"latencyMs": 9223372036854775807}`,
			"FailUnknown":          `{"fail": "sometimes"}`,
			"FailBool":             `{"fail": true}`,
			"FailAttemptsNegative": `{"fail": "final", "failAttempts": -2}`,
			"HangString":           `{"hang": "yes"}`,
			"ProgressNegative":     `{"progressEveryMs": -5}`,
			"UnknownField":         `{"latency": 10}`,
		} {
			t.Run(name, func(t *testing.T) {
				t.Parallel()
				var sim model.Sim
				_, err := sim.Call(t.Context(), simRequest(`{"sim": `+directive+`}`), nil)
				requireErr(t, err, errShape{Type: model.TypeBadRequest, Code: "sim_bad_directive"})
			})
		}
		t.Run("InvalidJSON", func(t *testing.T) {
			t.Parallel()
			var sim model.Sim
			_, err := sim.Call(t.Context(), simRequest(`{"sim": `), nil)
			requireErr(t, err, errShape{Type: model.TypeBadRequest, Code: "invalid_input"})
		})
		t.Run("NullIsNoDirective", func(t *testing.T) {
			t.Parallel()
			var sim model.Sim
			if _, err := sim.Call(t.Context(), simRequest(`{"sim": null}`), nil); err != nil {
				t.Errorf("Call: %v", err)
			}
		})
	})

	t.Run("OnRunOncePerCall", func(t *testing.T) {
		t.Parallel()
		var runs atomic.Int64
		sim := model.Sim{OnRun: func(req model.Request) {
			if req.TaskID != "t1" {
				t.Errorf("OnRun got task %q", req.TaskID)
			}
			runs.Add(1)
		}}
		inputs := []string{`{}`, `{"sim": {"fail": "final"}}`, `{"sim": {"latencyMs": "x"}}`, `{"sim": {"latencyMs": 5}}`}
		done := make(chan struct{})
		for _, in := range inputs {
			go func() {
				defer func() { done <- struct{}{} }()
				_, _ = sim.Call(t.Context(), simRequest(in), nil)
			}()
		}
		for range inputs {
			<-done
		}
		if got := runs.Load(); got != int64(len(inputs)) {
			t.Errorf("OnRun called %d times, want %d", got, len(inputs))
		}
	})

	t.Run("Name", func(t *testing.T) {
		t.Parallel()
		var m model.Model = &model.Sim{}
		if got := m.Name(); got != "sim" {
			t.Errorf("Name() = %q, want sim", got)
		}
	})
}
