#!/bin/sh
# Enqueue one Flightdeck task with plain redis-cli and wait for its terminal event: what a
# producer in any language does. Needs only redis-cli.
#
#   REDIS_URL=redis://127.0.0.1:6379/0 ./enqueue.sh '{"answer":"I led the migration"}'
#
# Environment: REDIS_URL (default redis://127.0.0.1:6379/0), PREFIX (the consumers' --prefix,
# default ai), STAGE (default interview-evaluation), TENANT (default acme), TIMEOUT in seconds
# (default 30). Prints the event JSON and exits 0 when it arrives; exits 2 when a consumer
# refused the task (dead-lettered it: bad JSON, a missing field; the reason is printed), 1 on
# timeout.
set -eu

REDIS_URL=${REDIS_URL:-redis://127.0.0.1:6379/0}
PREFIX=${PREFIX:-ai}
STAGE=${STAGE:-interview-evaluation}
TENANT=${TENANT:-acme}
TIMEOUT=${TIMEOUT:-30}
INPUT=${1:-'{"answer":"I led the migration"}'}

# A task id: [A-Za-z0-9._:-], unique per task. Consumers derive the semantic key from stage,
# tenant and input, so the same input enqueued twice runs the model once.
TASK_ID="sh-$(date +%s)-$$"
NOW=$(date -u +%Y-%m-%dT%H:%M:%SZ)
PAYLOAD=$(printf '{"taskId":"%s","stage":"%s","tenant":"%s","enqueuedAt":"%s","input":%s}' \
  "$TASK_ID" "$STAGE" "$TENANT" "$NOW" "$INPUT")

rcli() { redis-cli -u "$REDIS_URL" --raw "$@"; }

# The task: one stream entry in watermill's format (a message uuid and the payload).
ENTRY=$(rcli XADD "$PREFIX:tasks:$STAGE" '*' _watermill_message_uuid "$TASK_ID" payload "$PAYLOAD")
echo "enqueued $TASK_ID as $ENTRY on $PREFIX:tasks:$STAGE" >&2

# Its terminal event lands on the stage's result stream after the entry (one Redis clock
# stamps both), so reading from the entry's id on is enough. Every task of the stage shares
# that stream: match the event by task id.
RESULTS="$PREFIX:results:$STAGE"
DLQ_LOOKUP='for _, e in ipairs(redis.call("XRANGE", KEYS[1], ARGV[1], "+", "COUNT", 1000)) do
  local f, m = e[2], {}
  for i = 1, #f, 2 do m[f[i]] = f[i + 1] end
  if m._watermill_message_uuid == ARGV[2] then return (m.reason or "") .. ": " .. (m.detail or "") end
end
return ""'

FROM="$ENTRY"
DEADLINE=$(( $(date +%s) + TIMEOUT ))
while [ "$(date +%s)" -lt "$DEADLINE" ]; do
  BATCH=$(rcli XRANGE "$RESULTS" "$FROM" + COUNT 1000)
  EVENT=$(printf '%s\n' "$BATCH" | grep -F "\"taskId\":\"$TASK_ID\"" | head -n 1 || true)
  if [ -n "$EVENT" ]; then
    printf '%s\n' "$EVENT"
    exit 0
  fi
  # A task a consumer cannot read (bad JSON, a missing field) gets no event when it names no
  # task id it can trust: its entry goes to the stage's dead-letter stream, under its uuid.
  # The lookup runs in Redis (fields read by name, whatever the payload holds); its answer is
  # "<reason>: <detail>", or nothing.
  DEAD=$(rcli EVAL "$DLQ_LOOKUP" 1 "$PREFIX:tasks:$STAGE:dlq" "$ENTRY" "$TASK_ID" 2>/dev/null || true)
  if printf '%s' "$DEAD" | grep -Eq '^[a-z_]+: '; then
    echo "a consumer refused $TASK_ID (dead-lettered): $DEAD" >&2
    exit 2
  fi
  LAST=$(printf '%s\n' "$BATCH" | grep -E '^[0-9]+-[0-9]+$' | tail -n 1 || true)
  if [ -n "$LAST" ]; then FROM="($LAST"; fi
  sleep 0.2
done
echo "no event for $TASK_ID within ${TIMEOUT}s: is a consumer running for stage $STAGE?" >&2
exit 1
