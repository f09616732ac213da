#!/usr/bin/env python3
"""Flightdeck's HTTP API from Python, with the standard library only (urllib, json).

It enqueues a task and waits for its result, retries a POST with the same Idempotency-Key
(the retry gets the first receipt), then follows the tenant's events as Server-Sent Events:
it enqueues a first batch, reads part of its events, disconnects, enqueues a second batch
and reconnects with Last-Event-ID. Every task's terminal event must arrive exactly once.

    FLIGHTDECK_URL=http://127.0.0.1:8080 FLIGHTDECK_TOKEN=... python3 flightdeck_http.py

Settings come from the environment: FLIGHTDECK_URL (default http://127.0.0.1:8080),
FLIGHTDECK_TOKEN or FLIGHTDECK_TOKEN_FILE (the file holding the token), FLIGHTDECK_STAGE
(default interview-evaluation) and FLIGHTDECK_TASKS (tasks per batch, default 5). It prints
one JSON line per step and exits 1 when an event is lost or repeated.
"""

import json
import os
import sys
import urllib.error
import urllib.request
import uuid


class APIError(Exception):
    """An error response of the API: its HTTP status and its stable code."""

    def __init__(self, status, body):
        self.status = status
        self.body = body
        super().__init__("%d %s: %s" % (status, body.get("code"), body.get("error")))


class Gateway:
    """A client of one gateway acting with one token."""

    def __init__(self, url, token, timeout=60):
        self.url = url.rstrip("/")
        self.token = token
        self.timeout = timeout

    def request(self, method, path, body=None, headers=None):
        """Sends a request and returns (status, headers, decoded JSON body)."""
        data = None if body is None else json.dumps(body).encode()
        req = urllib.request.Request(self.url + path, data=data, method=method)
        req.add_header("Authorization", "Bearer " + self.token)
        if data is not None:
            req.add_header("Content-Type", "application/json")
        for name, value in (headers or {}).items():
            req.add_header(name, value)
        try:
            with urllib.request.urlopen(req, timeout=self.timeout) as res:
                return res.status, res.headers, json.load(res)
        except urllib.error.HTTPError as e:
            raise APIError(e.code, json.load(e)) from None

    def enqueue(self, stage, task, wait=None, idempotency_key=None):
        """POST /v1/stages/{stage}/tasks: the receipt (202), or with wait the receipt and
        the terminal event (200) when it arrives in time."""
        path = "/v1/stages/%s/tasks" % stage
        if wait:
            path += "?wait=%s" % wait
        headers = {"Idempotency-Key": idempotency_key} if idempotency_key else {}
        return self.request("POST", path, task, headers)

    def events(self, stages, last_event_id=None):
        """GET /v1/events: yields (id, event, data) for each message of the stream. Messages
        without data, such as a heartbeat's new position, have data None."""
        req = urllib.request.Request("%s/v1/events?stages=%s" % (self.url, ",".join(stages)))
        req.add_header("Authorization", "Bearer " + self.token)
        req.add_header("Accept", "text/event-stream")
        if last_event_id:
            req.add_header("Last-Event-ID", last_event_id)
        res = urllib.request.urlopen(req, timeout=self.timeout)
        return SSE(res)


class SSE:
    """An open event stream: iterate it for messages, close it to disconnect."""

    def __init__(self, res):
        self.res = res

    def __iter__(self):
        msg_id, event, data = None, "message", []
        for raw in self.res:
            line = raw.decode().rstrip("\r\n")
            if line == "":
                if msg_id is not None or data:
                    yield msg_id, event, "\n".join(data) if data else None
                msg_id, event, data = None, "message", []
            elif line.startswith(":"):
                continue  # a comment: a heartbeat
            else:
                field, _, value = line.partition(":")
                value = value[1:] if value.startswith(" ") else value
                if field == "id":
                    msg_id = value
                elif field == "event":
                    event = value
                elif field == "data":
                    data.append(value)

    def close(self):
        self.res.close()


def out(step, **fields):
    print(json.dumps(dict(step=step, **fields)), flush=True)


def main():
    url = os.environ.get("FLIGHTDECK_URL", "http://127.0.0.1:8080")
    token = os.environ.get("FLIGHTDECK_TOKEN", "")
    if not token and os.environ.get("FLIGHTDECK_TOKEN_FILE"):
        with open(os.environ["FLIGHTDECK_TOKEN_FILE"]) as f:
            token = f.read().strip()
    if not token:
        sys.exit("set FLIGHTDECK_TOKEN or FLIGHTDECK_TOKEN_FILE")
    stage = os.environ.get("FLIGHTDECK_STAGE", "interview-evaluation")
    n = int(os.environ.get("FLIGHTDECK_TASKS", "5"))
    gw = Gateway(url, token)
    run = uuid.uuid4().hex[:8]

    # 1. Enqueue and wait for the result in one request.
    status, _, body = gw.enqueue(stage, {"input": {"question": "A migration?", "answer": "I led it."}}, wait="30s")
    if status != 200:
        sys.exit("no event within the wait: %s" % body)
    out("enqueue-and-wait", taskId=body["receipt"]["taskId"], status=body["event"]["status"],
        result=body["event"].get("result"))

    # 2. A retry with the same Idempotency-Key gets the first receipt; nothing is enqueued twice.
    key = "order-%s" % run
    task = {"input": {"answer": "retried %s" % run}}
    _, _, first = gw.enqueue(stage, task, idempotency_key=key)
    _, headers, retry = gw.enqueue(stage, task, idempotency_key=key)
    if retry["taskId"] != first["taskId"] or headers.get("Idempotent-Replayed") != "true":
        sys.exit("the retry got another receipt: %s, then %s" % (first, retry))
    out("idempotent-retry", taskId=first["taskId"], replayed=True)
    try:
        gw.enqueue(stage, {"input": {"answer": "another body"}}, idempotency_key=key)
        sys.exit("the same Idempotency-Key with another body was accepted")
    except APIError as e:
        out("idempotency-mismatch", status=e.status, code=e.body["code"])

    # 3. Follow the events, disconnect part way, and resume with Last-Event-ID.
    stream = gw.events([stage])
    messages = iter(stream)
    last_id, event, _ = next(messages)
    if event != "ready":
        sys.exit("the stream did not start with its ready event")
    wanted = set()
    for i in range(n):
        _, _, r = gw.enqueue(stage, {"input": {"answer": "batch 1 task %d of %s" % (i, run)}})
        wanted.add(r["taskId"])
    seen = {}
    keep = max(1, n // 2)
    for msg_id, _, data in messages:
        last_id = msg_id or last_id
        if data is None:
            continue
        ev = json.loads(data)
        if ev["taskId"] in wanted:
            seen[ev["taskId"]] = seen.get(ev["taskId"], 0) + 1
            if sum(seen.values()) >= keep:
                break
    stream.close()
    out("disconnected", events=sum(seen.values()), lastEventId=last_id)

    for i in range(n):
        _, _, r = gw.enqueue(stage, {"input": {"answer": "batch 2 task %d of %s" % (i, run)}})
        wanted.add(r["taskId"])
    stream = gw.events([stage], last_event_id=last_id)
    for msg_id, event, data in stream:
        if data is None or event != "message":
            continue
        ev = json.loads(data)
        if ev["taskId"] in wanted:
            seen[ev["taskId"]] = seen.get(ev["taskId"], 0) + 1
            if len(seen) == len(wanted):
                break
    stream.close()
    repeated = sorted(t for t, c in seen.items() if c > 1)
    missing = sorted(wanted - set(seen))
    out("resumed", tasks=len(wanted), events=sum(seen.values()), repeated=repeated, missing=missing)
    if repeated or missing:
        sys.exit(1)


if __name__ == "__main__":
    main()
