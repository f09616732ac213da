package main_test

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/flightdeck-ai/flightdeck/client"
	"github.com/flightdeck-ai/flightdeck/internal/testkit/redistest"
	"github.com/flightdeck-ai/flightdeck/topics"
)

// The stock binaries, built once for all tests of this package.
var gatewayBin, consumerBin string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "flightdeck-gateway")
	if err != nil {
		panic(err)
	}
	gatewayBin, consumerBin = filepath.Join(dir, "gateway"), filepath.Join(dir, "consumer")
	var wg sync.WaitGroup
	errs := make([]error, 2)
	for i, b := range []struct{ out, pkg string }{{gatewayBin, "."}, {consumerBin, "../consumer"}} {
		wg.Go(func() {
			if out, err := exec.Command("go", "build", "-o", b.out, b.pkg).CombinedOutput(); err != nil {
				errs[i] = fmt.Errorf("go build %s: %w\n%s", b.pkg, err, out)
			}
		})
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.RemoveAll(dir)
			os.Exit(1)
		}
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// stage is the built-in stage the tests' consumers serve, on the sim model.
const stage = "interview-evaluation"

// The tenants' tokens: acme's file names its SHA-256, beta's a file holding the token.
const (
	acmeToken = "acme-token-0123456789abcdef"
	betaToken = "beta-token-0123456789abcdef"
)

// fleet is one test's Redis, with a tokens file for acme and beta on one prefix.
type fleet struct {
	t      testing.TB
	rdb    *redis.Client
	url    string // the consumer's and the test's Redis URL
	gwURL  string // the gateway's, when it differs from url
	prefix string
	tokens string // the tokens file
	dir    string
}

// newFleet starts a private Redis (or uses REDIS_URL's) and writes the tokens file.
func newFleet(t testing.TB) *fleet {
	t.Helper()
	r := redistest.New(t)
	return newFleetOn(t, r.Client, r.URL, r.Prefix)
}

// newFleetOn is newFleet on rdb, whose URL is url, under prefix.
func newFleetOn(t testing.TB, rdb *redis.Client, url, prefix string) *fleet {
	t.Helper()
	f := &fleet{t: t, rdb: rdb, url: url, prefix: prefix, dir: t.TempDir()}
	if err := os.WriteFile(filepath.Join(f.dir, "beta.token"), []byte(betaToken+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256([]byte(acmeToken))
	yaml := fmt.Sprintf(`tokens:
  - name: acme-web
    sha256: %s
    tenant: acme
    prefix: %q
  - name: beta-batch
    token_file: beta.token
    tenant: beta
    prefix: %q
`, hex.EncodeToString(sum[:]), f.prefix, f.prefix)
	f.tokens = filepath.Join(f.dir, "tokens.yaml")
	if err := os.WriteFile(f.tokens, []byte(yaml), 0o600); err != nil {
		t.Fatal(err)
	}
	return f
}

// proc is a running stock binary.
type proc struct {
	cmd  *exec.Cmd
	log  *syncBuffer
	done chan struct{}
	err  error // the exit error, once done is closed
}

// start runs bin with args and env on top of this process's environment without REDIS_*,
// FLIGHTDECK_* and OTEL_* variables, and kills it when the test ends.
func (f *fleet) start(name, bin string, env []string, args ...string) *proc {
	f.t.Helper()
	p := &proc{cmd: exec.Command(bin, args...), log: &syncBuffer{}, done: make(chan struct{})}
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "REDIS_") && !strings.HasPrefix(kv, "FLIGHTDECK_") && !strings.HasPrefix(kv, "OTEL_") {
			p.cmd.Env = append(p.cmd.Env, kv)
		}
	}
	p.cmd.Env = append(p.cmd.Env, env...)
	p.cmd.Stdout, p.cmd.Stderr = p.log, p.log
	if err := p.cmd.Start(); err != nil {
		f.t.Fatal(err)
	}
	go func() { p.err = p.cmd.Wait(); close(p.done) }()
	f.t.Cleanup(func() {
		_ = p.cmd.Process.Kill()
		<-p.done
		if f.t.Failed() {
			f.t.Logf("--- log of %s:\n%s", name, p.log.String())
		}
	})
	return p
}

// consumer starts a stock consumer of the built-in stage on the fleet's prefix, on the sim
// model, and waits until it registered the stage, as producers check.
func (f *fleet) consumer() *proc {
	f.t.Helper()
	p := f.start("consumer", consumerBin, []string{"REDIS_URL=" + f.url}, "--prefix", f.prefix, "--stages", stage,
		"--spool-dir", filepath.Join(f.dir, "spool"), "--log-level", "warn")
	cl, err := client.New(client.Config{Client: f.rdb, Keyspace: topics.Keyspace{Prefix: f.prefix}})
	if err != nil {
		f.t.Fatal(err)
	}
	deadline := time.Now().Add(60 * time.Second)
	for cl.CheckStages(context.Background(), stage) != nil {
		select {
		case <-p.done:
			f.t.Fatalf("the consumer exited at start: %v\n%s", p.err, p.log.String())
		case <-time.After(50 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			f.t.Fatalf("the consumer did not register its stage within 60 s:\n%s", p.log.String())
		}
	}
	return p
}

// gateway starts the stock gateway on a free port with the fleet's tokens file and extra
// flags, and returns it with its base URL once it logged that it serves.
func (f *fleet) gateway(extra ...string) (*proc, string) {
	f.t.Helper()
	args := append([]string{"--listen", "127.0.0.1:0", "--tokens", f.tokens, "--grace", "5s"}, extra...)
	url := f.url
	if f.gwURL != "" {
		url = f.gwURL
	}
	p := f.start("gateway", gatewayBin, []string{"REDIS_URL=" + url}, args...)
	addr, err := p.awaitLog("serving the HTTP API", "listen", 60*time.Second)
	if err != nil {
		f.t.Fatal(err)
	}
	return p, "http://" + addr
}

// awaitLog waits for the first JSON log line whose message is msg and returns its field.
func (p *proc) awaitLog(msg, field string, timeout time.Duration) (string, error) {
	deadline := time.After(timeout)
	for {
		changed := p.log.changed() // before reading, so that no write is missed
		for line := range strings.SplitSeq(p.log.String(), "\n") {
			var m map[string]any
			if json.Unmarshal([]byte(line), &m) == nil && m["message"] == msg {
				v, _ := m[field].(string)
				return v, nil
			}
		}
		select {
		case <-p.done:
			return "", fmt.Errorf("exited (%v) before logging %q:\n%s", p.err, msg, p.log.String())
		case <-deadline:
			return "", fmt.Errorf("no %q in the log within %v:\n%s", msg, timeout, p.log.String())
		case <-changed:
		}
	}
}

// stop sends SIGTERM and waits up to timeout for the process to exit.
func (p *proc) stop(t testing.TB, timeout time.Duration) error {
	t.Helper()
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
		return p.err
	case <-time.After(timeout):
		t.Fatalf("the process did not exit within %v of SIGTERM", timeout)
	}
	return nil
}

// response is an answer of the gateway.
type response struct {
	status int
	header http.Header
	body   []byte
}

// decode decodes the body into v.
func (r response) decode(t testing.TB, v any) {
	t.Helper()
	if err := json.Unmarshal(r.body, v); err != nil {
		t.Fatalf("body %q: %v", r.body, err)
	}
}

// code is the error code of an error body.
func (r response) code() string {
	var e struct{ Code string }
	_ = json.Unmarshal(r.body, &e)
	return e.Code
}

// call sends a request to the gateway at base with token (none when empty), body (JSON
// text, none when empty) and headers as name, value pairs.
func call(t testing.TB, method, url, token, body string, headers ...string) response {
	t.Helper()
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, method, url, rd)
	if err != nil {
		t.Fatal(err)
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	for i := 0; i+1 < len(headers); i += 2 {
		req.Header.Add(headers[i], headers[i+1])
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	b, err := io.ReadAll(res.Body)
	if err != nil {
		t.Fatal(err)
	}
	return response{status: res.StatusCode, header: res.Header, body: b}
}

// results returns the events of the fleet's result stream of the stage, by task id.
func (f *fleet) results() map[string]int {
	f.t.Helper()
	msgs, err := f.rdb.XRange(context.Background(), topics.Keyspace{Prefix: f.prefix}.Results(stage), "-", "+").Result()
	if err != nil {
		f.t.Fatal(err)
	}
	out := map[string]int{}
	for _, m := range msgs {
		var ev topics.Event
		s, _ := m.Values["payload"].(string)
		if json.Unmarshal([]byte(s), &ev) == nil {
			out[ev.TaskID]++
		}
	}
	return out
}

// syncBuffer is a buffer safe for a process's concurrent writes, which signals each write.
type syncBuffer struct {
	mu   sync.Mutex
	buf  bytes.Buffer
	wake chan struct{}
}

// Write appends p and wakes the waiters of changed.
func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.wake != nil {
		close(b.wake)
		b.wake = nil
	}
	return b.buf.Write(p)
}

// String returns what was written so far.
func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// changed returns a channel closed by the next write.
func (b *syncBuffer) changed() <-chan struct{} {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.wake == nil {
		b.wake = make(chan struct{})
	}
	return b.wake
}

// openStream opens an event stream of the stages with token, and returns its lines, until it
// ends or the test does.
func openStream(t testing.TB, base, token, stages string) <-chan string {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	req, _ := http.NewRequestWithContext(ctx, "GET", base+"/v1/events?stages="+stages, nil)
	req.Header.Set("Authorization", "Bearer "+token)
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { res.Body.Close() })
	if res.StatusCode != http.StatusOK {
		t.Fatalf("GET /v1/events: %s", res.Status)
	}
	return sseLines(res.Body)
}

// sseLines reads an event stream's lines into a channel until it ends.
func sseLines(r io.Reader) <-chan string {
	ch := make(chan string, 1024)
	go func() {
		defer close(ch)
		sc := bufio.NewScanner(r)
		sc.Buffer(make([]byte, 64<<10), 1<<20)
		for sc.Scan() {
			ch <- sc.Text()
		}
	}()
	return ch
}
