package gateway

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/rs/zerolog"

	"github.com/flightdeck-ai/flightdeck/client"
	"github.com/flightdeck-ai/flightdeck/handlers"
	"github.com/flightdeck-ai/flightdeck/internal/testkit/redistest"
	"github.com/flightdeck-ai/flightdeck/topics"
)

// The tokens of the tests: acme and beta share a prefix, gamma has one of its own.
const (
	acmeSecret  = "acme-secret-0123456789abcdef"
	betaSecret  = "beta-secret-0123456789abcdef"
	gammaSecret = "gamma-secret-0123456789abcdef"
)

// stage is the built-in stage the tests' consumers serve.
const stage = "interview-evaluation"

// bundle is one test's gateway on a private Redis.
type bundle struct {
	t      *testing.T
	rdb    *redis.Client
	url    string
	shared string // the prefix of acme and beta
	own    string // gamma's prefix
	gw     *Server
	srv    *httptest.Server
	logs   *syncWriter
}

// newBundle starts a gateway on a private Redis with the three tokens; mutate may change the
// configuration first.
func newBundle(t *testing.T, mutate func(*Config)) *bundle {
	t.Helper()
	r := redistest.New(t)
	b := &bundle{t: t, rdb: r.Client, url: r.URL, shared: r.Prefix, own: redistest.Prefix(), logs: &syncWriter{}}
	log := zerolog.New(b.logs).Level(zerolog.DebugLevel)
	cfg := Config{Client: r.Client, Logger: &log, Tokens: []Token{
		{Name: "acme-web", SHA256: HashToken(acmeSecret), Tenant: "acme", Prefix: b.shared},
		{Name: "beta-batch", SHA256: HashToken(betaSecret), Tenant: "beta", Prefix: b.shared},
		{Name: "gamma", SHA256: HashToken(gammaSecret), Tenant: "gamma", Prefix: b.own},
	}}
	if mutate != nil {
		mutate(&cfg)
	}
	gw, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	b.gw = gw
	b.srv = httptest.NewServer(gw)
	t.Cleanup(b.srv.Close)
	return b
}

// consumer runs an in-process consumer of the built-in stage on prefix until the test ends.
func (b *bundle) consumer(prefix string) {
	b.t.Helper()
	stages, err := handlers.LoadStages("", []string{stage})
	if err != nil {
		b.t.Fatal(err)
	}
	log := zerolog.New(zerolog.NewTestWriter(b.t)).Level(zerolog.ErrorLevel)
	c, err := handlers.NewConsumer(handlers.Config{RedisURL: b.url, Keyspace: topics.Keyspace{Prefix: prefix},
		Stages: stages, Logger: &log, SpoolDir: b.t.TempDir()})
	if err != nil {
		b.t.Fatal(err)
	}
	ctx, stop := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- c.Run(ctx) }()
	b.t.Cleanup(func() { stop(); <-done })
	select {
	case <-c.Started():
	case err := <-done:
		b.t.Fatalf("consumer: %v", err)
	}
}

// resp is an answer of the gateway.
type resp struct {
	status int
	header http.Header
	body   []byte
}

// json decodes the body into v.
func (r resp) json(t *testing.T, v any) {
	t.Helper()
	if err := json.Unmarshal(r.body, v); err != nil {
		t.Fatalf("body %q: %v", r.body, err)
	}
}

// code returns the error code of an error body.
func (r resp) code() string {
	var e errorBody
	_ = json.Unmarshal(r.body, &e)
	return e.Code
}

// do sends a request with the token secret (none when empty) and extra headers as
// name, value pairs. body is sent as it is when it is a string or []byte, else as JSON.
func (b *bundle) do(method, path, secret string, body any, headers ...string) resp {
	b.t.Helper()
	var rd io.Reader
	switch v := body.(type) {
	case nil:
	case string:
		rd = strings.NewReader(v)
	case []byte:
		rd = bytes.NewReader(v)
	default:
		j, err := json.Marshal(v)
		if err != nil {
			b.t.Fatal(err)
		}
		rd = bytes.NewReader(j)
	}
	req, err := http.NewRequest(method, b.srv.URL+path, rd)
	if err != nil {
		b.t.Fatal(err)
	}
	if secret != "" {
		req.Header.Set("Authorization", "Bearer "+secret)
	}
	for i := 0; i+1 < len(headers); i += 2 {
		req.Header.Add(headers[i], headers[i+1])
	}
	res, err := b.srv.Client().Do(req)
	if err != nil {
		b.t.Fatal(err)
	}
	defer res.Body.Close()
	out, _ := io.ReadAll(res.Body)
	return resp{status: res.StatusCode, header: res.Header, body: out}
}

// xlen returns the length of prefix's task stream of the stage.
func (b *bundle) xlen(prefix, stageName string) int64 {
	b.t.Helper()
	n, err := b.rdb.XLen(context.Background(), topics.Keyspace{Prefix: prefix}.Tasks(stageName)).Result()
	if err != nil && err != redis.Nil {
		b.t.Fatal(err)
	}
	return n
}

// taskOf returns the task of a receipt of the shared prefix, as its stream entry holds it.
func (b *bundle) taskOf(t *testing.T, rc client.Receipt) topics.Task {
	t.Helper()
	msgs, err := b.rdb.XRange(context.Background(), topics.Keyspace{Prefix: b.shared}.Tasks(rc.Stage), rc.StreamID, rc.StreamID).Result()
	if err != nil || len(msgs) != 1 {
		t.Fatalf("the task's entry: %v %v", msgs, err)
	}
	payload, _ := msgs[0].Values["payload"].(string)
	task, err := topics.DecodeTask([]byte(payload), topics.Limits{})
	if err != nil {
		t.Fatal(err)
	}
	return task
}

// sse is an open event stream.
type sse struct {
	t    *testing.T
	res  *http.Response
	rd   *bufio.Reader
	msgs chan sseMsg
}

// sseMsg is one message of an event stream: its event type, id and data.
type sseMsg struct {
	event, id, data string
	hasID           bool
}

// events opens an event stream of the stages with the token, resuming from lastID when set.
func (b *bundle) events(secret, stages, lastID string) *sse {
	b.t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, b.srv.URL+"/v1/events?stages="+stages, nil)
	req.Header.Set("Authorization", "Bearer "+secret)
	if lastID != "" {
		req.Header.Set("Last-Event-ID", lastID)
	}
	res, err := b.srv.Client().Do(req)
	if err != nil {
		cancel()
		b.t.Fatal(err)
	}
	s := &sse{t: b.t, res: res, rd: bufio.NewReader(res.Body), msgs: make(chan sseMsg, 1024)}
	b.t.Cleanup(func() { cancel(); res.Body.Close() })
	if res.StatusCode != http.StatusOK {
		return s
	}
	go func() {
		defer close(s.msgs)
		var m sseMsg
		for {
			line, err := s.rd.ReadString('\n')
			if err != nil {
				return
			}
			line = strings.TrimRight(line, "\n")
			switch {
			case line == "":
				if m.hasID || m.data != "" || m.event != "" {
					s.msgs <- m
				}
				m = sseMsg{}
			case strings.HasPrefix(line, ":"):
			case strings.HasPrefix(line, "id: "):
				m.id, m.hasID = strings.TrimPrefix(line, "id: "), true
			case strings.HasPrefix(line, "event: "):
				m.event = strings.TrimPrefix(line, "event: ")
			case strings.HasPrefix(line, "data: "):
				m.data += strings.TrimPrefix(line, "data: ")
			}
		}
	}()
	return s
}

// next returns the next message, failing the test when none comes within d.
func (s *sse) next(d time.Duration) sseMsg {
	s.t.Helper()
	select {
	case m, ok := <-s.msgs:
		if !ok {
			s.t.Fatal("the event stream ended")
		}
		return m
	case <-time.After(d):
		s.t.Fatalf("no message within %v", d)
	}
	return sseMsg{}
}

// close ends the stream from the client's side.
func (s *sse) close() { s.res.Body.Close() }

// syncWriter is a buffer safe for the logger's concurrent writes.
type syncWriter struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (w *syncWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.buf.Write(p)
}

// String returns what was written so far.
func (w *syncWriter) String() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.buf.String()
}
