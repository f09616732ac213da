#!/usr/bin/env bash
# make demo: the pipeline end to end on this machine. With REDIS_URL set it uses that Redis
# (under a fresh key prefix); otherwise it starts a private redis-server on a free loopback
# port. It starts two consumers, sends tasks of the four stages with duplicates, prints every
# terminal event and the summary, and stops everything it started.
set -euo pipefail
cd "$(dirname "$0")/.."

work=$(mktemp -d)
pids=()
cleanup() {
  # Newest first: the consumers finish their shutdown while Redis still answers.
  for ((i = ${#pids[@]} - 1; i >= 0; i--)); do
    kill "${pids[i]}" 2>/dev/null || true
    wait "${pids[i]}" 2>/dev/null || true
  done
  rm -rf "$work"
}
trap cleanup EXIT INT TERM

echo "== building"
go build -o "$work/consumer" ./cmd/consumer
go build -o "$work/producer" ./cmd/producer

prefix="demo$RANDOM"
if [ -z "${REDIS_URL:-}" ]; then
  for _ in $(seq 1 50); do
    port=$((20000 + RANDOM % 30000))
    (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null && continue # in use
    redis-server --port "$port" --bind 127.0.0.1 --save "" --appendonly no --dir "$work" \
      --daemonize no --loglevel warning >"$work/redis.log" 2>&1 &
    pids+=($!)
    for _ in $(seq 1 50); do
      redis-cli -p "$port" ping >/dev/null 2>&1 && break
      sleep 0.1
    done
    if redis-cli -p "$port" ping >/dev/null 2>&1; then
      export REDIS_URL="redis://127.0.0.1:$port/0"
      break
    fi
  done
  [ -n "${REDIS_URL:-}" ] || { echo "could not start redis-server" >&2; exit 1; }
  echo "== private redis-server on $REDIS_URL"
else
  echo "== using REDIS_URL (key prefix $prefix)"
fi

for n in 1 2; do
  "$work/consumer" --prefix "$prefix" --name "demo-$n" --log-format console --log-level warn \
    --spool-dir "$work/spool" &
  pids+=($!)
done
echo "== two consumers running (demo-1, demo-2)"
sleep 1

echo "== sending 40 tasks of the four stages over 8 distinct inputs (5 duplicates each)"
"$work/producer" --prefix "$prefix" load --n 40 --keys 8 --rate 200 --latency-ms 400 --wait --timeout 90s
