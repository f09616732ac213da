package main_test

import (
	"io"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/flightdeck-ai/flightdeck/internal/testkit/redistest"
)

// failAtStart runs a consumer that must refuse to start and returns what it wrote.
func (e *e2e) failAtStart(t *testing.T, name string, env []string, extra ...string) string {
	t.Helper()
	p := e.startWith(name, env, false, extra...)
	if code := p.exitCode(t, 20*time.Second); code == 0 {
		t.Errorf("%s: exit code 0, want a refusal at start", name)
	}
	b, _ := os.ReadFile(p.logPath)
	return string(b)
}

// exitCode waits up to timeout for p to exit and returns its exit code; a process still
// running then is ended (SIGTERM) and the test fails.
func (p *proc) exitCode(t *testing.T, timeout time.Duration) int {
	t.Helper()
	select {
	case <-p.done:
	case <-time.After(timeout):
		_ = p.cmd.Process.Signal(syscall.SIGTERM)
		<-p.done
		t.Errorf("%s: still running after %v, want it to exit", p.name, timeout)
	}
	return p.cmd.ProcessState.ExitCode()
}

// httpGet sends GET rawURL with the given Host ("" = the URL's) and bearer token ("" = none).
func httpGet(t *testing.T, rawURL, host, token string) (int, string) {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, rawURL, nil)
	if err != nil {
		t.Fatal(err)
	}
	if host != "" {
		req.Host = host
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// TestSecurityHTTPFlagsRefused: the consumer refuses to start, with a message saying what to
// write instead, on "[]:PORT" and other ambiguous addresses for --http and --health, on a
// dashboard token under 16 bytes (without repeating it), on both a token and its _FILE, and
// on a read token equal to the action token.
func TestSecurityHTTPFlagsRefused(t *testing.T) {
	e := newE2E(t)
	redisEnv := "REDIS_URL=" + e.url
	short := "short-token-15b" // 15 bytes
	tokenFile := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(tokenFile, []byte(short+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	long := secret(t, "ui-")
	for _, tc := range []struct {
		name  string
		env   []string
		flags []string
		want  []string
	}{
		{"http-empty-brackets", nil, []string{"--http", "[]:0"}, []string{"--http", "empty brackets", "[::]:0"}},
		{"health-empty-brackets", nil, []string{"--health", "[]:0"}, []string{"--health", "empty brackets"}},
		{"http-zero-shorthand", nil, []string{"--http", "0:0"}, []string{"--http", "not a full IP address"}},
		{"http-unspecified-spelling", nil, []string{"--http", "[0::0]:0"}, []string{"0.0.0.0:0 or [::]:0"}},
		{"health-same-as-http", nil, []string{"--http", "127.0.0.1:0", "--health", "127.0.0.1:0"}, []string{"--health and --http"}},
		{"bad-allowed-host", nil, []string{"--http-allowed-hosts", "http://dash.example.com/"}, []string{"--http-allowed-hosts"}},
		{"short-token", []string{"FLIGHTDECK_UI_TOKEN=" + short}, nil, []string{"FLIGHTDECK_UI_TOKEN", "15 bytes", "at least 16"}},
		{"short-read-token-file", []string{"FLIGHTDECK_UI_READ_TOKEN_FILE=" + tokenFile}, nil,
			[]string{"FLIGHTDECK_UI_READ_TOKEN_FILE", "at least 16"}},
		{"token-and-file", []string{"FLIGHTDECK_UI_TOKEN=" + long, "FLIGHTDECK_UI_TOKEN_FILE=" + tokenFile}, nil,
			[]string{"not both"}},
		{"read-token-equals-token", []string{"FLIGHTDECK_UI_TOKEN=" + long, "FLIGHTDECK_UI_READ_TOKEN=" + long}, nil,
			[]string{"FLIGHTDECK_UI_READ_TOKEN equals FLIGHTDECK_UI_TOKEN"}},
	} {
		out := e.failAtStart(t, tc.name, append([]string{redisEnv}, tc.env...), tc.flags...)
		for _, w := range tc.want {
			if !strings.Contains(out, w) {
				t.Errorf("%s: the output lacks %q:\n%s", tc.name, w, out)
			}
		}
		for _, s := range []string{short, long} {
			if strings.Contains(out, s) {
				t.Errorf("%s: the output repeats a token:\n%s", tc.name, out)
			}
		}
	}
}

// TestSecurityHealthAddress: --health serves /healthz, /readyz and /metrics and nothing of
// the dashboard, to any Host (probes and scrapers use the pod address); --http serves the
// dashboard with its token, and refuses a foreign Host (421) on every path, /metrics and the
// probes included.
func TestSecurityHealthAddress(t *testing.T) {
	e := newE2E(t)
	token := secret(t, "ui-")
	health := freeAddr(t)
	p := e.startWith("health", []string{"REDIS_URL=" + e.url, "FLIGHTDECK_UI_TOKEN=" + token}, true,
		"--health", health, "--http-allowed-hosts", "dash.example.com")
	defer p.stop(t)
	_, port, _ := strings.Cut(p.http, ":")

	for path, want := range map[string]string{"/healthz": "ok", "/readyz": "ready", "/metrics": "flightdeck_"} {
		for _, host := range []string{"", "10.1.2.3:8081", "rebind.attacker.example"} {
			if code, body := httpGet(t, "http://"+health+path, host, ""); code != http.StatusOK || !strings.Contains(body, want) {
				t.Errorf("health GET %s (Host %q): %d %.200s", path, host, code, body)
			}
		}
	}
	for _, path := range []string{"/ui/", "/ui/app.js", "/ui/api/overview", "/ui/api/events", "/ui/api/dlq"} {
		if code, _ := httpGet(t, "http://"+health+path, "", token); code != http.StatusNotFound {
			t.Errorf("health GET %s: %d, want 404 (the dashboard is not on --health)", path, code)
		}
	}

	for _, path := range []string{"/ui/", "/ui/api/overview", "/ui/api/events", "/metrics", "/healthz", "/readyz"} {
		for _, host := range []string{"rebind.attacker.example:" + port, "rebind.attacker.example", "127.0.0.2:" + port} {
			if code, _ := httpGet(t, "http://"+p.http+path, host, token); code != http.StatusMisdirectedRequest {
				t.Errorf("GET %s with Host %q: %d, want 421", path, host, code)
			}
		}
		for _, host := range []string{"", "localhost:" + port, "dash.example.com:" + port} {
			if code, body := httpGet(t, "http://"+p.http+path, host, token); code != http.StatusOK {
				t.Errorf("GET %s with Host %q: %d %.200s, want 200", path, host, code, body)
			}
		}
	}
	if code, body := httpGet(t, "http://"+p.http+"/ui/api/events", "", ""); code != http.StatusUnauthorized {
		t.Errorf("tokenless read: %d %.200s, want 401", code, body)
	}
	log, _ := os.ReadFile(p.logPath)
	if !strings.Contains(string(log), "health listening") || !strings.Contains(string(log), "dash.example.com") {
		t.Errorf("the log does not show the listeners and the allowed hosts:\n%s", log)
	}
}

// TestSecurityStartupSecretsRedacted: the errors and log lines of a start name the Redis URL
// and the OpenAI base URL only redacted: a malformed base URL with credentials, a Redis URL
// whose lone user is its password, and skip_verify=true with a CA file (refused, as it would
// quietly turn off the check the file is for).
func TestSecurityStartupSecretsRedacted(t *testing.T) {
	e := newE2E(t)
	e.config = e.stageConfig(securityYAML + "    model: openai\n") // the heavy stage calls OpenAI
	e.stages = securityStages
	redisPw, aiPw, apiKey := secret(t, "redispw-"), secret(t, "aipw-"), secret(t, "sk-")
	u, err := url.Parse(e.url)
	if err != nil {
		t.Fatal(err)
	}
	u.User = url.UserPassword("flightdeck", redisPw)
	withPw := u.String()

	out := e.failAtStart(t, "bad-base-url", []string{"REDIS_URL=" + withPw, "OPENAI_MODEL=m", "OPENAI_API_KEY=" + apiKey,
		"OPENAI_BASE_URL=http://apiuser:" + aiPw + "@127.0.0.1:notaport/v1"})
	if !strings.Contains(out, "BaseURL") || strings.Contains(out, aiPw) {
		t.Errorf("the malformed base URL is not reported without its password:\n%s", out)
	}

	// A lone user is go-redis's password: the start line shows the target without it.
	u.User = url.User(redisPw)
	p := e.startWith("lone-user", []string{"REDIS_URL=" + u.String(), "OPENAI_MODEL=m", "OPENAI_API_KEY=" + apiKey,
		"OPENAI_BASE_URL=http://apiuser:" + aiPw + "@127.0.0.1:1/v1"}, false, "--log-level", "debug")
	var logText string
	for deadline := time.Now().Add(15 * time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		b, _ := os.ReadFile(p.logPath)
		if logText = string(b); strings.Contains(logText, `"starting"`) {
			break
		}
	}
	if !strings.Contains(logText, `"redis":"redis://xxxxx@`) || !strings.Contains(logText, `"baseURL":"http://apiuser:xxxxx@127.0.0.1:1/v1"`) {
		t.Errorf("the start lines do not name the Redis target and the OpenAI base URL redacted:\n%s", logText)
	}
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	<-p.done
	b, _ := os.ReadFile(p.logPath)
	out += string(b)

	tlsSrv := redistest.Start(t, &redistest.Options{TLS: true})
	skip := "rediss://flightdeck:" + redisPw + "@" + tlsSrv.Addr() + "/0?skip_verify=true"
	refusal := e.failAtStart(t, "skip-verify-with-ca", []string{"REDIS_URL=" + skip, "REDIS_TLS_CA_FILE=" + tlsSrv.TLS().CAFile})
	if !strings.Contains(refusal, "skip_verify") {
		t.Errorf("skip_verify with REDIS_TLS_CA_FILE was not refused:\n%s", refusal)
	}
	out += refusal

	for name, s := range map[string]string{"Redis password": redisPw, "OpenAI base URL password": aiPw, "OpenAI key": apiKey} {
		if i := strings.Index(out, s); i >= 0 {
			t.Errorf("the %s leaked: ...%s...", name, out[max(0, i-200):min(len(out), i+len(s)+50)])
		}
	}
}
