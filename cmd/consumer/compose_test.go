package main_test

import (
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
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

// TestDockerCompose checks docker-compose.yml against the code, without Docker: Redis is new
// enough and persists the streams, the consumer and producer commands use flags the binaries
// have, the consumers share a spool volume the image prepares, and the health check asks the
// consumer's own probe address (--health, else --http).
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

	consumer, ok := f.Services["consumer"]
	if !ok {
		t.Fatal("no consumer service")
	}
	if len(consumer.Command) == 0 || consumer.Command[0] != "/usr/local/bin/consumer" ||
		!strings.Contains(string(dockerfile), "/usr/local/bin/") {
		t.Errorf("consumer command %v: want the image's /usr/local/bin/consumer", consumer.Command)
	}
	checkFlags(t, "consumer", consumer.Command, helpFlags(t, binary, "--help"))
	if u := consumer.Environment["REDIS_URL"]; !strings.HasPrefix(u, "redis://redis:") {
		t.Errorf("consumer REDIS_URL %q: want the redis service", u)
	}
	if consumer.DependsOn["redis"].Condition != "service_healthy" {
		t.Errorf("consumer depends_on redis: %+v, want service_healthy", consumer.DependsOn)
	}
	spool := consumer.Environment["FLIGHTDECK_SPOOL_DIR"]
	mounted := false
	for _, v := range consumer.Volumes {
		name, target, _ := strings.Cut(v, ":")
		if target == spool {
			if _, declared := f.Volumes[name]; !declared {
				t.Errorf("consumer volume %q: %s is not a declared volume", v, name)
			}
			mounted = true
		}
	}
	if spool == "" || !mounted {
		t.Errorf("consumer: FLIGHTDECK_SPOOL_DIR %q must be a mounted volume (volumes %v)", spool, consumer.Volumes)
	}
	if !strings.Contains(string(dockerfile), "mkdir -p "+spool) {
		t.Errorf("the Dockerfile does not create the spool directory %s", spool)
	}
	// The health check asks /healthz on --health when the consumer has one, else on --http;
	// every address must pass the consumer's own rules (no "[]:port").
	addrs := map[string]string{}
	for i, arg := range consumer.Command {
		if (arg == "--http" || arg == "--health") && i+1 < len(consumer.Command) {
			addrs[arg] = consumer.Command[i+1]
			if _, err := admin.ListenAddr(consumer.Command[i+1]); err != nil {
				t.Errorf("consumer %s: %v", arg, err)
			}
		}
	}
	probeFlag := "--http"
	if _, ok := addrs["--health"]; ok {
		probeFlag = "--health"
	}
	_, port, _ := net.SplitHostPort(addrs[probeFlag])
	if hc := strings.Join(consumer.Healthcheck.Test, " "); port == "" || !strings.Contains(hc, "127.0.0.1:"+port+"/healthz") {
		t.Errorf("consumer healthcheck %q does not ask /healthz on its %s address %q", hc, probeFlag, addrs[probeFlag])
	}
	if d, err := time.ParseDuration(consumer.StopGracePeriod); err != nil || d <= 10*time.Second {
		t.Errorf("consumer stop_grace_period %q: want more than the consumer's --grace (10s), so SIGKILL never cuts a graceful handover", consumer.StopGracePeriod)
	}

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
