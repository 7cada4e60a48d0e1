"""The base of every fake backend in the tests: a real HTTP server on 127.0.0.1.

A stdlib `ThreadingHTTPServer` listens with a backlog of 5: a burst of concurrent clients
overflows it, the kernel resets connections, and a test fails for a reason that is not the
app's. `LoopbackServer` listens with a backlog of `BACKLOG`, serves each request in its own
thread, and starts and stops in one call.
"""

from __future__ import annotations

import contextlib
import socket
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Self

BACKLOG = 256


def free_port() -> int:
    """A port nothing listens on right now (for "nothing answers there" and for servers that
    must keep their port across a restart)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class _Server(ThreadingHTTPServer):
    request_queue_size = BACKLOG
    daemon_threads = True
    allow_reuse_address = True


class LoopbackServer:
    """`handler` serves the requests; `url` is where. `stop()` releases `release` first, so a
    handler holding a request open (a hanging reply) lets go at teardown."""

    def __init__(self, handler: type[BaseHTTPRequestHandler], port: int = 0):
        self.release = threading.Event()
        self._server = _Server(("127.0.0.1", port), handler)
        # A short poll interval: shutdown() waits for one, at every teardown.
        self._thread = threading.Thread(
            target=self._server.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True
        )

    @property
    def url(self) -> str:
        host, port = self._server.server_address[:2]
        return f"http://{host}:{port}"

    @property
    def port(self) -> int:
        return int(self._server.server_address[1])

    def start(self) -> Self:
        self._thread.start()
        return self

    def stop(self) -> None:
        self.release.set()
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=30)


class QuietHandler(BaseHTTPRequestHandler):
    """No access log on stderr; a client that left mid-reply is not an error."""

    def log_message(self, format: str, *args: object) -> None:
        pass

    def handle(self) -> None:
        with contextlib.suppress(BrokenPipeError, ConnectionResetError):
            super().handle()
