"""A fake of Anthropic's Messages API on loopback HTTP, for tests that drive the real `anthropic` SDK.

Point a client at it with `anthropic.Anthropic(api_key="sk-ant-test", base_url=fake.base_url)` (or set
`ANTHROPIC_BASE_URL`). It serves:

- `POST /v1/messages`: the next reply queued with `script()`, else the `on_tool()` handler of the tool
  the request forces (or offers), else a loud 500 that the SDK is told not to retry.
- `POST /v1/messages/batches`, `GET /v1/messages/batches/{id}` and `GET .../{id}/results` (JSONL):
  each batch request's `params` go through the same tool handlers when the batch is created; the batch
  reads "in_progress" for the first `batch_polls_before_end` retrievals, then "ended".

Replies follow the wire format of the API: message and error bodies, `request-id` headers, and any
extra headers a test sets (`retry-after`, `retry-after-ms`, `x-should-retry`, ...).
"""

from __future__ import annotations

import json
import re
import threading
import time
import uuid
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import urlsplit

DEFAULT_USAGE: dict[str, int] = {
    "input_tokens": 1200,
    "output_tokens": 180,
    "cache_creation_input_tokens": 0,
    "cache_read_input_tokens": 1024,
}

# The error `type` the API sends with each status, for replies that give a status but no body.
_ERROR_TYPES: dict[int, str] = {
    400: "invalid_request_error",
    401: "authentication_error",
    403: "permission_error",
    404: "not_found_error",
    413: "request_too_large",
    429: "rate_limit_error",
    500: "api_error",
    529: "overloaded_error",
}

_BATCH_PATH = re.compile(r"/v1/messages/batches/([^/]+)(/results)?")


@dataclass(frozen=True)
class Reply:
    """One scripted HTTP reply.

    With `body` unset, a status below 400 answers a message made of `text` (a text block) and/or `tool`
    (a tool_use block with `tool_input`), and a status of 400 or more answers the API's error body for
    that status. `body` overrides this: a dict is sent as JSON, a str as raw bytes (e.g. malformed JSON).
    `stop_reason` defaults to "tool_use" when there is a tool, else "end_turn"; `usage` replaces
    `DEFAULT_USAGE` whole. `headers` are added to (or override) the defaults, `content-type:
    application/json` and a fresh `request-id`. `delay_s` is waited before answering (ignored in batches).
    """

    status: int = 200
    tool: str | None = None
    tool_input: dict[str, Any] | None = None
    text: str | None = None
    body: dict[str, Any] | str | None = None
    headers: dict[str, str] = field(default_factory=dict)
    delay_s: float = 0.0
    stop_reason: str | None = None
    usage: dict[str, int] | None = None


ToolHandler = Callable[[dict[str, Any]], "dict[str, Any] | Reply"]


def error_body(type_: str, message: str) -> dict[str, Any]:
    """The body of an API error: `{"type": "error", "error": {"type": ..., "message": ...}}`."""
    return {
        "type": "error",
        "error": {"type": type_, "message": message},
        "request_id": f"req_{uuid.uuid4().hex}",
    }


def error_reply(status: int, type_: str, message: str, headers: dict[str, str] | None = None) -> Reply:
    """An error reply, e.g. `error_reply(529, "overloaded_error", "Overloaded")` or
    `error_reply(429, "rate_limit_error", "slow down", {"retry-after-ms": "20"})`."""
    return Reply(status=status, body=error_body(type_, message), headers=headers or {})


def message_body(reply: Reply, model: str) -> dict[str, Any]:
    """The Messages API response that `reply` stands for (a `Message` in the SDK)."""
    content: list[dict[str, Any]] = []
    if reply.text is not None:
        content.append({"type": "text", "text": reply.text})
    if reply.tool is not None:
        content.append(
            {
                "type": "tool_use",
                "id": f"toolu_{uuid.uuid4().hex[:24]}",
                "name": reply.tool,
                "input": reply.tool_input or {},
            }
        )
    return {
        "id": f"msg_{uuid.uuid4().hex[:24]}",
        "type": "message",
        "role": "assistant",
        "model": model,
        "content": content,
        "stop_reason": reply.stop_reason or ("tool_use" if reply.tool else "end_turn"),
        "stop_sequence": None,
        "usage": reply.usage if reply.usage is not None else dict(DEFAULT_USAGE),
    }


def _payload(reply: Reply, request: dict[str, Any] | None) -> dict[str, Any] | str:
    """What `reply` sends, for a request with JSON body `request`."""
    if reply.body is not None:
        return reply.body
    if reply.status >= 400:
        return error_body(_ERROR_TYPES.get(reply.status, "api_error"), f"fake_anthropic: HTTP {reply.status}")
    return message_body(reply, (request or {}).get("model", "claude-fake"))


@dataclass(frozen=True)
class RecordedRequest:
    """A request the fake received: `path` has no query string, `headers` have lower-case names, `at` is
    when it arrived (`time.monotonic()`, e.g. to measure the pause before a retry)."""

    method: str
    path: str
    headers: dict[str, str]
    body: Any
    at: float = 0.0


@dataclass
class _Batch:
    """A created Message Batch: its results are fixed at creation, only its status moves."""

    id: str
    created_at: datetime
    results: list[dict[str, Any]]
    polls: int = 0


class _NoReply(Exception):
    """Neither a scripted reply nor a tool handler answers a request."""


class FakeAnthropic:
    """The fake API server; use as a context manager (`with FakeAnthropic() as fake:`)."""

    def __init__(self, batch_polls_before_end: int = 1) -> None:
        self.batch_polls_before_end = batch_polls_before_end
        self.base_url = ""
        self._lock = threading.Lock()
        self._closing = threading.Event()
        self._requests: list[RecordedRequest] = []
        self._script: deque[Reply] = deque()
        self._handlers: dict[str, ToolHandler] = {}
        self._batches: dict[str, _Batch] = {}
        self._server: _Server | None = None
        self._thread: threading.Thread | None = None

    def __enter__(self) -> FakeAnthropic:
        self._server = _Server(self)
        host, port = self._server.server_address[:2]
        self.base_url = f"http://{host}:{port}"
        self._thread = threading.Thread(
            target=self._server.serve_forever, args=(0.05,), name="fake-anthropic", daemon=True
        )
        self._thread.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self._closing.set()  # wakes handlers waiting out a `delay_s`
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
        if self._thread is not None:
            self._thread.join(timeout=5)

    # --- scripting -------------------------------------------------------------------------------

    def script(self, *replies: Reply) -> None:
        """Queue replies for `POST /v1/messages`, consumed in order before any tool handler."""
        with self._lock:
            self._script.extend(replies)

    def on_tool(self, name: str, handler: ToolHandler) -> None:
        """Answer requests that force tool `name` (or offer it) with `handler(request_body)`.

        A dict it returns is the input of a `name` tool_use block; a `Reply` is sent as is.
        """
        with self._lock:
            self._handlers[name] = handler

    # --- assertions ------------------------------------------------------------------------------

    @property
    def requests(self) -> list[RecordedRequest]:
        """A snapshot of the requests received so far, in order."""
        with self._lock:
            return list(self._requests)

    def count(self, path: str | None = None, method: str | None = None) -> int:
        """How many requests were received, optionally only those to `path` and/or with `method`."""
        return sum(
            (path is None or r.path == path) and (method is None or r.method == method) for r in self.requests
        )

    # --- serving ---------------------------------------------------------------------------------

    def _record(self, request: RecordedRequest) -> None:
        with self._lock:
            self._requests.append(request)

    def _route(self, method: str, path: str, body: Any) -> Reply:
        """The reply to one request."""
        if method == "POST" and path == "/v1/messages":
            with self._lock:
                scripted = self._script.popleft() if self._script else None
            return scripted or self._handler_reply(body)
        if method == "POST" and path == "/v1/messages/batches":
            return Reply(body=self._create_batch(body))
        match = _BATCH_PATH.fullmatch(path) if method == "GET" else None
        with self._lock:
            batch = self._batches.get(match[1]) if match else None
        if match is None or batch is None:
            return error_reply(404, "not_found_error", f"fake_anthropic: no route for {method} {path}")
        if match[2]:
            lines = "".join(json.dumps(line) + "\n" for line in batch.results)
            return Reply(body=lines, headers={"content-type": "application/binary"})
        with self._lock:
            batch.polls += 1
            ended = batch.polls > self.batch_polls_before_end
        return Reply(body=self._batch_body(batch, ended))

    def _handler_reply(self, request: dict[str, Any]) -> Reply:
        """The reply of the handler of the forced tool, else of the first offered tool that has one."""
        forced = (request.get("tool_choice") or {}).get("name")
        offered = [tool.get("name") for tool in request.get("tools") or []]
        with self._lock:
            handlers = dict(self._handlers)
        for name in [forced, *offered]:
            if name in handlers:
                answer = handlers[name](request)
                return answer if isinstance(answer, Reply) else Reply(tool=name, tool_input=answer)
        raise _NoReply(
            f"no scripted reply left and no on_tool handler for tool_choice={forced!r}, tools={offered!r}"
        )

    def _create_batch(self, body: dict[str, Any]) -> dict[str, Any]:
        """Answer every request of a new batch through the tool handlers; return the batch object."""
        results = []
        for item in body["requests"]:
            reply = self._handler_reply(item["params"])
            kind, key = ("errored", "error") if reply.status >= 400 else ("succeeded", "message")
            results.append(
                {
                    "custom_id": item["custom_id"],
                    "result": {"type": kind, key: _payload(reply, item["params"])},
                }
            )
        batch = _Batch(f"msgbatch_{uuid.uuid4().hex[:24]}", datetime.now(timezone.utc), results)
        with self._lock:
            self._batches[batch.id] = batch
        return self._batch_body(batch, ended=False)

    def _batch_body(self, batch: _Batch, ended: bool) -> dict[str, Any]:
        """The `MessageBatch` object; counts other than `processing` stay 0 until the batch ends."""
        total = len(batch.results)
        errored = sum(r["result"]["type"] == "errored" for r in batch.results) if ended else 0
        return {
            "id": batch.id,
            "type": "message_batch",
            "processing_status": "ended" if ended else "in_progress",
            "request_counts": {
                "processing": 0 if ended else total,
                "succeeded": total - errored if ended else 0,
                "errored": errored,
                "canceled": 0,
                "expired": 0,
            },
            "created_at": batch.created_at.isoformat(),
            "expires_at": (batch.created_at + timedelta(hours=24)).isoformat(),
            "ended_at": datetime.now(timezone.utc).isoformat() if ended else None,
            "archived_at": None,
            "cancel_initiated_at": None,
            "results_url": f"{self.base_url}/v1/messages/batches/{batch.id}/results" if ended else None,
        }


class _Server(ThreadingHTTPServer):
    """The HTTP server of one `FakeAnthropic`, on 127.0.0.1 and a free port.

    Each request gets a thread; `server_close()` joins them, so none outlives the fake.
    """

    daemon_threads = False  # ThreadingHTTPServer's default (True) leaves its threads untracked and unjoined

    def __init__(self, fake: FakeAnthropic) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.fake = fake


class _Handler(BaseHTTPRequestHandler):
    """Records each request, asks the fake for its reply, and sends it (HTTP/1.0: one per connection)."""

    server: _Server
    timeout = 5.0  # a client that stalls mid-request can't keep `server_close()` waiting longer

    def do_GET(self) -> None:
        self._serve()

    def do_POST(self) -> None:
        self._serve()

    def log_message(self, format: str, *args: Any) -> None:
        """Keep the test output quiet."""

    def _serve(self) -> None:
        fake = self.server.fake
        path = urlsplit(self.path).path
        raw = self.rfile.read(int(self.headers.get("content-length") or 0))
        body = json.loads(raw) if raw else None
        received = {k.lower(): v for k, v in self.headers.items()}
        fake._record(RecordedRequest(self.command, path, received, body, time.monotonic()))
        try:
            reply = fake._route(self.command, path, body)
        except Exception as exc:  # a missing reply or a failing handler: fail the test, don't hang it
            message = f"fake_anthropic: {type(exc).__name__}: {exc}"
            reply = error_reply(500, "api_error", message, headers={"x-should-retry": "false"})
        if fake._closing.wait(reply.delay_s):
            return
        payload = _payload(reply, body)
        data = (payload if isinstance(payload, str) else json.dumps(payload)).encode()
        headers = {"content-type": "application/json", "request-id": f"req_{uuid.uuid4().hex}"}
        headers.update({name.lower(): value for name, value in reply.headers.items()})
        try:
            self.send_response(reply.status)
            for name, value in headers.items():
                self.send_header(name, value)
            self.send_header("content-length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)
        except (BrokenPipeError, ConnectionResetError):
            pass  # the client gave up (e.g. timed out) first
