package model_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/flightdeck-ai/flightdeck/handlers/model"
)

const testKey = "sk-test-Zq81VERYSECRET"

// fakeAPI is an httptest.Server that speaks the chat-completions API through handle,
// after checking the method, path and auth header of every request.
type fakeAPI struct {
	srv   *httptest.Server
	calls atomic.Int64
	body  atomic.Pointer[map[string]any] // the last request body
}

func newFakeAPI(t *testing.T, handle http.HandlerFunc) *fakeAPI {
	t.Helper()
	f := &fakeAPI{}
	f.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		f.calls.Add(1)
		if r.Method != http.MethodPost || r.URL.Path != "/v1/chat/completions" {
			t.Errorf("request %s %s, want POST /v1/chat/completions", r.Method, r.URL.Path)
		}
		if got, want := r.Header.Get("Authorization"), "Bearer "+testKey; got != want {
			t.Errorf("Authorization = %q, want %q", got, want)
		}
		if got := r.Header.Get("Content-Type"); got != "application/json" {
			t.Errorf("Content-Type = %q, want application/json", got)
		}
		var body map[string]any
		if err := json.NewDecoder(r.Body).Decode(&body); err != nil {
			t.Errorf("decode request body: %v", err)
		}
		f.body.Store(&body)
		handle(w, r)
	}))
	t.Cleanup(f.srv.Close)
	return f
}

// lastBody returns the body of the last request.
func (f *fakeAPI) lastBody(t *testing.T) map[string]any {
	t.Helper()
	b := f.body.Load()
	if b == nil {
		t.Fatal("no request reached the server")
	}
	return *b
}

// newOpenAI returns an adapter for f, with cfg's zero fields filled in.
func newOpenAI(t *testing.T, f *fakeAPI, cfg model.OpenAIConfig) *model.OpenAI {
	t.Helper()
	cfg.BaseURL = f.srv.URL + "/v1/"
	cfg.APIKey = model.NewSecret(testKey)
	if cfg.Model == "" {
		cfg.Model = "gpt-test"
	}
	m, err := model.NewOpenAI(cfg)
	if err != nil {
		t.Fatalf("NewOpenAI: %v", err)
	}
	return m
}

func openAIRequest(input string) model.Request {
	return model.Request{Stage: "interview-followup", TaskID: "t1", Input: json.RawMessage(input), Attempt: 1}
}

func writeJSON(w http.ResponseWriter, status int, body string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_, _ = io.WriteString(w, body)
}

const completion = `{
  "id": "chatcmpl-1", "object": "chat.completion", "model": "gpt-test-2025",
  "choices": [{"index": 0, "message": {"role": "assistant", "content": "Tell me more."}, "finish_reason": "stop"}],
  "usage": {"prompt_tokens": 9, "completion_tokens": 4, "total_tokens": 13}
}`

func decodeJSON(t *testing.T, raw []byte) map[string]any {
	t.Helper()
	var v map[string]any
	if err := json.Unmarshal(raw, &v); err != nil {
		t.Fatalf("decode %s: %v", raw, err)
	}
	return v
}

func TestOpenAICall(t *testing.T) {
	t.Parallel()

	t.Run("NonStream", func(t *testing.T) {
		t.Parallel()
		f := newFakeAPI(t, func(w http.ResponseWriter, r *http.Request) {
			if got := r.Header.Get("Accept"); got != "application/json" {
				t.Errorf("Accept = %q", got)
			}
			writeJSON(w, http.StatusOK, completion)
		})
		temp := 0.2
		m := newOpenAI(t, f, model.OpenAIConfig{SystemPrompt: "Be brief.", MaxTokens: 64, Temperature: &temp})
		var progress atomic.Int64
		out, err := m.Call(t.Context(), openAIRequest(`{"prompt": "Ask a follow-up."}`), func() { progress.Add(1) })
		if err != nil {
			t.Fatalf("Call: %v", err)
		}

		wantBody := map[string]any{
			"model": "gpt-test",
			"messages": []any{
				map[string]any{"role": "system", "content": "Be brief."},
				map[string]any{"role": "user", "content": "Ask a follow-up."},
			},
			"max_tokens":  64.0,
			"temperature": 0.2,
		}
		if diff := cmp.Diff(wantBody, f.lastBody(t)); diff != "" {
			t.Errorf("request body mismatch (-want +got):\n%s", diff)
		}
		wantOut := map[string]any{
			"model": "gpt-test-2025", "content": "Tell me more.", "finishReason": "stop",
			"usage": map[string]any{"promptTokens": 9.0, "completionTokens": 4.0, "totalTokens": 13.0},
		}
		if diff := cmp.Diff(wantOut, decodeJSON(t, out)); diff != "" {
			t.Errorf("output mismatch (-want +got):\n%s", diff)
		}
		if got := progress.Load(); got != 0 {
			t.Errorf("progress reported %d times without streaming, want 0", got)
		}
	})

	t.Run("Stream", func(t *testing.T) {
		t.Parallel()
		firstProgress := make(chan struct{})
		chunks := []string{
			`{"model":"gpt-test-2025","choices":[{"index":0,"delta":{"role":"assistant","content":""},"finish_reason":null}]}`,
			`{"model":"gpt-test-2025","choices":[{"index":0,"delta":{"content":"Tell "},"finish_reason":null}]}`,
			`{"model":"gpt-test-2025","choices":[{"index":0,"delta":{"content":"me "},"finish_reason":null}]}`,
			`{"model":"gpt-test-2025","choices":[{"index":0,"delta":{"content":"more."},"finish_reason":"stop"}]}`,
			`{"model":"gpt-test-2025","choices":[],"usage":{"prompt_tokens":9,"completion_tokens":4,"total_tokens":13}}`,
		}
		f := newFakeAPI(t, func(w http.ResponseWriter, r *http.Request) {
			if got := r.Header.Get("Accept"); got != "text/event-stream" {
				t.Errorf("Accept = %q", got)
			}
			w.Header().Set("Content-Type", "text/event-stream")
			fl := w.(http.Flusher)
			for i, c := range chunks {
				fmt.Fprintf(w, "data: %s\n\n", c)
				if i == 0 {
					fmt.Fprint(w, ": keep-alive\n\n")
				}
				fl.Flush()
				if i == 0 {
					// The adapter must report progress as chunks arrive, not at the end.
					select {
					case <-firstProgress:
					case <-time.After(5 * time.Second):
						t.Error("no progress reported after the first chunk")
					}
				}
			}
			fmt.Fprint(w, "data: [DONE]\n\n")
		})
		m := newOpenAI(t, f, model.OpenAIConfig{Stream: true})
		var progress atomic.Int64
		out, err := m.Call(t.Context(), openAIRequest(`{"messages": [{"role": "user", "content": "Ask a follow-up."}]}`), func() {
			if progress.Add(1) == 1 {
				close(firstProgress)
			}
		})
		if err != nil {
			t.Fatalf("Call: %v", err)
		}

		wantBody := map[string]any{
			"model":          "gpt-test",
			"messages":       []any{map[string]any{"role": "user", "content": "Ask a follow-up."}},
			"stream":         true,
			"stream_options": map[string]any{"include_usage": true},
		}
		if diff := cmp.Diff(wantBody, f.lastBody(t)); diff != "" {
			t.Errorf("request body mismatch (-want +got):\n%s", diff)
		}
		wantOut := map[string]any{
			"model": "gpt-test-2025", "content": "Tell me more.", "finishReason": "stop",
			"usage": map[string]any{"promptTokens": 9.0, "completionTokens": 4.0, "totalTokens": 13.0},
		}
		if diff := cmp.Diff(wantOut, decodeJSON(t, out)); diff != "" {
			t.Errorf("output mismatch (-want +got):\n%s", diff)
		}
		if got, want := progress.Load(), int64(len(chunks)); got != want {
			t.Errorf("progress reported %d times, want %d (one per chunk)", got, want)
		}
	})

	t.Run("Messages", func(t *testing.T) {
		t.Parallel()
		tests := []struct {
			name, system, input string
			want                []any
		}{
			{
				name: "MessagesPassedThrough", system: "sys",
				input: `{"messages": [{"role": "user", "content": [{"type": "text", "text": "hi"}]}, {"role": "assistant", "content": "yo"}], "prompt": "ignored"}`,
				want: []any{
					map[string]any{"role": "system", "content": "sys"},
					map[string]any{"role": "user", "content": []any{map[string]any{"type": "text", "text": "hi"}}},
					map[string]any{"role": "assistant", "content": "yo"},
				},
			},
			{
				name: "Prompt", input: `{"prompt": "hi", "other": 1}`,
				want: []any{map[string]any{"role": "user", "content": "hi"}},
			},
			{
				name: "WholeObject", input: "{\"answer\": \"B\",\n \"question\": 3}",
				want: []any{map[string]any{"role": "user", "content": `{"answer":"B","question":3}`}},
			},
			{
				name: "NonObject", system: "sys", input: ` "just text" `,
				want: []any{
					map[string]any{"role": "system", "content": "sys"},
					map[string]any{"role": "user", "content": `"just text"`},
				},
			},
		}
		for _, tt := range tests {
			t.Run(tt.name, func(t *testing.T) {
				t.Parallel()
				f := newFakeAPI(t, func(w http.ResponseWriter, r *http.Request) { writeJSON(w, http.StatusOK, completion) })
				m := newOpenAI(t, f, model.OpenAIConfig{SystemPrompt: tt.system})
				if _, err := m.Call(t.Context(), openAIRequest(tt.input), nil); err != nil {
					t.Fatalf("Call: %v", err)
				}
				if diff := cmp.Diff(tt.want, f.lastBody(t)["messages"]); diff != "" {
					t.Errorf("messages mismatch (-want +got):\n%s", diff)
				}
			})
		}
	})

	t.Run("BadInputNeverSent", func(t *testing.T) {
		t.Parallel()
		for name, input := range map[string]string{
			"Empty":              ``,
			"InvalidJSON":        `{"prompt": `,
			"MessagesNotArray":   `{"messages": "hi"}`,
			"MessagesEmpty":      `{"messages": []}`,
			"MessagesNull":       `{"messages": null}`,
			"MessageWithoutRole": `{"messages": [{"content": "hi"}]}`,
			"MessageNullContent": `{"messages": [{"role": "user", "content": null}]}`,
			"PromptNotString":    `{"prompt": 5}`,
		} {
			t.Run(name, func(t *testing.T) {
				t.Parallel()
				f := newFakeAPI(t, func(w http.ResponseWriter, r *http.Request) { writeJSON(w, http.StatusOK, completion) })
				m := newOpenAI(t, f, model.OpenAIConfig{})
				_, err := m.Call(t.Context(), openAIRequest(input), nil)
				requireErr(t, err, errShape{Type: model.TypeBadRequest, Code: "invalid_input"})
				if n := f.calls.Load(); n != 0 {
					t.Errorf("server called %d times, want 0", n)
				}
			})
		}
	})
}

func TestOpenAIErrors(t *testing.T) {
	t.Parallel()

	sse := func(w http.ResponseWriter, lines ...string) {
		w.Header().Set("Content-Type", "text/event-stream")
		for _, l := range lines {
			_, _ = io.WriteString(w, l+"\n\n")
		}
	}
	longMessage := strings.Repeat("x", 299) + "é" + strings.Repeat("y", 500) // é straddles byte 300
	tests := []struct {
		name   string
		stream bool
		handle http.HandlerFunc
		want   errShape
		check  func(t *testing.T, e *model.Error)
	}{
		{
			name: "RateLimitedWithRetryAfter",
			handle: func(w http.ResponseWriter, r *http.Request) {
				w.Header().Set("Retry-After", "7")
				writeJSON(w, http.StatusTooManyRequests, `{"error": {"message": "Rate limit reached for requests", "type": "requests", "code": "rate_limit_exceeded"}}`)
			},
			want: errShape{Retryable: true, Type: model.TypeRateLimited, Code: "http_429", RetryAfter: 7 * time.Second},
			check: func(t *testing.T, e *model.Error) {
				if !strings.Contains(e.Message, "Rate limit reached for requests") {
					t.Errorf("Message = %q, want the API's message", e.Message)
				}
			},
		},
		{
			name: "RateLimitedWithRetryAfterDate",
			handle: func(w http.ResponseWriter, r *http.Request) {
				w.Header().Set("Retry-After", time.Now().Add(time.Hour).UTC().Format(http.TimeFormat))
				writeJSON(w, http.StatusTooManyRequests, `{}`)
			},
			want: errShape{Retryable: true, Type: model.TypeRateLimited, Code: "http_429"},
			check: func(t *testing.T, e *model.Error) {
				if e.RetryAfter < 58*time.Minute || e.RetryAfter > time.Hour {
					t.Errorf("RetryAfter = %v, want about 1h", e.RetryAfter)
				}
				e.RetryAfter = 0 // compared by the row's want
			},
		},
		{
			name: "ServerError",
			handle: func(w http.ResponseWriter, r *http.Request) {
				writeJSON(w, http.StatusInternalServerError, `{"error": {"message": "The server had an error"}}`)
			},
			want: errShape{Retryable: true, Type: model.TypeUpstream, Code: "http_500"},
		},
		{
			name: "BadGatewayPlainText",
			handle: func(w http.ResponseWriter, r *http.Request) {
				http.Error(w, "upstream connect error", http.StatusBadGateway)
			},
			want: errShape{Retryable: true, Type: model.TypeUpstream, Code: "http_502"},
			check: func(t *testing.T, e *model.Error) {
				if e.Message != "openai: upstream connect error" {
					t.Errorf("Message = %q", e.Message)
				}
			},
		},
		{
			name: "BadRequestIsFinal",
			handle: func(w http.ResponseWriter, r *http.Request) {
				writeJSON(w, http.StatusBadRequest, `{"error": {"message": "Invalid 'messages[0].role'", "type": "invalid_request_error"}}`)
			},
			want: errShape{Type: model.TypeBadRequest, Code: "http_400"},
			check: func(t *testing.T, e *model.Error) {
				if e.Message != "openai: Invalid 'messages[0].role'" {
					t.Errorf("Message = %q", e.Message)
				}
			},
		},
		{
			name: "LongMessageTruncated",
			handle: func(w http.ResponseWriter, r *http.Request) {
				writeJSON(w, http.StatusNotFound, fmt.Sprintf(`{"error": {"message": %q}}`, longMessage))
			},
			want: errShape{Type: model.TypeBadRequest, Code: "http_404"},
			check: func(t *testing.T, e *model.Error) {
				if want := "openai: " + strings.Repeat("x", 299); e.Message != want {
					t.Errorf("Message = %q (%d bytes), want the first 300 bytes cut on a rune boundary", e.Message, len(e.Message))
				}
			},
		},
		{
			name: "StringErrorMember",
			handle: func(w http.ResponseWriter, r *http.Request) {
				writeJSON(w, http.StatusNotFound, `{"error": "model \"gpt-test\" not found"}`)
			},
			want: errShape{Type: model.TypeBadRequest, Code: "http_404"},
			check: func(t *testing.T, e *model.Error) {
				if e.Message != `openai: model "gpt-test" not found` {
					t.Errorf("Message = %q", e.Message)
				}
			},
		},
		{
			name: "KeyEchoedInErrorIsRedacted",
			handle: func(w http.ResponseWriter, r *http.Request) {
				writeJSON(w, http.StatusUnauthorized, `{"error": {"message": "Incorrect API key provided: `+testKey+`."}}`)
			},
			want: errShape{Type: model.TypeBadRequest, Code: "http_401"},
			check: func(t *testing.T, e *model.Error) {
				if e.Message != "openai: Incorrect API key provided: [REDACTED]." {
					t.Errorf("Message = %q", e.Message)
				}
			},
		},
		{
			name: "RequestTimeoutStatus",
			handle: func(w http.ResponseWriter, r *http.Request) {
				writeJSON(w, http.StatusRequestTimeout, `{}`)
			},
			want: errShape{Retryable: true, Type: model.TypeTimeout, Code: "http_408"},
		},
		{
			name: "MalformedJSON",
			handle: func(w http.ResponseWriter, r *http.Request) {
				writeJSON(w, http.StatusOK, `{"choices": [`)
			},
			want: errShape{Retryable: true, Type: model.TypeBadOutput, Code: "malformed_response"},
		},
		{
			name: "EmptyBody",
			handle: func(w http.ResponseWriter, r *http.Request) {
				writeJSON(w, http.StatusOK, ``)
			},
			want: errShape{Retryable: true, Type: model.TypeBadOutput, Code: "malformed_response"},
		},
		{
			name: "NoChoices",
			handle: func(w http.ResponseWriter, r *http.Request) {
				writeJSON(w, http.StatusOK, `{"model": "m", "choices": []}`)
			},
			want: errShape{Retryable: true, Type: model.TypeBadOutput, Code: "no_choices"},
		},
		{
			name: "EmptyContent",
			handle: func(w http.ResponseWriter, r *http.Request) {
				writeJSON(w, http.StatusOK, `{"choices": [{"index": 0, "message": {"content": null}, "finish_reason": "length"}]}`)
			},
			want: errShape{Retryable: true, Type: model.TypeBadOutput, Code: "empty_content"},
		},
		{
			name: "ErrorInOKBody",
			handle: func(w http.ResponseWriter, r *http.Request) {
				writeJSON(w, http.StatusOK, `{"error": {"message": "overloaded"}}`)
			},
			want: errShape{Retryable: true, Type: model.TypeUpstream, Code: "response_error"},
		},
		{
			name: "ResponseTooLarge",
			handle: func(w http.ResponseWriter, r *http.Request) {
				writeJSON(w, http.StatusOK, `{"x": "`+strings.Repeat("a", 9<<20)+`"}`)
			},
			want: errShape{Retryable: true, Type: model.TypeBadOutput, Code: "response_too_large"},
		},
		{
			name: "ConnectionReset",
			handle: func(w http.ResponseWriter, r *http.Request) {
				conn, _, err := http.NewResponseController(w).Hijack()
				if err != nil {
					t.Errorf("hijack: %v", err)
					return
				}
				_ = conn.(*net.TCPConn).SetLinger(0) // close with RST
				_ = conn.Close()
			},
			want: errShape{Retryable: true, Type: model.TypeTimeout, Code: "connection_reset"},
		},
		{
			name: "StreamTruncated", stream: true,
			handle: func(w http.ResponseWriter, r *http.Request) {
				sse(w, `data: {"choices":[{"index":0,"delta":{"content":"Tell "}}]}`)
			},
			want: errShape{Retryable: true, Type: model.TypeBadOutput, Code: "truncated_stream"},
		},
		{
			name: "StreamMalformedChunk", stream: true,
			handle: func(w http.ResponseWriter, r *http.Request) {
				sse(w, `data: {"choices":[`, `data: [DONE]`)
			},
			want: errShape{Retryable: true, Type: model.TypeBadOutput, Code: "malformed_chunk"},
		},
		{
			name: "StreamEmpty", stream: true,
			handle: func(w http.ResponseWriter, r *http.Request) {
				sse(w, `data: [DONE]`)
			},
			want: errShape{Retryable: true, Type: model.TypeBadOutput, Code: "empty_content"},
		},
		{
			name: "StreamErrorChunk", stream: true,
			handle: func(w http.ResponseWriter, r *http.Request) {
				sse(w, `data: {"choices":[{"index":0,"delta":{"content":"Te"}}]}`, `data: {"error":{"message":"`+testKey+` engine crashed"}}`)
			},
			want: errShape{Retryable: true, Type: model.TypeUpstream, Code: "response_error"},
			check: func(t *testing.T, e *model.Error) {
				if e.Message != "openai: [REDACTED] engine crashed" {
					t.Errorf("Message = %q", e.Message)
				}
			},
		},
		{
			name: "StreamLineTooLarge", stream: true,
			handle: func(w http.ResponseWriter, r *http.Request) {
				sse(w, `data: {"x": "`+strings.Repeat("a", 9<<20)+`"}`)
			},
			want: errShape{Retryable: true, Type: model.TypeBadOutput, Code: "response_too_large"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			f := newFakeAPI(t, tt.handle)
			m := newOpenAI(t, f, model.OpenAIConfig{Stream: tt.stream})
			out, err := m.Call(t.Context(), openAIRequest(`{"prompt": "hi"}`), nil)
			if err == nil {
				t.Fatalf("Call = %s, want an error", out)
			}
			e, _ := errors.AsType[*model.Error](err)
			if tt.check != nil && e != nil {
				tt.check(t, e)
			}
			requireErr(t, err, tt.want)
			for _, s := range []string{err.Error(), fmt.Sprintf("%+v", err), fmt.Sprintf("%#v", err)} {
				if strings.Contains(s, testKey) {
					t.Errorf("error shows the API key: %s", s)
				}
			}
		})
	}
}

func TestOpenAIContext(t *testing.T) {
	t.Parallel()

	// block answers only when the client goes away.
	block := func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-r.Context().Done():
		case <-time.After(10 * time.Second):
		}
	}

	t.Run("TimeoutIsRetryable", func(t *testing.T) {
		t.Parallel()
		f := newFakeAPI(t, block)
		m := newOpenAI(t, f, model.OpenAIConfig{Timeout: 50 * time.Millisecond})
		start := time.Now()
		_, err := m.Call(t.Context(), openAIRequest(`{"prompt": "hi"}`), nil)
		requireErr(t, err, errShape{Retryable: true, Type: model.TypeTimeout, Code: "deadline_exceeded"})
		if d := time.Since(start); d > 5*time.Second {
			t.Errorf("Call returned after %v, want about 50ms", d)
		}
		if !strings.Contains(err.Error(), "openai: call exceeded 50ms") {
			t.Errorf("err = %q, want it to name the timeout", err)
		}
	})

	t.Run("TimeoutDuringStream", func(t *testing.T) {
		t.Parallel()
		f := newFakeAPI(t, func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "text/event-stream")
			_, _ = io.WriteString(w, "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"a\"}}]}\n\n")
			w.(http.Flusher).Flush()
			block(w, r)
		})
		m := newOpenAI(t, f, model.OpenAIConfig{Timeout: 100 * time.Millisecond, Stream: true})
		var progress atomic.Int64
		_, err := m.Call(t.Context(), openAIRequest(`{"prompt": "hi"}`), func() { progress.Add(1) })
		requireErr(t, err, errShape{Retryable: true, Type: model.TypeTimeout, Code: "deadline_exceeded"})
		if got := progress.Load(); got != 1 {
			t.Errorf("progress reported %d times, want 1", got)
		}
	})

	t.Run("CancelIsFinal", func(t *testing.T) {
		t.Parallel()
		f := newFakeAPI(t, block)
		m := newOpenAI(t, f, model.OpenAIConfig{})
		ctx, cancel := context.WithCancel(t.Context())
		time.AfterFunc(30*time.Millisecond, cancel)
		_, err := m.Call(ctx, openAIRequest(`{"prompt": "hi"}`), nil)
		requireErr(t, err, errShape{Type: model.TypeCancelled, Code: "canceled"})
	})

	t.Run("ConnectionRefused", func(t *testing.T) {
		t.Parallel()
		f := newFakeAPI(t, block)
		m := newOpenAI(t, f, model.OpenAIConfig{})
		f.srv.Close()
		_, err := m.Call(t.Context(), openAIRequest(`{"prompt": "hi"}`), nil)
		requireErr(t, err, errShape{Retryable: true, Type: model.TypeUpstream, Code: "unclassified"})
	})
}

func TestNewOpenAI(t *testing.T) {
	t.Parallel()

	t.Run("Defaults", func(t *testing.T) {
		t.Parallel()
		m, err := model.NewOpenAI(model.OpenAIConfig{Model: "gpt-test", APIKey: model.NewSecret(testKey)})
		if err != nil {
			t.Fatalf("NewOpenAI: %v", err)
		}
		if got, want := m.String(), `model.OpenAI{BaseURL: "https://api.openai.com/v1", Model: "gpt-test", Stream: false}`; got != want {
			t.Errorf("String() = %s, want %s", got, want)
		}
		if m.Name() != "openai" {
			t.Errorf("Name() = %q, want openai", m.Name())
		}
	})

	t.Run("KeyRequiredByOpenAI", func(t *testing.T) {
		// The public API answers 401 to every call without a key: refused at start. A
		// server of another host (a local one) may need none.
		t.Parallel()
		for _, base := range []string{"", "https://API.openai.com/v1/"} {
			if _, err := model.NewOpenAI(model.OpenAIConfig{Model: "m", BaseURL: base}); err == nil ||
				!strings.Contains(err.Error(), "OPENAI_API_KEY") {
				t.Errorf("NewOpenAI(%q) without a key: %v, want an error naming OPENAI_API_KEY", base, err)
			}
		}
		if _, err := model.NewOpenAI(model.OpenAIConfig{Model: "m", BaseURL: "http://127.0.0.1:8000/v1"}); err != nil {
			t.Errorf("a local server without a key: %v", err)
		}
		if _, err := model.NewOpenAI(model.OpenAIConfig{Model: "m", HTTPClient: &http.Client{}}); err != nil {
			t.Errorf("a caller's own HTTP client (it may sign requests itself): %v", err)
		}
	})

	t.Run("BaseURLCredentialsNotEchoed", func(t *testing.T) {
		t.Parallel()
		const secret = "s3cr3t-in-url"
		m, err := model.NewOpenAI(model.OpenAIConfig{Model: "m", BaseURL: "https://user:" + secret + "@llm.internal/v1?api_key=" + secret})
		if err != nil {
			t.Fatal(err)
		}
		if got := m.String(); strings.Contains(got, secret) || !strings.Contains(got, "https://llm.internal/v1") {
			t.Errorf("String() = %s, want the URL without its secrets", got)
		}
		for _, base := range []string{"ftp://u:" + secret + "@host/v1", "http://u:" + secret + "@[::1"} {
			_, err := model.NewOpenAI(model.OpenAIConfig{Model: "m", BaseURL: base})
			if err == nil || strings.Contains(err.Error(), secret) {
				t.Errorf("NewOpenAI(%q) error = %v, want one without the password", base, err)
			}
		}
	})

	t.Run("Invalid", func(t *testing.T) {
		t.Parallel()
		neg, nan := -0.5, 0.0
		nan /= nan
		tests := map[string]model.OpenAIConfig{
			"NoModel":             {},
			"RelativeBaseURL":     {Model: "m", BaseURL: "api.openai.com/v1"},
			"BadScheme":           {Model: "m", BaseURL: "ftp://host/v1"},
			"UnparsableBaseURL":   {Model: "m", BaseURL: "http://[::1"},
			"NegativeTimeout":     {Model: "m", Timeout: -time.Second},
			"NegativeMaxTokens":   {Model: "m", MaxTokens: -1},
			"NegativeTemperature": {Model: "m", Temperature: &neg},
			"NaNTemperature":      {Model: "m", Temperature: &nan},
			"KeyWithLineBreak":    {Model: "m", APIKey: model.NewSecret(testKey + "\n")},
		}
		for name, cfg := range tests {
			t.Run(name, func(t *testing.T) {
				t.Parallel()
				cfg.APIKey = model.NewSecret(cfg.APIKey.Reveal() + testKey)
				m, err := model.NewOpenAI(cfg)
				if err == nil {
					t.Fatalf("NewOpenAI = %v, want an error", m)
				}
				if strings.Contains(err.Error(), testKey) {
					t.Errorf("error shows the API key: %v", err)
				}
			})
		}
	})
}

func TestSecretNeverPrinted(t *testing.T) {
	t.Parallel()

	temp := 1.0
	cfg := model.OpenAIConfig{Model: "gpt-test", APIKey: model.NewSecret(testKey), Temperature: &temp}
	m, err := model.NewOpenAI(cfg)
	if err != nil {
		t.Fatalf("NewOpenAI: %v", err)
	}
	type holder struct {
		cfg model.OpenAIConfig // unexported: fmt cannot call methods here
		m   *model.OpenAI
	}
	jsonCfg, err := json.Marshal(cfg)
	if err != nil {
		t.Fatalf("json.Marshal: %v", err)
	}
	var text, js bytes.Buffer
	slog.New(slog.NewTextHandler(&text, nil)).Info("cfg", "cfg", cfg, "key", cfg.APIKey)
	slog.New(slog.NewJSONHandler(&js, nil)).Info("cfg", "cfg", cfg, "key", cfg.APIKey)

	outputs := []string{string(jsonCfg), text.String(), js.String()}
	for _, v := range []any{cfg, &cfg, cfg.APIKey, m, holder{cfg, m}, &holder{cfg, m}} {
		for _, verb := range []string{"%v", "%+v", "%#v", "%s", "%q", "%x", "%d"} {
			outputs = append(outputs, fmt.Sprintf(verb, v))
		}
	}
	for _, s := range outputs {
		if strings.Contains(s, testKey) || strings.Contains(s, fmt.Sprintf("%x", testKey)) {
			t.Errorf("output shows the API key: %s", s)
		}
	}
	if !strings.Contains(string(jsonCfg), `"APIKey":"[REDACTED]"`) || !strings.Contains(fmt.Sprintf("%+v", cfg), "APIKey:[REDACTED]") {
		t.Errorf("key not shown as [REDACTED]: %s / %+v", jsonCfg, cfg)
	}
	if got := cfg.APIKey.Reveal(); got != testKey {
		t.Errorf("Reveal() = %q, want the key", got)
	}
	if got := fmt.Sprint(model.Secret{}); got != "" {
		t.Errorf("empty Secret prints %q, want \"\"", got)
	}
}

func TestOpenAIConfigFromEnv(t *testing.T) {
	t.Parallel()

	dir := t.TempDir()
	keyFile := filepath.Join(dir, "key")
	if err := os.WriteFile(keyFile, []byte("  "+testKey+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	emptyFile := filepath.Join(dir, "empty")
	if err := os.WriteFile(emptyFile, []byte(" \n"), 0o600); err != nil {
		t.Fatal(err)
	}
	secretEq := cmp.Comparer(func(a, b model.Secret) bool { return a.Reveal() == b.Reveal() })

	tests := []struct {
		name    string
		env     map[string]string
		want    model.OpenAIConfig
		wantErr bool
	}{
		{
			name: "KeyFromFile",
			env:  map[string]string{"OPENAI_BASE_URL": "http://vllm:8000/v1", "OPENAI_MODEL": "qwen", "OPENAI_API_KEY_FILE": keyFile},
			want: model.OpenAIConfig{BaseURL: "http://vllm:8000/v1", Model: "qwen", APIKey: model.NewSecret(testKey)},
		},
		{
			name: "KeyFromEnv",
			env:  map[string]string{"OPENAI_MODEL": "gpt-test", "OPENAI_API_KEY": " " + testKey + " "},
			want: model.OpenAIConfig{Model: "gpt-test", APIKey: model.NewSecret(testKey)},
		},
		{name: "NothingSet", env: map[string]string{}, want: model.OpenAIConfig{}},
		{name: "BothKeys", env: map[string]string{"OPENAI_API_KEY": testKey, "OPENAI_API_KEY_FILE": keyFile}, wantErr: true},
		{name: "MissingFile", env: map[string]string{"OPENAI_API_KEY_FILE": filepath.Join(dir, "nope")}, wantErr: true},
		{name: "EmptyFile", env: map[string]string{"OPENAI_API_KEY_FILE": emptyFile}, wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got, err := model.OpenAIConfigFromEnv(func(k string) string { return tt.env[k] })
			if tt.wantErr {
				if err == nil {
					t.Fatalf("OpenAIConfigFromEnv = %+v, want an error", got)
				}
				if strings.Contains(err.Error(), testKey) {
					t.Errorf("error shows the API key: %v", err)
				}
				return
			}
			if err != nil {
				t.Fatalf("OpenAIConfigFromEnv: %v", err)
			}
			if diff := cmp.Diff(tt.want, got, secretEq); diff != "" {
				t.Errorf("config mismatch (-want +got):\n%s", diff)
			}
		})
	}

	t.Run("UsableWithNewOpenAI", func(t *testing.T) {
		t.Parallel()
		f := newFakeAPI(t, func(w http.ResponseWriter, r *http.Request) { writeJSON(w, http.StatusOK, completion) })
		env := map[string]string{"OPENAI_BASE_URL": f.srv.URL + "/v1", "OPENAI_MODEL": "gpt-test", "OPENAI_API_KEY_FILE": keyFile}
		cfg, err := model.OpenAIConfigFromEnv(func(k string) string { return env[k] })
		if err != nil {
			t.Fatalf("OpenAIConfigFromEnv: %v", err)
		}
		m, err := model.NewOpenAI(cfg)
		if err != nil {
			t.Fatalf("NewOpenAI: %v", err)
		}
		if _, err := m.Call(t.Context(), openAIRequest(`{"prompt": "hi"}`), nil); err != nil {
			t.Fatalf("Call: %v", err) // the fake API checks the bearer key
		}
	})
}
