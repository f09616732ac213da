package model

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"net/url"
	"os"
	"strings"
	"time"
)

const (
	// maxResponseBytes caps how much of a successful response or a whole stream is read.
	maxResponseBytes = 8 << 20
	// maxErrorBodyBytes caps how much of an error response is read.
	maxErrorBodyBytes = 64 << 10
	// maxErrorMessageBytes caps the provider's error message copied into an *Error.
	maxErrorMessageBytes = 300
)

// OpenAIConfig configures an OpenAI adapter. Printing it with fmt, JSON or slog never shows
// the API key.
type OpenAIConfig struct {
	// BaseURL is the API root. The adapter POSTs to BaseURL + "/chat/completions". Any
	// OpenAI-compatible server works, such as vLLM, Ollama, LiteLLM or Azure-style gateways.
	// Defaults to "https://api.openai.com/v1".
	BaseURL string
	// APIKey is sent as "Authorization: Bearer <key>". It is optional: when empty no
	// Authorization header is sent, and local servers often need none. It must not contain line
	// breaks.
	APIKey Secret
	// Model is the provider's model name, sent as "model". Required.
	Model string
	// Timeout bounds each call, streaming included, on top of the caller's ctx.
	// Defaults to 60 s.
	Timeout time.Duration
	// HTTPClient sends the requests. Defaults to a new &http.Client{} per adapter.
	HTTPClient *http.Client
	// SystemPrompt, if set, is sent as a first "system" message. Defaults to none.
	SystemPrompt string
	// Stream asks for a server-sent-event stream. Every chunk reports progress, which keeps the
	// flight's progress liveness fresh during long generations. Without Stream, progress is
	// never reported, so a stage's stallTimeout must exceed Timeout. Defaults to false.
	Stream bool
	// MaxTokens, if positive, is sent as "max_tokens". Defaults to 0, which is not sent.
	MaxTokens int
	// Temperature, if set, is sent as "temperature". It must be finite and not negative.
	// Defaults to nil, which is not sent and leaves the provider's default.
	Temperature *float64
}

func (c *OpenAIConfig) setDefaults() {
	if c.BaseURL == "" {
		c.BaseURL = "https://api.openai.com/v1"
	}
	c.BaseURL = strings.TrimRight(c.BaseURL, "/")
	if c.Timeout == 0 {
		c.Timeout = 60 * time.Second
	}
	if c.HTTPClient == nil {
		// http.DefaultTransport keeps 2 idle connections per host. A stage running 64 calls
		// at once would open a new connection for most of them.
		t := http.DefaultTransport.(*http.Transport).Clone()
		t.MaxIdleConnsPerHost = 256
		c.HTTPClient = &http.Client{Transport: t}
	}
}

// validate reports a configuration that cannot work. ownClient means the caller gave its own
// HTTPClient, which may supply the credentials itself.
func (c *OpenAIConfig) validate(ownClient bool) error {
	u, err := url.Parse(c.BaseURL)
	if err != nil {
		// url.Parse's error quotes the whole URL, credentials included.
		return errors.New("BaseURL is not a valid URL")
	}
	if (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return fmt.Errorf("BaseURL %q: want an absolute http or https URL", publicURL(c.BaseURL))
	}
	if c.Model == "" {
		return errors.New("Model is required")
	}
	if strings.EqualFold(u.Hostname(), "api.openai.com") && c.APIKey.Reveal() == "" && !ownClient {
		// Every call would fail with 401 and spend the flight's attempts.
		return errors.New("api.openai.com needs an API key: set OPENAI_API_KEY or OPENAI_API_KEY_FILE (APIKey)")
	}
	if c.Timeout < 0 {
		return fmt.Errorf("Timeout %s is negative", c.Timeout)
	}
	if c.MaxTokens < 0 {
		return fmt.Errorf("MaxTokens %d is negative", c.MaxTokens)
	}
	if t := c.Temperature; t != nil && (math.IsNaN(*t) || math.IsInf(*t, 0) || *t < 0) {
		return fmt.Errorf("Temperature %v: want a finite number >= 0", *t)
	}
	if strings.ContainsAny(c.APIKey.Reveal(), "\r\n") {
		return errors.New("APIKey contains a line break")
	}
	return nil
}

// OpenAIConfigFromEnv reads an OpenAIConfig from the environment through getenv, or os.Getenv
// when getenv is nil. It reads OPENAI_BASE_URL, OPENAI_MODEL, and the key from OPENAI_API_KEY
// or from the file named by OPENAI_API_KEY_FILE, with surrounding white space trimmed. Setting
// both key variables is an error. Unset variables leave their fields zero, for NewOpenAI to
// default or reject.
func OpenAIConfigFromEnv(getenv func(string) string) (OpenAIConfig, error) {
	if getenv == nil {
		getenv = os.Getenv
	}
	cfg := OpenAIConfig{
		BaseURL: strings.TrimSpace(getenv("OPENAI_BASE_URL")),
		Model:   strings.TrimSpace(getenv("OPENAI_MODEL")),
	}
	key, file := strings.TrimSpace(getenv("OPENAI_API_KEY")), strings.TrimSpace(getenv("OPENAI_API_KEY_FILE"))
	switch {
	case key != "" && file != "":
		return OpenAIConfig{}, errors.New("model: openai: set OPENAI_API_KEY or OPENAI_API_KEY_FILE, not both")
	case file != "":
		b, err := os.ReadFile(file)
		if err != nil {
			return OpenAIConfig{}, fmt.Errorf("model: openai: read OPENAI_API_KEY_FILE: %w", err)
		}
		key = strings.TrimSpace(string(b))
		if key == "" {
			return OpenAIConfig{}, fmt.Errorf("model: openai: OPENAI_API_KEY_FILE %q is empty", file)
		}
	}
	if key != "" {
		cfg.APIKey = NewSecret(key)
	}
	return cfg, nil
}

// OpenAI is a Model that calls an OpenAI-compatible chat-completions endpoint. Create it
// with NewOpenAI. It is safe for concurrent use.
//
// The chat messages come from the task input. When the input is an object with a "messages"
// member, an array of {"role", "content"}, that is used with content passed through as is.
// Else a "prompt" member, a string, is sent as one user message. Else the whole input JSON is
// the content of one user message. A "messages" or "prompt" member of the wrong shape is a
// final TypeBadRequest error, and the endpoint is not called. SystemPrompt, if set, goes
// first.
//
// The output is a JSON object:
//
//	{"model":"<model that answered>","content":"...","finishReason":"stop","usage":{"promptTokens":9,"completionTokens":12,"totalTokens":21}}
//
// where usage is left out when the endpoint reports none.
//
// Failures are *Error:
//   - HTTP 429 is a retryable TypeRateLimited with RetryAfter from the Retry-After header.
//   - 5xx is a retryable TypeUpstream.
//   - 408, a deadline of Timeout or ctx, a network timeout or a connection reset is a
//     retryable TypeTimeout.
//   - Other 4xx is a final TypeBadRequest whose Message holds the provider's error message,
//     at most 300 bytes.
//   - A malformed, empty, truncated or oversized response, over 8 MiB, is a retryable
//     TypeBadOutput.
//   - A cancelled ctx is a final TypeCancelled.
//
// The API key never appears in errors.
type OpenAI struct {
	cfg      OpenAIConfig
	endpoint string
}

var _ Model = (*OpenAI)(nil)

// NewOpenAI applies cfg's defaults, validates it and returns the adapter.
func NewOpenAI(cfg OpenAIConfig) (*OpenAI, error) {
	ownClient := cfg.HTTPClient != nil // may authenticate itself, by a signing transport or a proxy
	cfg.setDefaults()
	if err := cfg.validate(ownClient); err != nil {
		return nil, fmt.Errorf("model: openai: %w", err)
	}
	return &OpenAI{cfg: cfg, endpoint: cfg.BaseURL + "/chat/completions"}, nil
}

// Name returns "openai".
func (o *OpenAI) Name() string { return "openai" }

// Model returns the model its requests ask for.
func (o *OpenAI) Model() string { return o.cfg.Model }

// String describes the adapter without its key.
func (o *OpenAI) String() string {
	return fmt.Sprintf("model.OpenAI{BaseURL: %q, Model: %q, Stream: %t}", publicURL(o.cfg.BaseURL), o.cfg.Model, o.cfg.Stream)
}

// publicURL is raw without the parts that may hold a secret: user information, query and
// fragment. It is for messages and logs. It is "(invalid URL)" when raw does not parse.
func publicURL(raw string) string {
	u, err := url.Parse(raw)
	if err != nil {
		return "(invalid URL)"
	}
	u.User, u.RawQuery, u.ForceQuery, u.Fragment, u.RawFragment = nil, "", false, "", ""
	return u.String()
}

type chatMessage struct {
	Role    string          `json:"role"`
	Content json.RawMessage `json:"content"`
}

type chatRequest struct {
	Model         string         `json:"model"`
	Messages      []chatMessage  `json:"messages"`
	Stream        bool           `json:"stream,omitempty"`
	StreamOptions *streamOptions `json:"stream_options,omitempty"`
	MaxTokens     int            `json:"max_tokens,omitempty"`
	Temperature   *float64       `json:"temperature,omitempty"`
}

type streamOptions struct {
	IncludeUsage bool `json:"include_usage"`
}

type apiUsage struct {
	PromptTokens     int `json:"prompt_tokens"`
	CompletionTokens int `json:"completion_tokens"`
	TotalTokens      int `json:"total_tokens"`
}

// chatResponse is a non-streamed response or one stream chunk.
type chatResponse struct {
	Model   string `json:"model"`
	Choices []struct {
		Index   int `json:"index"`
		Message struct {
			Content string `json:"content"`
		} `json:"message"`
		Delta struct {
			Content string `json:"content"`
		} `json:"delta"`
		FinishReason string `json:"finish_reason"`
	} `json:"choices"`
	Usage *apiUsage       `json:"usage"`
	Error json.RawMessage `json:"error"`
}

type outputUsage struct {
	PromptTokens     int `json:"promptTokens"`
	CompletionTokens int `json:"completionTokens"`
	TotalTokens      int `json:"totalTokens"`
}

type chatOutput struct {
	Model        string       `json:"model"`
	Content      string       `json:"content"`
	FinishReason string       `json:"finishReason"`
	Usage        *outputUsage `json:"usage,omitempty"`
}

// Call sends req to the chat-completions endpoint, as described on OpenAI. progress may be nil.
// It is called on every stream chunk when Stream is set.
func (o *OpenAI) Call(ctx context.Context, req Request, progress ProgressFunc) (json.RawMessage, error) {
	msgs, err := o.messages(req.Input)
	if err != nil {
		return nil, err
	}
	cr := chatRequest{Model: o.cfg.Model, Messages: msgs, MaxTokens: o.cfg.MaxTokens, Temperature: o.cfg.Temperature}
	if o.cfg.Stream {
		cr.Stream, cr.StreamOptions = true, &streamOptions{IncludeUsage: true}
	}
	body, err := json.Marshal(cr)
	if err != nil {
		return nil, &Error{Type: TypeBadRequest, Code: "invalid_input", Message: "openai: encode request", Err: err}
	}

	ctx, cancel := context.WithTimeoutCause(ctx, o.cfg.Timeout, fmt.Errorf("openai: call exceeded %s", o.cfg.Timeout))
	defer cancel()
	hreq, err := http.NewRequestWithContext(ctx, http.MethodPost, o.endpoint, bytes.NewReader(body))
	if err != nil {
		return nil, &Error{Type: TypeBadRequest, Code: "invalid_request", Message: "openai: build request", Err: err}
	}
	hreq.Header.Set("Content-Type", "application/json")
	if o.cfg.Stream {
		hreq.Header.Set("Accept", "text/event-stream")
	} else {
		hreq.Header.Set("Accept", "application/json")
	}
	if key := o.cfg.APIKey.Reveal(); key != "" {
		hreq.Header.Set("Authorization", "Bearer "+key)
	}
	resp, err := o.cfg.HTTPClient.Do(hreq)
	if err != nil {
		return nil, transportError(ctx, err)
	}
	// Bodies are read to EOF within their caps where that is cheap, so the connection is
	// reused. A stream is closed without draining, so a stalled server cannot hold the call.
	defer resp.Body.Close()
	reportRemaining(ctx, resp.Header)
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		return nil, o.statusError(ctx, resp)
	}

	var out *chatOutput
	if o.cfg.Stream {
		out, err = o.readStream(ctx, resp.Body, progress)
	} else {
		out, err = o.readResponse(ctx, resp.Body)
	}
	if err != nil {
		return nil, err
	}
	if out.Content == "" {
		return nil, &Error{Retryable: true, Type: TypeBadOutput, Code: "empty_content", Message: "openai: response has no content"}
	}
	if out.Model == "" {
		out.Model = o.cfg.Model
	}
	if out.Usage != nil {
		ReportUsage(ctx, Usage{Model: out.Model, PromptTokens: out.Usage.PromptTokens, CompletionTokens: out.Usage.CompletionTokens})
	}
	raw, err := json.Marshal(out)
	if err != nil {
		return nil, fmt.Errorf("openai: encode output: %w", err)
	}
	return raw, nil
}

// messages builds the chat messages from input, as described on OpenAI.
func (o *OpenAI) messages(input json.RawMessage) ([]chatMessage, error) {
	bad := func(msg string, err error) error {
		return &Error{Type: TypeBadRequest, Code: "invalid_input", Message: "openai: " + msg, Err: err}
	}
	var msgs []chatMessage
	if o.cfg.SystemPrompt != "" {
		msgs = append(msgs, textMessage("system", o.cfg.SystemPrompt))
	}
	in := bytes.TrimSpace(input)
	if len(in) == 0 {
		return nil, bad("input is empty", nil)
	}
	if !json.Valid(in) {
		return nil, bad("input is not valid JSON", nil)
	}
	if in[0] == '{' {
		var obj map[string]json.RawMessage
		if err := json.Unmarshal(in, &obj); err != nil {
			return nil, bad("decode input", err)
		}
		if raw, ok := obj["messages"]; ok {
			var given []chatMessage
			if err := json.Unmarshal(raw, &given); err != nil {
				return nil, bad(`"messages" is not an array of {"role", "content"}`, err)
			}
			if len(given) == 0 {
				return nil, bad(`"messages" is empty`, nil)
			}
			for i, m := range given {
				if m.Role == "" || len(m.Content) == 0 || string(m.Content) == "null" {
					return nil, bad(fmt.Sprintf(`"messages"[%d] lacks a role or content`, i), nil)
				}
			}
			return append(msgs, given...), nil
		}
		if raw, ok := obj["prompt"]; ok {
			var prompt string
			if err := json.Unmarshal(raw, &prompt); err != nil {
				return nil, bad(`"prompt" is not a string`, err)
			}
			return append(msgs, textMessage("user", prompt)), nil
		}
	}
	var compact bytes.Buffer
	if err := json.Compact(&compact, in); err != nil {
		return nil, bad("compact input", err)
	}
	return append(msgs, textMessage("user", compact.String())), nil
}

func textMessage(role, text string) chatMessage {
	content, _ := json.Marshal(text) // a string always encodes
	return chatMessage{Role: role, Content: content}
}

// readResponse decodes a non-streamed chat completion.
func (o *OpenAI) readResponse(ctx context.Context, body io.Reader) (*chatOutput, error) {
	raw, err := io.ReadAll(io.LimitReader(body, maxResponseBytes+1))
	if err != nil {
		return nil, transportError(ctx, err)
	}
	if len(raw) > maxResponseBytes {
		return nil, tooLarge()
	}
	var r chatResponse
	if err := json.Unmarshal(raw, &r); err != nil {
		return nil, &Error{Retryable: true, Type: TypeBadOutput, Code: "malformed_response", Message: "openai: decode response", Err: err}
	}
	if err := o.inBandError(r.Error); err != nil {
		return nil, err
	}
	if len(r.Choices) == 0 {
		return nil, &Error{Retryable: true, Type: TypeBadOutput, Code: "no_choices", Message: "openai: response has no choices"}
	}
	c := r.Choices[0]
	return &chatOutput{Model: r.Model, Content: c.Message.Content, FinishReason: c.FinishReason, Usage: r.Usage.output()}, nil
}

// readStream reads a server-sent-event stream of chat completion chunks until [DONE],
// reporting progress on every chunk.
func (o *OpenAI) readStream(ctx context.Context, body io.Reader, progress ProgressFunc) (*chatOutput, error) {
	lr := &io.LimitedReader{R: body, N: maxResponseBytes + 1}
	sc := bufio.NewScanner(lr)
	sc.Buffer(make([]byte, 0, 64<<10), maxResponseBytes)
	var (
		out     chatOutput
		content strings.Builder
		done    bool
	)
	for sc.Scan() {
		data, ok := bytes.CutPrefix(sc.Bytes(), []byte("data:"))
		if !ok {
			continue // blank separators, comments, event: and id: fields
		}
		data = bytes.TrimSpace(data)
		if string(data) == "[DONE]" {
			done = true
			break
		}
		var c chatResponse
		if err := json.Unmarshal(data, &c); err != nil {
			return nil, &Error{Retryable: true, Type: TypeBadOutput, Code: "malformed_chunk", Message: "openai: decode stream chunk", Err: err}
		}
		if err := o.inBandError(c.Error); err != nil {
			return nil, err
		}
		progress.report()
		if out.Model == "" {
			out.Model = c.Model
		}
		if c.Usage != nil {
			out.Usage = c.Usage.output()
		}
		for _, ch := range c.Choices {
			if ch.Index != 0 {
				continue
			}
			content.WriteString(ch.Delta.Content)
			if ch.FinishReason != "" {
				out.FinishReason = ch.FinishReason
			}
		}
	}
	if err := sc.Err(); err != nil {
		if errors.Is(err, bufio.ErrTooLong) {
			return nil, tooLarge()
		}
		return nil, transportError(ctx, err)
	}
	if !done && lr.N <= 0 {
		return nil, tooLarge()
	}
	if !done && out.FinishReason == "" {
		if ctx.Err() != nil {
			return nil, contextError(ctx)
		}
		return nil, &Error{Retryable: true, Type: TypeBadOutput, Code: "truncated_stream", Message: "openai: stream ended before [DONE]"}
	}
	out.Content = content.String()
	return &out, nil
}

func (u *apiUsage) output() *outputUsage {
	if u == nil {
		return nil
	}
	return &outputUsage{PromptTokens: u.PromptTokens, CompletionTokens: u.CompletionTokens, TotalTokens: u.TotalTokens}
}
