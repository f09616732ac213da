#!/usr/bin/env bash
# make demo: the pipeline end to end on this machine. With REDIS_URL set it uses that Redis
# (under a fresh key prefix); otherwise it starts a private redis-server on a free loopback
# port. It starts two consumers, sends tasks of the four stages with duplicates, prints every
# terminal event and the summary, and stops everything it started.
#
# DEMO_ARCHIVE=1 (make demo-archive) also starts a private PostgreSQL as the durable archive;
# after the first load it restarts the private Redis empty and sends the same load again: the
# tasks are answered from the archive, without a model call.
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
  if [ -n "${pgdata:-}" ]; then
    "${as_pg[@]}" "$pgbin/pg_ctl" -D "$pgdata" -m immediate stop >/dev/null 2>&1 || true
    rm -rf "$(dirname "$pgdata")"
  fi
  rm -rf "$work"
}
trap cleanup EXIT INT TERM

echo "== building"
go build -o "$work/consumer" ./cmd/consumer
go build -o "$work/producer" ./cmd/producer

prefix="demo$RANDOM"
private_redis=
# start_redis starts the private redis-server on $port (empty: it keeps nothing).
start_redis() {
  redis-server --port "$port" --bind 127.0.0.1 --save "" --appendonly no --dir "$work" \
    --daemonize no --loglevel warning >"$work/redis.log" 2>&1 &
  redis_pid=$!
  for _ in $(seq 1 50); do
    redis-cli -p "$port" ping >/dev/null 2>&1 && return 0
    sleep 0.1
  done
  return 1
}
if [ -z "${REDIS_URL:-}" ]; then
  for _ in $(seq 1 50); do
    port=$((20000 + RANDOM % 30000))
    (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null && continue # in use
    if start_redis; then
      pids+=("$redis_pid")
      private_redis=1
      export REDIS_URL="redis://127.0.0.1:$port/0"
      break
    fi
    kill "$redis_pid" 2>/dev/null || true
  done
  [ -n "${REDIS_URL:-}" ] || { echo "could not start redis-server" >&2; exit 1; }
  echo "== private redis-server on $REDIS_URL"
else
  echo "== using REDIS_URL (key prefix $prefix)"
fi

archive=()
if [ "${DEMO_ARCHIVE:-}" = 1 ]; then
  pgbin=$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -n 1)
  [ -x "$pgbin/initdb" ] || { echo "PostgreSQL's initdb not found: run make deps" >&2; exit 1; }
  pgdir=$(mktemp -d)
  as_pg=()
  if [ "$(id -u)" = 0 ]; then # initdb refuses to run as root
    chown postgres "$pgdir"
    as_pg=(runuser -u postgres --)
  fi
  "${as_pg[@]}" "$pgbin/initdb" -D "$pgdir/data" -U postgres -A trust --no-sync >/dev/null
  pgdata="$pgdir/data"
  pgport=$((20000 + RANDOM % 30000))
  "${as_pg[@]}" "$pgbin/pg_ctl" -D "$pgdata" -l "$pgdir/log" -w -o \
    "-p $pgport -c listen_addresses=127.0.0.1 -c unix_socket_directories=$pgdir" start >/dev/null
  archive=(--archive "postgres://postgres@127.0.0.1:$pgport/postgres?sslmode=disable")
  echo "== private PostgreSQL archive on 127.0.0.1:$pgport"
fi

for n in 1 2; do
  "$work/consumer" --prefix "$prefix" --name "demo-$n" --log-format console --log-level warn \
    --spool-dir "$work/spool" "${archive[@]}" &
  pids+=($!)
done
echo "== two consumers running (demo-1, demo-2)"
# The producer refuses stages no consumer has registered: wait for the consumers' first beat.
for _ in $(seq 1 100); do
  registered=$("$work/producer" --prefix "$prefix" stages 2>/dev/null || true)
  [[ $registered == *interview-evaluation* ]] && break
  sleep 0.1
done

echo "== sending 40 tasks of the four stages over 8 distinct inputs (5 duplicates each)"
"$work/producer" --prefix "$prefix" load --n 40 --keys 8 --rate 200 --latency-ms 400 --wait --timeout 90s

if [ "${DEMO_ARCHIVE:-}" = 1 ] && [ -n "$private_redis" ]; then
  sleep 1 # the archive writer batches its rows off the owners' path
  echo "== restarting redis-server EMPTY (all flights and results lost), same load again"
  kill "${pids[0]}"
  wait "${pids[0]}" 2>/dev/null || true
  start_redis || { echo "could not restart redis-server" >&2; exit 1; }
  pids[0]=$redis_pid
  for _ in $(seq 1 100); do
    registered=$("$work/producer" --prefix "$prefix" stages 2>/dev/null || true)
    [[ $registered == *interview-evaluation* ]] && break
    sleep 0.1
  done
  "$work/producer" --prefix "$prefix" load --n 40 --keys 8 --rate 200 --latency-ms 400 --wait --timeout 90s |
    tail -n 16
  echo "== 'owner runs 0': every task was answered from the archive or by followers of such answers"
fi
