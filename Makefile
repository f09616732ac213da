# Flightdeck. `make demo` runs the pipeline end to end; `make test` runs every test.
# Tests and the demo use REDIS_URL when it is set; otherwise they start private redis-server
# children on free loopback ports (never the shared 6379).

GO        ?= go
PKGS      ?= ./...
BENCHTIME ?= 1s

.PHONY: all deps deps-redis build vet test stress race bench bench-compare chaos chaos-short chaos-cluster chaos-sentinel demo demo-archive fmt tidy clean test-ui compose-check

all: build

# deps-redis installs redis-server when it is missing: all `make demo` needs.
deps-redis:
	@command -v redis-server >/dev/null 2>&1 || { \
		echo "redis-server not found: installing it with apt-get"; \
		if [ "$$(id -u)" = 0 ]; then SUDO=; else SUDO=sudo; fi; \
		$$SUDO apt-get update -qq && DEBIAN_FRONTEND=noninteractive $$SUDO apt-get install -y -qq redis-server >/dev/null; \
	}
	@redis-server --version

# deps installs redis-server and PostgreSQL's server binaries when they are missing
# (Debian/Ubuntu), so a fresh machine works. Tests start private servers of both on free
# loopback ports; they never use a machine's own PostgreSQL or Redis. python3 and curl run the
# HTTP API's examples (examples/http-python, examples/http-curl) in the tests.
deps: deps-redis
	@command -v python3 >/dev/null 2>&1 && command -v curl >/dev/null 2>&1 || { \
		echo "python3 or curl not found: installing them with apt-get"; \
		if [ "$$(id -u)" = 0 ]; then SUDO=; else SUDO=sudo; fi; \
		$$SUDO apt-get update -qq && DEBIAN_FRONTEND=noninteractive $$SUDO apt-get install -y -qq python3 curl >/dev/null; \
	}
	@ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1 || command -v initdb >/dev/null 2>&1 || [ -n "$$FLIGHTDECK_TEST_PG_URL" ] || { \
		echo "PostgreSQL server binaries (initdb, postgres) not found: installing postgresql with apt-get"; \
		if [ "$$(id -u)" = 0 ]; then SUDO=; else SUDO=sudo; fi; \
		$$SUDO apt-get update -qq && DEBIAN_FRONTEND=noninteractive $$SUDO apt-get install -y -qq postgresql >/dev/null; \
	}

build:
	$(GO) build $(PKGS)

vet:
	@test -z "$$(gofmt -l $$(git ls-files '*.go' 2>/dev/null || find . -name '*.go'))" || { gofmt -l .; echo "gofmt: files above need formatting"; exit 1; }
	$(GO) vet $(PKGS)

# test: the whole suite, under the race detector. Long soak and chaos runs live in `make chaos`.
test: deps vet
	$(GO) test -race -count=1 -timeout 10m $(PKGS)

# test-ui: the dashboard's browser test in headless Chromium (Debian's chromium, installed with
# apt-get when missing). Screenshots are kept in $(UI_ARTIFACTS); UPDATE_SCREENSHOTS=1 also
# refreshes docs/img/dashboard*.png.
UI_ARTIFACTS ?= $(or $(TMPDIR),/tmp)/flightdeck-ui-artifacts
test-ui: deps
	@test -x /usr/bin/chromium || { \
		echo "chromium not found: installing it with apt-get"; \
		if [ "$$(id -u)" = 0 ]; then SUDO=; else SUDO=sudo; fi; \
		$$SUDO apt-get update -qq && DEBIAN_FRONTEND=noninteractive $$SUDO apt-get install -y -qq chromium >/dev/null; \
	}
	@mkdir -p $(UI_ARTIFACTS)
	$(GO) test -tags browser -count=1 -timeout 5m -v -run Browser -artifacts -outputdir $(UI_ARTIFACTS) ./admin/

# compose-check: docker-compose.yml, the Dockerfile and .dockerignore checked against the code
# (flags, ports, environment, volumes, profiles) by parsing them; needs no Docker.
compose-check:
	$(GO) test -count=1 -run 'TestDockerCompose|TestDockerignore' ./cmd/consumer/

# stress: runs a package's (or one test's) tests N times, each run in a process of its own,
# under the race detector, and reports every failed run with its log (scripts/stress.sh).
# make stress PKGS=./handlers RUN='TestJoinedTasksWaitForTheSpool$$' N=100
N   ?= 10
RUN ?=
stress: deps
	@bash scripts/stress.sh -n $(N) $(if $(RUN),-run '$(RUN)') $(PKGS)

bench: deps
	$(GO) test -run '^$$' -bench . -benchmem -benchtime $(BENCHTIME) $(PKGS)

# bench-compare: the fleet burst (2 consumer processes) beside bare watermill-redisstream
# processes, the floors (the least loop that makes the same round trips, and that loop with
# the consumer's own flight calls) and asynq
# (bench/asynq, its own module: its burst, and its workers' CPU per task draining a queue
# filled first), interleaved, RUNS times (docs/BENCHMARKS.md, "Fleet throughput").
RUNS ?= 5
bench-compare: deps
	@for i in $$(seq 1 $(RUNS)); do \
		$(GO) test -run '^$$' -bench FleetBurst -benchtime 3x -count 1 ./cmd/consumer/ | grep '^Benchmark' || exit 1; \
		(cd bench/asynq && $(GO) test -run '^$$' -bench 'Asynq(Burst|Drain)/servers=2' -benchtime 3x -count 1 | grep '^Benchmark') || exit 1; \
	done

# chaos: the seeded fault-injection run (cmd/chaos): its own redis-server with AOF, its own
# PostgreSQL as the consumers' archive (--archive), three consumer processes, SIGKILL/SIGSTOP
# of consumers, Redis restarts, pauses and data losses, then the checker; exits non-zero on
# any violation. chaos-short is the 40 s version CI runs (one to two minutes in all).
chaos: deps
	$(GO) run ./cmd/chaos --seed 1 --duration 5m --archive

chaos-short: deps
	$(GO) run ./cmd/chaos --seed 1 --duration 40s --archive

# chaos-cluster: the same run on its own Redis Cluster (3 masters + 3 replicas), with
# cluster-master-kill faults (SIGKILL a master, its replica is promoted, the node rejoins)
# and cluster-reshard faults (slots move to a new master and back while flights run).
chaos-cluster: deps
	$(GO) run ./cmd/chaos --seed 1 --duration 5m --cluster

# chaos-sentinel: the same run on its own Sentinel deployment (a master, a replica, three
# sentinels), with sentinel-master-kill faults (SIGKILL the master, the replica is promoted,
# the killed server comes back as the replica), once with the default durability and once
# with replicated claims.
chaos-sentinel: deps
	$(GO) run ./cmd/chaos --seed 1 --duration 5m --sentinel
	$(GO) run ./cmd/chaos --seed 1 --duration 5m --sentinel --durability replicated

# demo: a private redis-server (or $$REDIS_URL), two consumers, a producer; prints the events.
demo: deps-redis
	@bash scripts/demo.sh

# demo-archive: the same with a private PostgreSQL archive; then Redis is restarted empty and
# the same load is answered from the archive without a model call.
demo-archive: deps
	@DEMO_ARCHIVE=1 bash scripts/demo.sh

fmt:
	gofmt -w $$(git ls-files '*.go')

tidy:
	$(GO) mod tidy

clean:
	$(GO) clean -testcache
