#!/usr/bin/env bash
# redis-instr.sh: run Go tests or benchmarks against a redis-server under valgrind's callgrind
# and print the instructions Redis executed meanwhile (from after its start-up to before its
# shutdown). Instruction counts are repeatable where CPU time on a shared machine is not:
# docs/BENCHMARKS.md section 11 compares scripts and data models with them.
#
#   scripts/redis-instr.sh <package dir> <go test flags...>
#   scripts/redis-instr.sh ./flight -run '^$' -bench 'OwnerPathRedis/callers=8' -benchtime 2000x
#
# Needs valgrind (Debian's package). The tests get the server through REDIS_URL.
# REDIS_SERVER names the redis-server to run (default: the one on PATH); CALLGRIND_OUT, a file
# to keep callgrind's profile in. With a redis-server built with debug symbols (make
# CFLAGS=-g in Redis's source), callgrind_annotate on that file shows where the instructions
# go, function by function.
set -euo pipefail
pkg=$1
shift
command -v valgrind >/dev/null || { echo "valgrind not found (apt-get install valgrind)" >&2; exit 1; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
valgrind --tool=callgrind --callgrind-out-file="$tmp/cg.%p" \
	"${REDIS_SERVER:-redis-server}" --port "$port" --bind 127.0.0.1 --save '' --appendonly no >"$tmp/redis.log" 2>&1 &
vg=$!
for _ in $(seq 1 150); do
	redis-cli -p "$port" ping >/dev/null 2>&1 && break
	sleep 0.2
done
callgrind_control -z "$vg" >/dev/null
REDIS_URL="redis://127.0.0.1:$port/0" go test "$pkg" "$@" 2>&1 | grep -E '^(Benchmark|ok|FAIL|---)' || true
callgrind_control -d "$vg" >/dev/null
redis-cli -p "$port" info commandstats | tr -d '\r' | grep -E '^cmdstat_(fcall|xadd|xreadgroup|xack)' | cut -d, -f1 || true
redis-cli -p "$port" shutdown nosave >/dev/null 2>&1 || true
wait "$vg" 2>/dev/null || true
for f in "$tmp"/cg.*.1; do
	if [ -n "${CALLGRIND_OUT:-}" ]; then cp "$f" "$CALLGRIND_OUT"; fi
	callgrind_annotate "$f" 2>/dev/null | grep 'PROGRAM TOTALS' | sed 's/ *(100.0%) *PROGRAM TOTALS/ instructions/'
done
