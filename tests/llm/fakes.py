"""Fake model APIs as real HTTP/1.1 servers on 127.0.0.1, so the real clients (google-genai
under ChatGoogleGenerativeAI, openai under ChatOpenAI) run their real code paths: URL, headers,
SSE parsing, retries, timeouts, pooled keep-alive connections.

A server answers from a script of replies, one per request, and records every request. It
fails loudly: a request past the end of the script gets a 500 and is reported by
`assert_used()`, as is a reply left unused.
"""

from __future__ import annotations

import json
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler
from typing import Any

from tests.loopback import LoopbackServer

# How long a "hanging" reply holds the request at most: a safety net only, since the test or
# the server's teardown releases it (no test waits for this to pass).
HANG_LIMIT_S = 120.0
TRICKLE_EVERY_S = 0.05


@dataclass
class Reply:
    """One scripted answer: an HTTP status with a JSON body, or an SSE stream of chunks.

    `hang_before` holds the request before anything is sent (a model that never answers);
    `hang_after` sends the first `hang_after` chunks and then holds the stream open;
    `trickle_after` sends the first chunks and then a comment line every `TRICKLE_EVERY_S`
    until released (a model that keeps a per-read timeout happy and never finishes);
    `pace_s` waits that long before each chunk after the first (or until released)."""

    status: int = 200
    body: Any = None
    chunks: list[str] | None = None
    hang_before: bool = False
    hang_after: int | None = None
    trickle_after: int | None = None
    pace_s: float = 0.0  # between chunks: a model that writes at a human pace


@dataclass
class Recorded:
    method: str
    path: str
    headers: dict[str, str]
    body: Any


@dataclass
class FakeModelServer:
    replies: list[Reply] = field(default_factory=list)
    requests: list[Recorded] = field(default_factory=list)
    unexpected: list[str] = field(default_factory=list)
    release: threading.Event = field(default_factory=threading.Event)
    # Set when a stream's client went away (a write failed): the disconnect reached us.
    client_left: threading.Event = field(default_factory=threading.Event)
    # Set when a hanging reply starts to hang, so a test can wait on it instead of sleeping.
    hanging: threading.Event = field(default_factory=threading.Event)
    connections: int = 0
    # Guards the lists; notified on every request, so a test can wait for one to arrive.
    _lock: threading.Condition = field(default_factory=threading.Condition)
    _server: LoopbackServer | None = None

    @property
    def url(self) -> str:
        assert self._server is not None
        return self._server.url

    def script(self, *replies: Reply) -> FakeModelServer:
        with self._lock:
            self.replies.extend(replies)
        return self

    def start(self) -> FakeModelServer:
        fake = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"  # keep-alive: clients pool the connection

            def setup(self) -> None:
                super().setup()
                with fake._lock:
                    fake.connections += 1

            def log_message(self, *args: Any) -> None:
                pass

            def handle(self) -> None:
                try:
                    super().handle()
                except ConnectionError:
                    # A client that went away mid-request is a scenario under test, not noise.
                    fake.client_left.set()

            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                raw = self.rfile.read(length) if length else b""
                body = json.loads(raw) if raw else None
                with fake._lock:
                    fake.requests.append(
                        Recorded(
                            "POST", self.path, {k.lower(): v for k, v in self.headers.items()}, body
                        )
                    )
                    reply = fake.replies.pop(0) if fake.replies else None
                    if reply is None:
                        fake.unexpected.append(self.path)
                    fake._lock.notify_all()
                if reply is None:
                    reply = Reply(500, {"error": {"code": 500, "message": "script exhausted"}})
                try:
                    fake._answer(self, reply)
                except (BrokenPipeError, ConnectionResetError):
                    fake.client_left.set()
                    self.close_connection = True

        self._server = LoopbackServer(Handler).start()
        return self

    def stop(self) -> None:
        self.release.set()
        if self._server is not None:
            self._server.stop()

    def wait_for_requests(self, count: int, timeout_s: float = 30.0) -> int:
        """How many requests arrived, once `count` have (or `timeout_s` passed).

        A request whose client gave up can still be in flight: the server thread reads it
        later, on a busy machine after the test has finished with the client."""
        with self._lock:
            self._lock.wait_for(lambda: len(self.requests) >= count, timeout_s)
            return len(self.requests)

    def assert_used(self) -> None:
        assert not self.unexpected, f"requests past the end of the script: {self.unexpected}"
        assert not self.replies, f"{len(self.replies)} scripted replies left unused"

    def _hang(self) -> None:
        self.hanging.set()
        self.release.wait(HANG_LIMIT_S)

    def _answer(self, handler: BaseHTTPRequestHandler, reply: Reply) -> None:
        if reply.hang_before:
            self._hang()
        if reply.chunks is None:
            data = json.dumps(reply.body or {}).encode()
            handler.send_response(reply.status)
            handler.send_header("Content-Type", "application/json")
            handler.send_header("Content-Length", str(len(data)))
            handler.end_headers()
            handler.wfile.write(data)
            return
        handler.send_response(reply.status)
        handler.send_header("Content-Type", "text/event-stream")
        handler.send_header("Transfer-Encoding", "chunked")
        handler.end_headers()
        for i, chunk in enumerate(reply.chunks):
            if reply.trickle_after is not None and i == reply.trickle_after:
                self.hanging.set()
                deadline = time.monotonic() + HANG_LIMIT_S
                while not self.release.wait(TRICKLE_EVERY_S) and time.monotonic() < deadline:
                    # A blank line: bytes every client's SSE parser skips. Fails once the
                    # client left.
                    _write_chunk(handler, b"\n")
            if reply.hang_after is not None and i == reply.hang_after:
                self._hang()
                # Probe the connection: a client that left makes this write fail.
                _write_chunk(handler, b": still here\n\n")
            if reply.pace_s and i:
                self.hanging.set()
                self.release.wait(reply.pace_s)
            _write_chunk(handler, chunk.encode())
        _write_chunk(handler, b"")


def _write_chunk(handler: BaseHTTPRequestHandler, data: bytes) -> None:
    handler.wfile.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")
    handler.wfile.flush()


def _sse(payload: Any) -> str:
    return f"data: {json.dumps(payload)}\n\n"


# ---- Gemini (generativelanguage.googleapis.com, v1beta, streamGenerateContent?alt=sse)


def _gemini_chunk(parts: list[dict[str, Any]], finish: str | None = None) -> str:
    candidate: dict[str, Any] = {"content": {"role": "model", "parts": parts}, "index": 0}
    if finish:
        candidate["finishReason"] = finish
    payload: dict[str, Any] = {"candidates": [candidate], "modelVersion": "gemini-2.5-flash"}
    if finish:
        payload["usageMetadata"] = {
            "promptTokenCount": 12,
            "candidatesTokenCount": 7,
            "totalTokenCount": 19,
        }
    return _sse(payload)


def gemini_text(
    *pieces: str, hang_after: int | None = None, trickle_after: int | None = None
) -> Reply:
    """Text streamed in the given pieces, the last one with finishReason STOP."""
    chunks = [
        _gemini_chunk([{"text": p}], "STOP" if i == len(pieces) - 1 else None)
        for i, p in enumerate(pieces)
    ]
    return Reply(chunks=chunks, hang_after=hang_after, trickle_after=trickle_after)


def gemini_call(name: str, **args: Any) -> Reply:
    return Reply(chunks=[_gemini_chunk([{"functionCall": {"name": name, "args": args}}], "STOP")])


def gemini_empty() -> Reply:
    """A candidate with no content at all (what Gemini sends when it has nothing to say)."""
    payload = {
        "candidates": [{"finishReason": "STOP", "index": 0}],
        "usageMetadata": {"promptTokenCount": 12, "totalTokenCount": 12},
        "modelVersion": "gemini-2.5-flash",
    }
    return Reply(chunks=[_sse(payload)])


def gemini_error(status: int) -> Reply:
    names = {429: "RESOURCE_EXHAUSTED", 500: "INTERNAL", 503: "UNAVAILABLE"}
    return Reply(
        status,
        {"error": {"code": status, "message": "fake failure", "status": names.get(status, "")}},
    )


# ---- OpenAI chat completions (POST /v1/chat/completions, stream=true)


def _openai_chunk(delta: dict[str, Any], finish: str | None = None) -> str:
    return _sse(
        {
            "id": "chatcmpl-fake",
            "object": "chat.completion.chunk",
            "created": 1700000000,
            "model": "fake-llama",
            "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
        }
    )


def openai_text(*pieces: str) -> Reply:
    chunks = [_openai_chunk({"role": "assistant", "content": ""})]
    chunks += [_openai_chunk({"content": p}) for p in pieces]
    chunks += [_openai_chunk({}, "stop"), "data: [DONE]\n\n"]
    return Reply(chunks=chunks)


def openai_call(name: str, call_id: str = "call_fake_1", **args: Any) -> Reply:
    """A tool call whose JSON arguments arrive split over several chunks, as servers send it."""
    arguments = json.dumps(args)
    cut = len(arguments) // 2
    head = {"index": 0, "id": call_id, "type": "function"}
    chunks = [
        _openai_chunk(
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [{**head, "function": {"name": name, "arguments": ""}}],
            }
        ),
        _openai_chunk({"tool_calls": [{"index": 0, "function": {"arguments": arguments[:cut]}}]}),
        _openai_chunk({"tool_calls": [{"index": 0, "function": {"arguments": arguments[cut:]}}]}),
        _openai_chunk({}, "tool_calls"),
        "data: [DONE]\n\n",
    ]
    return Reply(chunks=chunks)


def openai_error(status: int) -> Reply:
    return Reply(status, {"error": {"message": "fake failure", "type": "server_error"}})


# ---- Non-streamed JSON answers (structured output: the tasks)


def gemini_json(text: str) -> Reply:
    """A whole `generateContent` answer whose text is `text` (the JSON the schema asked for)."""
    return Reply(
        200,
        {
            "candidates": [
                {
                    "content": {"role": "model", "parts": [{"text": text}]},
                    "finishReason": "STOP",
                    "index": 0,
                }
            ],
            "usageMetadata": {
                "promptTokenCount": 120,
                "candidatesTokenCount": 40,
                "totalTokenCount": 160,
            },
            "modelVersion": "gemini-2.5-flash",
        },
    )


def openai_json(text: str) -> Reply:
    """A whole (not streamed) chat completion whose content is `text`."""
    return Reply(
        200,
        {
            "id": "chatcmpl-fake",
            "object": "chat.completion",
            "created": 1700000000,
            "model": "fake-llama",
            "choices": [
                {
                    "index": 0,
                    "message": {"role": "assistant", "content": text},
                    "finish_reason": "stop",
                }
            ],
            "usage": {"prompt_tokens": 120, "completion_tokens": 40, "total_tokens": 160},
        },
    )
