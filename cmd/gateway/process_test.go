package main_test

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"encoding/pem"
	"math/big"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/flightdeck-ai/flightdeck/gateway"
	"github.com/flightdeck-ai/flightdeck/topics"
)

// receiptOf is the part of a receipt the tests read.
type receiptOf struct {
	TaskID     string `json:"taskId"`
	RequestKey string `json:"requestKey"`
	Tenant     string `json:"tenant"`
}

// TestTenantIsolation: with the stock binaries, beta's token gets acme's task, key and
// cancel answered 404 not_found exactly as an unknown one, is refused 403 tenant_mismatch
// when its body names acme, and its event stream carries beta's events and none of acme's.
// Wrong tokens are refused 401 and, past the budget of failures, 429 with Retry-After.
func TestTenantIsolation(t *testing.T) {
	f := newFleet(t)
	f.consumer()
	_, base := f.gateway()
	path := base + "/v1/stages/" + stage + "/tasks"

	var acme struct{ Receipt receiptOf }
	r := call(t, "POST", path+"?wait=60s", acmeToken, `{"input":{"answer":"acme's secret"},"taskId":"acme-1"}`)
	r.decode(t, &acme)
	if r.status != http.StatusOK || acme.Receipt.Tenant != "acme" {
		t.Fatalf("acme's POST: %d %s", r.status, r.body)
	}
	key := acme.Receipt.RequestKey
	unknownKey := strings.Replace(key, ":acme:", ":beta:", 1)
	for _, tc := range []struct{ method, path, unknown string }{
		{"GET", "/v1/tasks/acme-1", "/v1/tasks/no-such-task"},
		{"GET", "/v1/keys/" + key, "/v1/keys/" + unknownKey},
		{"POST", "/v1/keys/" + key + "/cancel", "/v1/keys/" + unknownKey + "/cancel"},
	} {
		got, want := call(t, tc.method, base+tc.path, betaToken, ""), call(t, tc.method, base+tc.unknown, betaToken, "")
		if got.status != http.StatusNotFound || got.code() != "not_found" || !bytes.Equal(got.body, want.body) {
			t.Errorf("%s %s with beta's token: %d %s; an unknown one: %d %s", tc.method, tc.path, got.status, got.body,
				want.status, want.body)
		}
	}
	if r := call(t, "GET", base+"/v1/keys/"+key, acmeToken, ""); r.status != http.StatusOK {
		t.Errorf("acme's own key: %d %s", r.status, r.body)
	}
	if r := call(t, "POST", path, betaToken, `{"input":1,"tenant":"acme"}`); r.status != http.StatusForbidden ||
		r.code() != "tenant_mismatch" {
		t.Errorf("beta naming acme: %d %s", r.status, r.body)
	}

	// Beta's stream: acme's events come first on the result stream, then beta's; the stream
	// must skip acme's.
	lines := openStream(t, base, betaToken, stage)
	if l := <-lines; l != "retry: 1000" {
		t.Fatalf("first line %q", l)
	}
	for i := range 3 {
		if r := call(t, "POST", path+"?wait=60s", acmeToken, `{"input":{"answer":"acme `+string(rune('a'+i))+`"}}`); r.status != http.StatusOK {
			t.Fatalf("acme: %d %s", r.status, r.body)
		}
	}
	var beta struct{ Receipt receiptOf }
	call(t, "POST", path+"?wait=60s", betaToken, `{"input":{"answer":"beta's"}}`).decode(t, &beta)
	for line := range lines {
		data, ok := strings.CutPrefix(line, "data: ")
		if !ok || strings.Contains(data, `"stages"`) {
			continue
		}
		var ev topics.Event
		if err := json.Unmarshal([]byte(data), &ev); err != nil {
			t.Fatal(err)
		}
		if ev.Tenant != "beta" {
			t.Fatalf("beta's stream carried an event of %s: %s", ev.Tenant, data)
		}
		if ev.TaskID == beta.Receipt.TaskID {
			break
		}
	}

	// Wrong tokens: 401, then 429 once the network spent its budget; the right token too.
	for i := range 5 {
		if r := call(t, "GET", base+"/v1/tasks/x", "wrong-token-"+string(rune('a'+i)), ""); r.status != http.StatusUnauthorized ||
			r.code() != "token_refused" {
			t.Fatalf("wrong token %d: %d %s", i, r.status, r.body)
		}
	}
	r = call(t, "GET", base+"/v1/tasks/acme-1", acmeToken, "")
	if r.status != http.StatusTooManyRequests || r.code() != "rate_limited" || r.header.Get("Retry-After") == "" {
		t.Errorf("after 5 failures: %d %s", r.status, r.body)
	}
}

// TestIdempotentRetry: with the stock binaries, a POST retried with its Idempotency-Key,
// in sequence and four at once, enqueues one task: one entry on the task stream, one
// terminal event, and every answer carries the same receipt.
func TestIdempotentRetry(t *testing.T) {
	f := newFleet(t)
	f.consumer()
	_, base := f.gateway()
	path := base + "/v1/stages/" + stage + "/tasks"
	body := `{"input":{"answer":"charge the card once"}}`
	var first receiptOf
	r := call(t, "POST", path, acmeToken, body, "Idempotency-Key", "charge-42")
	r.decode(t, &first)
	if r.status != http.StatusAccepted || first.TaskID == "" {
		t.Fatalf("first: %d %s", r.status, r.body)
	}
	var wg sync.WaitGroup
	got := make([]response, 4)
	for i := range got {
		wg.Go(func() { got[i] = call(t, "POST", path+"?wait=60s", acmeToken, body, "Idempotency-Key", "charge-42") })
	}
	wg.Wait()
	for i, r := range got {
		var d struct {
			Receipt receiptOf
			Event   topics.Event
		}
		r.decode(t, &d)
		if r.status != http.StatusOK || d.Receipt != first || d.Event.TaskID != first.TaskID ||
			r.header.Get("Idempotent-Replayed") != "true" {
			t.Errorf("retry %d: %d %s", i, r.status, r.body)
		}
	}
	n, err := f.rdb.XLen(context.Background(), topics.Keyspace{Prefix: f.prefix}.Tasks(stage)).Result()
	if err != nil || n != 1 {
		t.Errorf("%d entries on the task stream (%v), want 1", n, err)
	}
	if ev := f.results(); len(ev) != 1 || ev[first.TaskID] != 1 {
		t.Errorf("events by task: %v, want one for %s", ev, first.TaskID)
	}
}

// TestOpenAPIServed: the stock gateway serves the package's OpenAPI document, without a
// token, as an OpenAPI 3 JSON document.
func TestOpenAPIServed(t *testing.T) {
	f := newFleet(t)
	_, base := f.gateway()
	r := call(t, "GET", base+"/v1/openapi.json", "", "")
	var doc struct {
		OpenAPI string                    `json:"openapi"`
		Paths   map[string]map[string]any `json:"paths"`
	}
	r.decode(t, &doc)
	if r.status != http.StatusOK || !strings.HasPrefix(doc.OpenAPI, "3.") || !bytes.Equal(r.body, gateway.OpenAPI()) ||
		doc.Paths["/v1/stages/{stage}/tasks"]["post"] == nil {
		t.Errorf("GET /v1/openapi.json: %d, openapi %q, %d paths", r.status, doc.OpenAPI, len(doc.Paths))
	}
}

// TestGracefulStop: on SIGTERM the stock gateway answers a wait in progress 202 with its
// receipt at once, ends an open event stream, and exits 0. It speaks HTTP/2 in clear text
// to a client with prior knowledge.
func TestGracefulStop(t *testing.T) {
	f := newFleet(t)
	gw, base := f.gateway("--max-wait", "5m")

	var protocols http.Protocols
	protocols.SetUnencryptedHTTP2(true)
	h2 := &http.Client{Transport: &http.Transport{Protocols: &protocols}}
	res, err := h2.Get(base + "/healthz")
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	if res.ProtoMajor != 2 || res.StatusCode != http.StatusOK {
		t.Errorf("h2c /healthz: %s %d", res.Proto, res.StatusCode)
	}

	lines := openStream(t, base, acmeToken, "nobody-serves-this")
	for l := range lines {
		if l == "event: ready" {
			break
		}
	}
	waited := make(chan response, 1)
	go func() {
		waited <- call(t, "POST", base+"/v1/stages/nobody-serves-this/tasks?wait=5m", acmeToken, `{"input":1}`)
	}()
	// The wait is in progress once its task is on the stream.
	ks := topics.Keyspace{Prefix: f.prefix}
	for deadline := time.Now().Add(60 * time.Second); ; {
		if n, _ := f.rdb.XLen(context.Background(), ks.Tasks("nobody-serves-this")).Result(); n == 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the task was not enqueued within 60 s")
		}
		time.Sleep(20 * time.Millisecond)
	}
	start := time.Now()
	if err := gw.stop(t, 30*time.Second); err != nil {
		t.Errorf("exit: %v", err)
	}
	r := <-waited
	var rc receiptOf
	r.decode(t, &rc)
	if r.status != http.StatusAccepted || rc.TaskID == "" {
		t.Errorf("the wait in progress: %d %s", r.status, r.body)
	}
	for range lines { // the stream ends
	}
	if d := time.Since(start); d > 10*time.Second {
		t.Errorf("stopping took %v", d)
	}
	if _, err := gw.awaitLog("stopped", "level", time.Second); err != nil {
		t.Error(err)
	}
}

// TestTLS: with --tls-cert and --tls-key the stock gateway serves HTTPS, and a client that
// trusts the certificate gets HTTP/2.
func TestTLS(t *testing.T) {
	f := newFleet(t)
	cert, key, pool := selfSigned(t)
	gw := f.start("gateway", gatewayBin, []string{"REDIS_URL=" + f.url}, "--listen", "127.0.0.1:0",
		"--tokens", f.tokens, "--tls-cert", cert, "--tls-key", key)
	addr, err := gw.awaitLog("serving the HTTP API", "listen", 60*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	hc := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}, ForceAttemptHTTP2: true}}
	res, err := hc.Get("https://" + addr + "/readyz")
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	if res.ProtoMajor != 2 || res.StatusCode != http.StatusOK {
		t.Errorf("GET /readyz over TLS: %s %d", res.Proto, res.StatusCode)
	}
}

// selfSigned writes a self-signed certificate for 127.0.0.1 and its key, and returns their
// paths and a pool that trusts the certificate.
func selfSigned(t *testing.T) (certPath, keyPath string, pool *x509.CertPool) {
	t.Helper()
	priv, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "gateway test"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)}, KeyUsage: x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &priv.PublicKey, priv)
	if err != nil {
		t.Fatal(err)
	}
	keyDER, err := x509.MarshalPKCS8PrivateKey(priv)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	certPath, keyPath = filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem")
	if err := os.WriteFile(certPath, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(keyPath, pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: keyDER}), 0o600); err != nil {
		t.Fatal(err)
	}
	c, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	pool = x509.NewCertPool()
	pool.AddCert(c)
	return certPath, keyPath, pool
}
