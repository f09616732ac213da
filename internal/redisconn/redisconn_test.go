package redisconn_test

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/flightdeck-ai/flightdeck/internal/redisconn"
	"github.com/flightdeck-ai/flightdeck/internal/testkit/redistest"
)

func TestOptionsUserAndPassword(t *testing.T) {
	opt, err := redisconn.Options("redis://app:p%40ss%3Aw0rd@10.0.0.7:6380/3")
	if err != nil {
		t.Fatal(err)
	}
	if opt.Username != "app" || opt.Password != "p@ss:w0rd" || opt.Addr != "10.0.0.7:6380" || opt.DB != 3 || opt.TLSConfig != nil {
		t.Errorf("got user %q password %q addr %q db %d tls %v", opt.Username, opt.Password, opt.Addr, opt.DB, opt.TLSConfig)
	}
	opt, err = redisconn.Options("redis://:only-pass@h")
	if err != nil || opt.Username != "" || opt.Password != "only-pass" || opt.Addr != "h:6379" {
		t.Errorf("password without user: %+v %v", opt, err)
	}
	opt, err = redisconn.Options("rediss://app:pw@redis.internal:6380")
	if err != nil || opt.TLSConfig == nil || opt.TLSConfig.ServerName != "redis.internal" || opt.TLSConfig.RootCAs != nil {
		t.Errorf("rediss:// without files: %+v %v", opt, err)
	}
}

// TestErrorsHideSecrets: no error repeats the URL or its password, even for URLs that
// url.Parse refuses (its errors quote the whole URL).
func TestErrorsHideSecrets(t *testing.T) {
	const secret = "Sup3rSecretPw"
	for _, u := range []string{
		"redis://app:" + secret + "%zz@h:6379",
		"redis://app:" + secret + "@[::1",
		"redis://app:" + secret + "@h:6379/x/y",
		"redis://app:" + secret + "@h:6379/db" + secret,
		"redis://app:" + secret + "@h:6379?bogus=1",
		"redis://app:" + secret + "@h:6379?dial_timeout=" + secret,
		"http://app:" + secret + "@h:6379",
		"redis://app:" + secret + "@h:notaport\x7f",
		" redis://app:" + secret + "@h",
	} {
		_, err := redisconn.Options(u)
		if err == nil {
			t.Errorf("%q: no error", u)
			continue
		}
		if strings.Contains(err.Error(), secret) {
			t.Errorf("error shows the password: %v", err)
		}
		t.Log(err)
	}
}

func TestTLSFiles(t *testing.T) {
	s := redistest.Start(t, &redistest.Options{TLS: true, ACL: []string{"user app on >pw ~* +@all"}})
	files := s.TLS()
	ctx := context.Background()
	url := "rediss://app:pw@" + s.Addr()
	ping := func(tf redisconn.TLSFiles) error {
		t.Helper()
		opt, err := redisconn.OptionsWithTLS(url, tf)
		if err != nil {
			t.Fatal(err)
		}
		opt.MaxRetries = -1
		c := redisconn.NewClient(opt)
		defer c.Close()
		return c.Ping(ctx).Err()
	}
	if err := ping(redisconn.TLSFiles{}); err == nil || !strings.Contains(err.Error(), "certificate") {
		t.Errorf("the test CA is not a system root, yet: %v", err)
	}
	if err := ping(redisconn.TLSFiles{CAFile: files.CAFile}); err != nil {
		t.Errorf("with the CA file: %v", err)
	}
	env := map[string]string{"REDIS_TLS_CA_FILE": files.CAFile, "REDIS_TLS_CERT_FILE": files.ClientCertFile,
		"REDIS_TLS_KEY_FILE": files.ClientKeyFile}
	opt, err := redisconn.OptionsFromEnv(url, func(k string) string { return env[k] })
	if err != nil || opt.TLSConfig.RootCAs == nil || len(opt.TLSConfig.Certificates) != 1 || opt.Username != "app" {
		t.Fatalf("OptionsFromEnv: %+v %v", opt, err)
	}

	for name, tc := range map[string]struct {
		url   string
		files redisconn.TLSFiles
		want  string
	}{
		"files with redis://": {"redis://" + s.Addr(), redisconn.TLSFiles{CAFile: files.CAFile}, "not rediss://"},
		"cert without key":    {url, redisconn.TLSFiles{CertFile: files.ClientCertFile}, "go together"},
		"missing CA file":     {url, redisconn.TLSFiles{CAFile: filepath.Join(t.TempDir(), "none.pem")}, "no such file"},
		"CA file not PEM":     {url, redisconn.TLSFiles{CAFile: writeFile(t, "junk")}, "no PEM certificate"},
		"key not matching":    {url, redisconn.TLSFiles{CertFile: files.ClientCertFile, KeyFile: files.KeyFile}, "does not match"},
	} {
		if _, err := redisconn.OptionsWithTLS(tc.url, tc.files); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want an error with %q", name, err, tc.want)
		}
	}
}

// TestTLSClientCertificate: a server that requires client certificates accepts the one named
// by CertFile and KeyFile and refuses a client without one.
func TestTLSClientCertificate(t *testing.T) {
	s := redistest.Start(t, &redistest.Options{TLS: true, Args: []string{"--tls-auth-clients", "yes"}})
	f := s.TLS()
	ctx := context.Background()
	for _, tc := range []struct {
		files  redisconn.TLSFiles
		wantOK bool
	}{
		{redisconn.TLSFiles{CAFile: f.CAFile, CertFile: f.ClientCertFile, KeyFile: f.ClientKeyFile}, true},
		{redisconn.TLSFiles{CAFile: f.CAFile}, false},
	} {
		opt, err := redisconn.OptionsWithTLS(s.URL(), tc.files)
		if err != nil {
			t.Fatal(err)
		}
		opt.MaxRetries = -1
		c := redisconn.NewClient(opt)
		err = c.Ping(ctx).Err()
		c.Close()
		if (err == nil) != tc.wantOK {
			t.Errorf("client certificate %v: ping %v", tc.files.CertFile != "", err)
		}
	}
}

func writeFile(t *testing.T, content string) string {
	p := filepath.Join(t.TempDir(), "f")
	if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestUniversalWithTLS(t *testing.T) {
	s := redistest.Start(t, &redistest.Options{TLS: true})
	ca := redisconn.TLSFiles{CAFile: s.TLS().CAFile}
	newClient, err := redisconn.UniversalFromEnv(s.URL(), func(k string) string {
		return map[string]string{"REDIS_TLS_CA_FILE": ca.CAFile}[k]
	})
	if err != nil {
		t.Fatal(err)
	}
	c := newClient()
	defer c.Close()
	if err := c.Ping(context.Background()).Err(); err != nil {
		t.Errorf("single node over TLS: %v", err)
	}

	cluster := "rediss://app:pw@10.0.0.1:7000?addr=10.0.0.2:7000&addr=10.0.0.3:7000"
	newClient, err = redisconn.UniversalWithTLS(cluster, ca)
	if err != nil {
		t.Fatal(err)
	}
	cc, ok := newClient().(*redis.ClusterClient)
	if !ok {
		t.Fatalf("cluster URL made a %T", newClient())
	}
	defer cc.Close()
	if o := cc.Options(); o.TLSConfig == nil || o.TLSConfig.RootCAs == nil || o.Password != "pw" {
		t.Errorf("cluster options: %+v", o)
	}
	_, err = redisconn.UniversalWithTLS("redis://10.0.0.1:7000?addr=10.0.0.2:7000", ca)
	if err == nil || !strings.Contains(err.Error(), "not rediss://") {
		t.Errorf("files with a redis:// cluster URL: %v", err)
	}
	_, err = redisconn.UniversalWithTLS("redis://app:Sup3rSecret@10.0.0.1:7000?addr=10.0.0.2:7000&bogus=Sup3rSecret", redisconn.TLSFiles{})
	if err == nil || strings.Contains(err.Error(), "Sup3rSecret") {
		t.Errorf("bad cluster URL: %v", err)
	}
}

// TestSecurityRedactURL: a URL in a log line or an error shows no password, no lone user
// (go-redis's password-only form) and no secret-looking query value.
func TestSecurityRedactURL(t *testing.T) {
	const pw = "Sup3rSecretPw"
	for in, want := range map[string]string{
		"redis://app:" + pw + "@10.0.0.7:6380/3":            "redis://app:xxxxx@10.0.0.7:6380/3",
		"rediss://:" + pw + "@redis.internal:6380":          "rediss://:xxxxx@redis.internal:6380",
		"redis://" + pw + "@h:6379/0":                       "redis://xxxxx@h:6379/0",
		"redis://app:p%40" + pw + "@h?addr=h2:7000":         "redis://app:xxxxx@h?addr=h2%3A7000",
		"https://user:" + pw + "@api.example.com/v1":        "https://user:xxxxx@api.example.com/v1",
		"https://api.example.com/v1?api_key=" + pw + "&x=1": "https://api.example.com/v1?api_key=xxxxx&x=1",
		"redis://127.0.0.1:6379/0":                          "redis://127.0.0.1:6379/0",
		"redis://app:" + pw + "%zz@h:6379":                  "redis://xxxxx@h:6379 (malformed)",
		"http://user:" + pw + "@host:notaport/v1":           "http://xxxxx@host:notaport (malformed)",
		" redis://app:" + pw + "@h":                         "<malformed URL>",
		"":                                                  "",
	} {
		got := redisconn.RedactURL(in)
		if got != want {
			t.Errorf("RedactURL(%q) = %q, want %q", in, got, want)
		}
		if strings.Contains(got, pw) {
			t.Errorf("RedactURL(%q) shows the password: %q", in, got)
		}
	}
}

// TestSecurityRedactError: an error that quotes a URL (url.Parse's, a provider client's)
// keeps its meaning but loses the password, also where the message quotes it escaped.
func TestSecurityRedactError(t *testing.T) {
	const pw = "Sup3r\"Secret"
	raw := "http://apiuser:" + url.QueryEscape(pw) + "@host:notaport/v1"
	_, perr := url.Parse(raw)
	if perr == nil {
		t.Fatal("the test URL parses")
	}
	for _, err := range []error{perr, fmt.Errorf("model: openai: BaseURL: %w", perr),
		fmt.Errorf("dial %s: refused (password %s)", raw, pw), fmt.Errorf("password %q", pw)} {
		got := redisconn.RedactError(err, raw)
		if strings.Contains(got.Error(), "Secret") || strings.Contains(got.Error(), url.QueryEscape(pw)) {
			t.Errorf("RedactError(%q) = %q: the password shows", err, got)
		}
		t.Log(got)
	}
	plain := errors.New("connection refused")
	if redisconn.RedactError(plain, raw) != plain || redisconn.RedactError(nil, raw) != nil {
		t.Error("an error without secrets must come back as it is")
	}
}

// TestSecuritySkipVerifyConflict: skip_verify=true in the URL with a CA file or a client
// certificate is refused (it would quietly turn off the check the files are for), for a
// single node and a cluster URL; without files it stays a tests-only option.
func TestSecuritySkipVerifyConflict(t *testing.T) {
	s := redistest.Start(t, &redistest.Options{TLS: true})
	f := s.TLS()
	const pw = "Sup3rSecretPw"
	u := "rediss://app:" + pw + "@" + s.Addr() + "/0?skip_verify=true"
	for name, files := range map[string]redisconn.TLSFiles{
		"CA file":            {CAFile: f.CAFile},
		"client certificate": {CertFile: f.ClientCertFile, KeyFile: f.ClientKeyFile},
	} {
		_, err := redisconn.OptionsWithTLS(u, files)
		if err == nil || !strings.Contains(err.Error(), "skip_verify") || strings.Contains(err.Error(), pw) {
			t.Errorf("%s with skip_verify: %v, want a refusal naming skip_verify", name, err)
		}
		_, err = redisconn.UniversalWithTLS("rediss://app:"+pw+"@10.0.0.1:7000?addr=10.0.0.2:7000&skip_verify=true", files)
		if err == nil || !strings.Contains(err.Error(), "skip_verify") || strings.Contains(err.Error(), pw) {
			t.Errorf("%s with skip_verify on a cluster URL: %v", name, err)
		}
	}
	env := map[string]string{"REDIS_TLS_CA_FILE": f.CAFile}
	if _, err := redisconn.UniversalFromEnv(u, func(k string) string { return env[k] }); err == nil {
		t.Error("UniversalFromEnv: skip_verify with REDIS_TLS_CA_FILE accepted")
	}
	if opt, err := redisconn.Options(u); err != nil || !opt.TLSConfig.InsecureSkipVerify {
		t.Errorf("skip_verify alone: %v", err)
	}
}

// TestURLForms: the three URL forms the README documents pick three kinds of client; a
// failover URL gives a client that runs every single-node path (a *redis.Client), and a
// broken one an error that repeats no password.
func TestURLForms(t *testing.T) {
	for _, c := range []struct {
		url               string
		cluster, failover bool
	}{
		{"redis://10.0.0.1:6379/0", false, false},
		{"redis://10.0.0.1:7000?addr=10.0.0.2:7000&addr=10.0.0.3:7000", true, false},
		{"redis://s1:26379/0?master_name=mymaster&addr=s2:26379&addr=s3:26379", false, true},
		{"rediss://u:pw@s1:26379/0?master_name=mymaster", false, true},
	} {
		if got := redisconn.IsCluster(c.url); got != c.cluster {
			t.Errorf("IsCluster(%s) = %v", c.url, got)
		}
		if got := redisconn.IsFailover(c.url); got != c.failover {
			t.Errorf("IsFailover(%s) = %v", c.url, got)
		}
	}
	f, err := redisconn.Universal("redis://127.0.0.1:1/0?master_name=mymaster&addr=127.0.0.1:2")
	if err != nil {
		t.Fatal(err)
	}
	rdb := f()
	defer rdb.Close()
	if _, ok := rdb.(*redis.Client); !ok {
		t.Errorf("a failover URL gave a %T, want a *redis.Client", rdb)
	}
	for _, bad := range []string{
		"redis://s1:26379/0?master_name=",
		"redis://s1:26379/0?master_name=m&replica_only=true",
		"redis://s1:26379/0?master_name=m&route_randomly=true",
	} {
		if _, err := redisconn.Universal(bad); err == nil {
			t.Errorf("Universal(%s): no error", bad)
		}
	}
	// One deployment, however its URL is spelled; another master, sentinel set or node is
	// another deployment.
	same := [][]string{
		{"redis://10.0.0.1:6379/0", "redis://10.0.0.1:6379", "redis://10.0.0.1/0", "redis://u:pw@10.0.0.1:6379/0", "redis://10.0.0.1:6379?db=0"},
		{"redis://s1:26379/0?master_name=m&addr=s2:26379", "redis://s2:26379?master_name=m&addr=s1:26379", "redis://x:pw@s1:26379/0?master_name=m&addr=s2:26379&password=p"},
	}
	seen := map[string]bool{}
	for _, group := range same {
		d := redisconn.Deployment(group[0])
		for _, u := range group[1:] {
			if got := redisconn.Deployment(u); got != d {
				t.Errorf("Deployment(%s) = %q, want %q as for %s", u, got, d, group[0])
			}
		}
		seen[d] = true
	}
	for _, u := range []string{"redis://10.0.0.1:6379/1", "redis://10.0.0.2:6379/0", "redis://s1:26379/0?master_name=other&addr=s2:26379",
		"redis://s1:26379/0?master_name=m&addr=s3:26379", "redis://10.0.0.1:7000?addr=10.0.0.2:7000"} {
		d := redisconn.Deployment(u)
		if d == "" || seen[d] {
			t.Errorf("Deployment(%s) = %q: empty or another deployment's", u, d)
		}
		seen[d] = true
		if strings.Contains(d, "pw") {
			t.Errorf("Deployment(%s) = %q holds the password", u, d)
		}
	}
}
