#!/usr/bin/env bash
# Flightdeck's HTTP API with curl: enqueue a task and wait for its result, read it again by
# task id, retry a POST with an Idempotency-Key, and follow the tenant's events as
# Server-Sent Events, resuming after a disconnect with Last-Event-ID.
#
#   FLIGHTDECK_URL=http://127.0.0.1:8080 FLIGHTDECK_TOKEN=... bash flightdeck.sh
#
# FLIGHTDECK_TOKEN_FILE may name a file holding the token instead. FLIGHTDECK_STAGE defaults
# to interview-evaluation. Needs bash, curl, grep and sed.
set -euo pipefail

URL=${FLIGHTDECK_URL:-http://127.0.0.1:8080}
STAGE=${FLIGHTDECK_STAGE:-interview-evaluation}
TOKEN=${FLIGHTDECK_TOKEN:-}
if [ -z "$TOKEN" ] && [ -n "${FLIGHTDECK_TOKEN_FILE:-}" ]; then
	TOKEN=$(tr -d '[:space:]' <"$FLIGHTDECK_TOKEN_FILE")
fi
[ -n "$TOKEN" ] || { echo "set FLIGHTDECK_TOKEN or FLIGHTDECK_TOKEN_FILE" >&2; exit 2; }
AUTH="Authorization: Bearer $TOKEN"
JSON='Content-Type: application/json'
WORK=$(mktemp -d)
CURL_PID=
cleanup() {
	[ -z "$CURL_PID" ] || kill "$CURL_PID" 2>/dev/null || true
	rm -rf "$WORK"
}
trap cleanup EXIT

# field NAME: the first string value of NAME in the JSON on stdin.
field() { grep -o "\"$1\":\"[^\"]*\"" | head -n 1 | sed "s/^\"$1\":\"\(.*\)\"$/\1/"; }

# await_line FILE PATTERN: waits up to 30 s for a line of FILE to match PATTERN.
await_line() {
	for _ in $(seq 300); do
		grep -q -- "$2" "$1" 2>/dev/null && return 0
		sleep 0.1
	done
	echo "nothing matched $2 in 30 s" >&2
	return 1
}

# 1. Enqueue and wait up to 30 s for the terminal event: 200 with the receipt and the event.
curl -sS --fail-with-body -H "$AUTH" -H "$JSON" \
	-d '{"input":{"question":"A migration?","answer":"I led it."}}' \
	"$URL/v1/stages/$STAGE/tasks?wait=30s" >"$WORK/done.json"
TASK=$(field taskId <"$WORK/done.json")
echo "enqueue-and-wait: task $TASK status $(field status <"$WORK/done.json")"

# 2. The task again, by its id.
curl -sS --fail-with-body -H "$AUTH" "$URL/v1/tasks/$TASK" | grep -q '"status":"SUCCEEDED"'
echo "get-task: $TASK SUCCEEDED"

# 3. A retried POST with the same Idempotency-Key gets the first receipt.
KEY="order-$$-$RANDOM"
FIRST=$(curl -sS --fail-with-body -H "$AUTH" -H "Idempotency-Key: $KEY" -H "$JSON" -d '{"input":{"answer":"once"}}' \
	"$URL/v1/stages/$STAGE/tasks" | field taskId)
RETRY=$(curl -sS --fail-with-body -H "$AUTH" -H "Idempotency-Key: $KEY" -H "$JSON" -d '{"input":{"answer":"once"}}' \
	"$URL/v1/stages/$STAGE/tasks" | field taskId)
[ "$FIRST" = "$RETRY" ] || { echo "the retry got task $RETRY, the first $FIRST" >&2; exit 1; }
echo "idempotent-retry: $FIRST"

# 4. Follow the events: the stream starts with a ready event; then enqueue a task and read
# its event.
curl -sSN -H "$AUTH" "$URL/v1/events?stages=$STAGE" >"$WORK/events1.txt" &
CURL_PID=$!
await_line "$WORK/events1.txt" '^event: ready'
A=$(curl -sS --fail-with-body -H "$AUTH" -H "$JSON" -d '{"input":{"answer":"before the disconnect"}}' \
	"$URL/v1/stages/$STAGE/tasks" | field taskId)
await_line "$WORK/events1.txt" "\"taskId\":\"$A\""
kill "$CURL_PID"
wait "$CURL_PID" 2>/dev/null || true
CURL_PID=
# The id of the last message read is where the stream resumes.
LAST=$(sed -n 's/^id: //p' "$WORK/events1.txt" | tail -n 1)
echo "disconnected after task $A at $LAST"

# 5. A task enqueued while disconnected arrives after the reconnect; task A does not again.
B=$(curl -sS --fail-with-body -H "$AUTH" -H "$JSON" -d '{"input":{"answer":"while disconnected"}}' \
	"$URL/v1/stages/$STAGE/tasks" | field taskId)
curl -sSN -H "$AUTH" -H "Last-Event-ID: $LAST" "$URL/v1/events?stages=$STAGE" >"$WORK/events2.txt" &
CURL_PID=$!
await_line "$WORK/events2.txt" "\"taskId\":\"$B\""
if grep -q "\"taskId\":\"$A\"" "$WORK/events2.txt"; then
	echo "task $A was repeated after the reconnect" >&2
	exit 1
fi
echo "resumed: task $B arrived, task $A not repeated"
