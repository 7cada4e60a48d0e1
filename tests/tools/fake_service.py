"""A fake tool service: a real HTTP server on 127.0.0.1 that answers from a plan.

`service.plan("/kb", Reply(503), Reply(200, {...}))` queues replies for a path (the last one
repeats); `Reply(delay_s=...)` hangs before answering, released at teardown so no test waits
for it; `service.hits("/kb")` lists what arrived.
"""

from __future__ import annotations

import json
import threading
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler
from typing import Any
from urllib.parse import parse_qs, urlsplit

from tests.loopback import LoopbackServer, QuietHandler


@dataclass(frozen=True)
class Reply:
    status: int = 200
    body: Any = field(default_factory=lambda: {"results": []})
    delay_s: float = 0.0


@dataclass(frozen=True)
class Hit:
    method: str
    path: str
    query: dict[str, str]
    json: Any
    headers: dict[str, str]


class FakeToolService:
    def __init__(self) -> None:
        self._plans: dict[str, list[Reply]] = {}
        self._hits: list[Hit] = []
        self._lock = threading.Condition()
        self._server = LoopbackServer(self._handler_class())
        self.release = self._server.release

    @property
    def url(self) -> str:
        return self._server.url

    def plan(self, path: str, *replies: Reply) -> None:
        with self._lock:
            self._plans[path] = list(replies)

    def hits(self, path: str | None = None) -> list[Hit]:
        with self._lock:
            return [h for h in self._hits if path is None or h.path == path]

    def wait_for_hits(self, path: str, count: int, timeout_s: float = 30.0) -> list[Hit]:
        """The hits on `path` once there are `count` of them.

        A client that timed out may leave its request queued in the listen backlog; the
        service reads it later, on a busy machine after the client has given up.
        """
        with self._lock:
            self._lock.wait_for(lambda: len(self.hits(path)) >= count, timeout_s)
            return self.hits(path)

    def start(self) -> FakeToolService:
        self._server.start()
        return self

    def stop(self) -> None:
        self._server.stop()

    def _next(self, hit: Hit) -> Reply:
        with self._lock:
            self._hits.append(hit)
            self._lock.notify_all()
            plan = self._plans.get(hit.path)
            if not plan:
                return Reply(404, {"error": f"no plan for {hit.path}"})
            return plan.pop(0) if len(plan) > 1 else plan[0]

    def _handler_class(self) -> type[BaseHTTPRequestHandler]:
        service = self

        class Handler(QuietHandler):
            def _serve(self) -> None:
                parts = urlsplit(self.path)
                length = int(self.headers.get("Content-Length") or 0)
                raw = self.rfile.read(length) if length else b""
                hit = Hit(
                    method=self.command,
                    path=parts.path,
                    query={k: v[-1] for k, v in parse_qs(parts.query).items()},
                    json=json.loads(raw) if raw else None,
                    headers={k.lower(): v for k, v in self.headers.items()},
                )
                reply = service._next(hit)
                if reply.delay_s and service.release.wait(reply.delay_s):
                    return  # teardown: the client gave up long ago
                data = (
                    reply.body if isinstance(reply.body, bytes) else json.dumps(reply.body).encode()
                )
                try:
                    self.send_response(reply.status)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(data)))
                    self.end_headers()
                    self.wfile.write(data)
                except (BrokenPipeError, ConnectionResetError):
                    pass  # the client timed out and left

            do_GET = do_POST = _serve

        return Handler
