package main_test

import (
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/flightdeck-ai/flightdeck/admin"
)

// composeFile is the part of docker-compose.yml the test reads.
type composeFile struct {
	Services map[string]composeService `yaml:"services"`
	Volumes  map[string]any            `yaml:"volumes"`
}

type composeService struct {
	Image       string                               `yaml:"image"`
	Build       struct{ Context, Dockerfile string } `yaml:"build"`
	Command     []string                             `yaml:"command"`
	Environment map[string]string                    `yaml:"environment"`
	Volumes     []string                             `yaml:"volumes"`
	DependsOn   map[string]struct {
		Condition string `yaml:"condition"`
	} `yaml:"depends_on"`
	Healthcheck struct {
		Test []string `yaml:"test"`
	} `yaml:"healthcheck"`
	StopGracePeriod string   `yaml:"stop_grace_period"`
	Profiles        []string `yaml:"profiles"`
	Ports           []string `yaml:"ports"`
	Deploy          struct {
		Replicas *int `yaml:"replicas"`
	} `yaml:"deploy"`
}

// replicas is how many containers compose starts for the service.
func (s composeService) replicas() int {
	if s.Deploy.Replicas == nil {
		return 1
	}
	return *s.Deploy.Replicas
}

// flagValue returns the value following flag in cmd, "" when cmd does not have it.
func flagValue(cmd []string, flag string) string {
	for i, arg := range cmd {
		if arg == flag && i+1 < len(cmd) {
			return cmd[i+1]
		}
	}
	return ""
}

// fromEnv reports whether a compose value is the variable name taken from the user's
// environment (${NAME}, ${NAME:-default}, ...).
func fromEnv(value, name string) bool {
	return value == "${"+name+"}" || strings.HasPrefix(value, "${"+name+":")
}

// helpFlags runs bin with args (ending in --help) and returns the flag names it lists.
func helpFlags(t *testing.T, bin string, args ...string) map[string]bool {
	t.Helper()
	out, _ := exec.Command(bin, args...).CombinedOutput() // --help exits non-zero
	flags := map[string]bool{}
	for _, m := range regexp.MustCompile(`(?m)^\s+-([a-z][a-z0-9-]*)`).FindAllStringSubmatch(string(out), -1) {
		flags[m[1]] = true
	}
	if len(flags) == 0 {
		t.Fatalf("%s %v listed no flags:\n%s", bin, args, out)
	}
	return flags
}

// checkFlags fails for every --flag of cmd that the binary does not know.
func checkFlags(t *testing.T, service string, cmd []string, known map[string]bool) {
	t.Helper()
	for _, arg := range cmd {
		if !strings.HasPrefix(arg, "-") {
			continue
		}
		name, _, _ := strings.Cut(strings.TrimLeft(arg, "-"), "=")
		if !known[name] {
			t.Errorf("service %s: flag %s is not a flag of %s", service, arg, cmd[0])
		}
	}
}

// TestDockerCompose checks docker-compose.yml against the code, without Docker (`make
// compose-check`): Redis is new enough and persists the streams (AOF), the consumer and
// producer commands use flags the binaries have, the consumers share a spool volume the image
// prepares and are health-checked on their own probe address (--health, else --http), one
// consumer publishes the dashboard and /metrics on the host with a token from the user's
// environment, and PostgreSQL runs only in the archive profile.
func TestDockerCompose(t *testing.T) {
	raw, err := os.ReadFile(filepath.Join("..", "..", "docker-compose.yml"))
	if err != nil {
		t.Fatal(err)
	}
	var f composeFile
	if err := yaml.Unmarshal(raw, &f); err != nil {
		t.Fatalf("docker-compose.yml: %v", err)
	}
	dockerfile, err := os.ReadFile(filepath.Join("..", "..", "Dockerfile"))
	if err != nil {
		t.Fatal(err)
	}

	redis, ok := f.Services["redis"]
	if !ok {
		t.Fatal("no redis service")
	}
	if m := regexp.MustCompile(`^redis:(\d+)\.(\d+)`).FindStringSubmatch(redis.Image); m == nil {
		t.Errorf("redis image %q: want redis:<major>.<minor>...", redis.Image)
	} else if major, _ := strconv.Atoi(m[1]); major < 7 {
		t.Errorf("redis image %q: the flight functions need Redis 7.0 or later", redis.Image)
	}
	if !strings.Contains(strings.Join(redis.Command, " "), "--appendonly yes") {
		t.Errorf("redis command %v: queued and parked tasks live in streams; want --appendonly yes", redis.Command)
	}

	consumerFlags := helpFlags(t, binary, "--help")
	var consumers []string // the services that run the consumer
	for name, svc := range f.Services {
		if len(svc.Command) > 0 && strings.HasSuffix(svc.Command[0], "/consumer") {
			consumers = append(consumers, name)
			checkConsumer(t, name, svc, f, string(dockerfile), consumerFlags)
		}
	}
	if _, ok := f.Services["consumer"]; !ok {
		t.Fatal("no consumer service (the producer waits for it)")
	}
	checkDashboard(t, f, consumers)
	checkArchiveProfile(t, f, string(raw), consumers)

	producer, ok := f.Services["producer"]
	if !ok {
		t.Fatal("no producer service")
	}
	if len(producer.Command) < 2 || producer.Command[0] != "/usr/local/bin/producer" || producer.Command[1] != "load" {
		t.Fatalf("producer command %v: want /usr/local/bin/producer load ...", producer.Command)
	}
	bin := filepath.Join(t.TempDir(), "producer")
	if out, err := exec.Command("go", "build", "-o", bin, "../producer").CombinedOutput(); err != nil {
		t.Fatalf("build producer: %v\n%s", err, out)
	}
	checkFlags(t, "producer", producer.Command[1:], helpFlags(t, bin, "load", "--help"))
}

// checkConsumer checks a service that runs the consumer: the image's binary with flags it
// has, Redis from the redis service once healthy, the spool on a declared volume the image
// prepares, a health check on its own probe address (--health, else --http), and a stop grace
// longer than the consumer's own.
func checkConsumer(t *testing.T, name string, svc composeService, f composeFile, dockerfile string, known map[string]bool) {
	t.Helper()
	if svc.Command[0] != "/usr/local/bin/consumer" || !strings.Contains(dockerfile, "/usr/local/bin/") {
		t.Errorf("service %s: command %v: want the image's /usr/local/bin/consumer", name, svc.Command)
	}
	checkFlags(t, name, svc.Command, known)
	if u := svc.Environment["REDIS_URL"]; !strings.HasPrefix(u, "redis://redis:") {
		t.Errorf("service %s: REDIS_URL %q: want the redis service", name, u)
	}
	if svc.DependsOn["redis"].Condition != "service_healthy" {
		t.Errorf("service %s: depends_on redis: %+v, want service_healthy", name, svc.DependsOn)
	}
	spool := svc.Environment["FLIGHTDECK_SPOOL_DIR"]
	if flagValue(svc.Command, "--spool-dir") != "" {
		spool = flagValue(svc.Command, "--spool-dir")
	}
	mounted := false
	for _, v := range svc.Volumes {
		vol, target, _ := strings.Cut(v, ":")
		if target == spool {
			if _, declared := f.Volumes[vol]; !declared {
				t.Errorf("service %s: volume %q: %s is not a declared volume", name, v, vol)
			}
			mounted = true
		}
	}
	if spool == "" || !mounted {
		t.Errorf("service %s: the spool (--spool-dir or FLIGHTDECK_SPOOL_DIR %q) must be a mounted volume (volumes %v)", name, spool, svc.Volumes)
	}
	if !strings.Contains(dockerfile, "mkdir -p "+spool) {
		t.Errorf("the Dockerfile does not create the spool directory %s", spool)
	}
	// Every address must pass the consumer's own rules (no "[]:port").
	addrs := map[string]string{}
	for _, flag := range []string{"--http", "--health"} {
		if a := flagValue(svc.Command, flag); a != "" {
			addrs[flag] = a
			if _, err := admin.ListenAddr(a); err != nil {
				t.Errorf("service %s: %s: %v", name, flag, err)
			}
		}
	}
	probeFlag := "--http"
	if _, ok := addrs["--health"]; ok {
		probeFlag = "--health"
	}
	_, port, _ := net.SplitHostPort(addrs[probeFlag])
	if hc := strings.Join(svc.Healthcheck.Test, " "); port == "" || !strings.Contains(hc, "127.0.0.1:"+port+"/healthz") {
		t.Errorf("service %s: healthcheck %q does not ask /healthz on its %s address %q", name, hc, probeFlag, addrs[probeFlag])
	}
	if d, err := time.ParseDuration(svc.StopGracePeriod); err != nil || d <= 10*time.Second {
		t.Errorf("service %s: stop_grace_period %q: want more than the consumer's --grace (10s), so SIGKILL never cuts a graceful handover", name, svc.StopGracePeriod)
	}
	if len(svc.Profiles) > 0 {
		t.Errorf("service %s: profiles %v: the consumers start with a plain `docker compose up`", name, svc.Profiles)
	}
}

// checkDashboard: exactly one consumer, in one replica, serves the dashboard (and /metrics)
// to the host: --http on every interface of its container, the same port published (the
// dashboard refuses a Host naming another port), the token from the user's environment. The
// others publish nothing; the fleet has several consumers.
func checkDashboard(t *testing.T, f composeFile, consumers []string) {
	t.Helper()
	var dashboards []string
	fleet := 0
	for _, name := range consumers {
		svc := f.Services[name]
		fleet += svc.replicas()
		if len(svc.Ports) == 0 {
			if a := flagValue(svc.Command, "--http"); a != "" {
				t.Errorf("service %s: --http %s without a published port: nobody can reach the dashboard", name, a)
			}
			continue
		}
		dashboards = append(dashboards, name)
		if svc.replicas() != 1 {
			t.Errorf("service %s: %d replicas cannot all publish port %v", name, svc.replicas(), svc.Ports)
		}
		host, port, err := net.SplitHostPort(flagValue(svc.Command, "--http"))
		if err != nil || host != "0.0.0.0" {
			t.Errorf("service %s: --http %q: want 0.0.0.0:PORT, the container's loopback is not reachable through a published port",
				name, flagValue(svc.Command, "--http"))
		}
		for _, p := range svc.Ports {
			parts := strings.Split(p, ":")
			if len(parts) < 2 || parts[len(parts)-1] != port || parts[len(parts)-2] != port {
				t.Errorf("service %s: port %q: want host port = container port = the --http port %s", name, p, port)
			}
		}
		if tok := svc.Environment["FLIGHTDECK_UI_TOKEN"]; !fromEnv(tok, "FLIGHTDECK_UI_TOKEN") {
			t.Errorf("service %s: FLIGHTDECK_UI_TOKEN %q: want it from the user's environment (${FLIGHTDECK_UI_TOKEN...})", name, tok)
		}
		if tok := svc.Environment["FLIGHTDECK_UI_READ_TOKEN"]; tok != "" && !fromEnv(tok, "FLIGHTDECK_UI_READ_TOKEN") {
			t.Errorf("service %s: FLIGHTDECK_UI_READ_TOKEN %q: want it from the user's environment", name, tok)
		}
	}
	if len(dashboards) != 1 {
		t.Errorf("consumer services publishing ports: %v, want exactly one (the dashboard and /metrics on the host)", dashboards)
	}
	if fleet < 2 {
		t.Errorf("%d consumers in all: want a fleet of several", fleet)
	}
}

// checkArchiveProfile: PostgreSQL runs only in the "archive" profile, on a declared volume,
// with a health check; the consumers take FLIGHTDECK_ARCHIVE_URL from the user's environment
// (compose has no per-profile variables), and the file documents the URL of that service.
func checkArchiveProfile(t *testing.T, f composeFile, raw string, consumers []string) {
	t.Helper()
	pg, ok := f.Services["postgres"]
	if !ok {
		t.Fatal("no postgres service")
	}
	if len(pg.Profiles) != 1 || pg.Profiles[0] != "archive" {
		t.Errorf("postgres profiles %v: want [archive], so that a plain `docker compose up` does not start it", pg.Profiles)
	}
	if !strings.HasPrefix(pg.Image, "postgres:") || len(pg.Ports) > 0 || len(pg.Healthcheck.Test) == 0 {
		t.Errorf("postgres: image %q, ports %v, healthcheck %v: want a postgres image, no published port, a health check",
			pg.Image, pg.Ports, pg.Healthcheck.Test)
	}
	vol, _, _ := strings.Cut(strings.Join(pg.Volumes, ""), ":")
	if _, declared := f.Volumes[vol]; !declared {
		t.Errorf("postgres volumes %v: want a declared volume for its data", pg.Volumes)
	}
	url := "postgres://" + pg.Environment["POSTGRES_USER"] + ":"
	if !strings.Contains(raw, url) || !strings.Contains(raw, "@postgres:5432/"+pg.Environment["POSTGRES_DB"]) {
		t.Errorf("docker-compose.yml does not document the archive URL %s...@postgres:5432/%s", url, pg.Environment["POSTGRES_DB"])
	}
	for _, name := range consumers {
		svc := f.Services[name]
		if u := svc.Environment["FLIGHTDECK_ARCHIVE_URL"]; !fromEnv(u, "FLIGHTDECK_ARCHIVE_URL") {
			t.Errorf("service %s: FLIGHTDECK_ARCHIVE_URL %q: want ${FLIGHTDECK_ARCHIVE_URL:-} (set with the archive profile)", name, u)
		}
	}
	for name, svc := range f.Services {
		if _, ok := svc.DependsOn["postgres"]; ok && !slices.Contains(svc.Profiles, "archive") {
			t.Errorf("service %s depends on postgres outside the archive profile", name)
		}
	}
}

// TestDockerignore: the build context leaves out the history and the binaries a checkout
// accumulates, and keeps everything the build reads.
func TestDockerignore(t *testing.T) {
	raw, err := os.ReadFile(filepath.Join("..", "..", ".dockerignore"))
	if err != nil {
		t.Fatal(err)
	}
	patterns := map[string]bool{}
	for _, l := range strings.Split(string(raw), "\n") {
		if l = strings.TrimSpace(l); l != "" && !strings.HasPrefix(l, "#") {
			patterns[l] = true
		}
	}
	for _, p := range []string{".git", "**/*.test", "/consumer", "/producer", "bin/"} {
		if !patterns[p] {
			t.Errorf(".dockerignore does not leave out %s", p)
		}
	}
	for p := range patterns {
		for _, kept := range []string{"go.mod", "go.sum", "cmd/consumer/main.go", "admin/ui", "lua/lib.lua"} {
			if ok, _ := filepath.Match(strings.TrimPrefix(p, "/"), kept); ok || strings.HasPrefix(kept, strings.TrimSuffix(p, "/")+"/") {
				t.Errorf(".dockerignore pattern %q leaves out %s, which the build needs", p, kept)
			}
		}
	}
}
