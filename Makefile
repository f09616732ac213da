# Flightdeck. `make demo` runs the pipeline end to end; `make test` runs every test.
# Tests and the demo use REDIS_URL when it is set; otherwise they start private redis-server
# children on free loopback ports (never the shared 6379).

GO        ?= go
PKGS      ?= ./...
BENCHTIME ?= 1s

.PHONY: all deps build vet test race bench chaos demo fmt tidy clean

all: build

# deps installs redis-server when it is missing (Debian/Ubuntu), so a fresh machine works.
deps:
	@command -v redis-server >/dev/null 2>&1 || { \
		echo "redis-server not found: installing it with apt-get"; \
		if [ "$$(id -u)" = 0 ]; then SUDO=; else SUDO=sudo; fi; \
		$$SUDO apt-get update -qq && DEBIAN_FRONTEND=noninteractive $$SUDO apt-get install -y -qq redis-server >/dev/null; \
	}
	@redis-server --version

build:
	$(GO) build $(PKGS)

vet:
	@test -z "$$(gofmt -l $$(git ls-files '*.go' 2>/dev/null || find . -name '*.go'))" || { gofmt -l .; echo "gofmt: files above need formatting"; exit 1; }
	$(GO) vet $(PKGS)

# test: the whole suite, under the race detector. Long soak and chaos runs live in `make chaos`.
test: deps vet
	$(GO) test -race -count=1 -timeout 10m $(PKGS)

bench: deps
	$(GO) test -run '^$$' -bench . -benchmem -benchtime $(BENCHTIME) $(PKGS)

chaos: deps
	$(GO) test -race -count=1 -timeout 60m -tags chaos $(PKGS)

# demo: a private redis-server (or $$REDIS_URL), two consumers, a producer; prints the events.
demo: deps
	@bash scripts/demo.sh

fmt:
	gofmt -w $$(git ls-files '*.go')

tidy:
	$(GO) mod tidy

clean:
	$(GO) clean -testcache
