// Package openaitest is an OpenAI-compatible chat-completions server for tests that enforces a
// provider's limits the way OpenAI does: requests and tokens per minute as buckets refilled
// continuously, a request's tokens counted as its prompt estimate plus max_tokens when it
// arrives, HTTP 429 with Retry-After and the x-ratelimit-* headers when a bucket is short, and
// usage in every answer.
package openaitest

import (
	"encoding/json"
	"fmt"
	"math"
	"net/http"
	"net/http/httptest"
	"strconv"
	"sync"
	"time"
)

// Config is a server's limits and answers. Zero limits are no limit.
type Config struct {
	// RequestsPerMinute and TokensPerMinute are the limits.
	RequestsPerMinute, TokensPerMinute int
	// Burst is how much of a minute's budget a bucket holds. Defaults to 10 s.
	Burst time.Duration
	// CompletionTokens is the completion of every answer, at most the request's max_tokens.
	// Defaults to 50.
	CompletionTokens int
	// Latency is how long each answer takes.
	Latency time.Duration
	// Hook, when set, may answer the n-th request itself (true) before the limits apply.
	Hook func(n int, w http.ResponseWriter, r *http.Request) bool
}

// Server is a running test server. Its counters are safe to read at any time.
type Server struct {
	*httptest.Server
	cfg Config

	mu       sync.Mutex
	r, t     float64 // bucket levels
	at       time.Time
	requests int
	limited  int
	used     int // prompt + completion tokens answered
	times    []time.Time
}

// Start starts a server; it closes when the test ends.
func Start(tb interface {
	Cleanup(func())
}, cfg Config) *Server {
	if cfg.Burst == 0 {
		cfg.Burst = 10 * time.Second
	}
	if cfg.CompletionTokens == 0 {
		cfg.CompletionTokens = 50
	}
	s := &Server{cfg: cfg, at: time.Now()}
	s.r, s.t = s.capOf(cfg.RequestsPerMinute), s.capOf(cfg.TokensPerMinute)
	s.Server = httptest.NewServer(http.HandlerFunc(s.serve))
	tb.Cleanup(s.Close)
	return s
}

// BaseURL is the API root to give OPENAI_BASE_URL.
func (s *Server) BaseURL() string { return s.URL + "/v1" }

// Stats returns the requests answered (429s included), the 429s, and the tokens of the
// answered requests' usage.
func (s *Server) Stats() (requests, limited, tokens int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.requests, s.limited, s.used
}

// Times returns when each request that was answered with 200 arrived.
func (s *Server) Times() []time.Time {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]time.Time(nil), s.times...)
}

func (s *Server) capOf(perMinute int) float64 {
	return float64(perMinute) * s.cfg.Burst.Seconds() / 60
}

// refill brings the buckets up to now. s.mu must be held.
func (s *Server) refill(now time.Time) {
	d := now.Sub(s.at).Minutes()
	s.at = now
	s.r = math.Min(s.capOf(s.cfg.RequestsPerMinute), s.r+d*float64(s.cfg.RequestsPerMinute))
	s.t = math.Min(s.capOf(s.cfg.TokensPerMinute), s.t+d*float64(s.cfg.TokensPerMinute))
}

type chatRequest struct {
	Model     string `json:"model"`
	MaxTokens int    `json:"max_tokens"`
	Messages  []struct {
		Content json.RawMessage `json:"content"`
	} `json:"messages"`
}

func (s *Server) serve(w http.ResponseWriter, r *http.Request) {
	var req chatRequest
	if r.URL.Path != "/v1/chat/completions" || json.NewDecoder(r.Body).Decode(&req) != nil {
		http.Error(w, `{"error":{"message":"bad request"}}`, http.StatusBadRequest)
		return
	}
	prompt := 0
	for _, m := range req.Messages {
		prompt += (len(m.Content) + 3) / 4
	}
	completion := s.cfg.CompletionTokens
	if req.MaxTokens > 0 && req.MaxTokens < completion {
		completion = req.MaxTokens
	}
	need := prompt + completion
	if req.MaxTokens > 0 {
		need = prompt + req.MaxTokens
	}
	now := time.Now()
	s.mu.Lock()
	s.requests++
	n := s.requests
	s.mu.Unlock()
	if s.cfg.Hook != nil && s.cfg.Hook(n, w, r) {
		return
	}
	s.mu.Lock()
	s.refill(now)
	rpm, tpm := s.cfg.RequestsPerMinute, s.cfg.TokensPerMinute
	var wait float64 // seconds
	if rpm > 0 && s.r < 1 {
		wait = math.Max(wait, (1-s.r)*60/float64(rpm))
	}
	if tpm > 0 && s.t < math.Min(float64(need), s.capOf(tpm)) {
		wait = math.Max(wait, (math.Min(float64(need), s.capOf(tpm))-s.t)*60/float64(tpm))
	}
	if wait == 0 {
		s.r--
		s.t -= float64(need)
		s.used += prompt + completion
		s.times = append(s.times, now)
	} else {
		s.limited++
	}
	remR, remT := int(math.Max(0, s.r)), int(math.Max(0, s.t))
	s.mu.Unlock()
	h := w.Header()
	h.Set("Content-Type", "application/json")
	h.Set("X-Ratelimit-Limit-Requests", strconv.Itoa(rpm))
	h.Set("X-Ratelimit-Limit-Tokens", strconv.Itoa(tpm))
	if rpm > 0 {
		h.Set("X-Ratelimit-Remaining-Requests", strconv.Itoa(remR))
	}
	if tpm > 0 {
		h.Set("X-Ratelimit-Remaining-Tokens", strconv.Itoa(remT))
	}
	if wait > 0 {
		h.Set("Retry-After", strconv.Itoa(int(math.Ceil(wait))))
		w.WriteHeader(http.StatusTooManyRequests)
		fmt.Fprintf(w, `{"error":{"message":"Rate limit reached; try again in %.3fs","type":"requests","code":"rate_limit_exceeded"}}`, wait)
		return
	}
	if s.cfg.Latency > 0 {
		time.Sleep(s.cfg.Latency)
	}
	fmt.Fprintf(w, `{"model":%q,"choices":[{"index":0,"message":{"role":"assistant","content":"answer %d"},"finish_reason":"stop"}],`+
		`"usage":{"prompt_tokens":%d,"completion_tokens":%d,"total_tokens":%d}}`, req.Model, n, prompt, completion, prompt+completion)
}
