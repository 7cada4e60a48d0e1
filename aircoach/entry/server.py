"""`python -m aircoach serve`: uvicorn, with a deadline on receiving each request.

uvicorn has no header or body deadline: its keep-alive timer is cancelled by the first byte
of a request and nothing replaces it, so a client trickling one header byte at a time (a
slowloris) holds a connection open as long as it likes; 300 of them stayed open 60 s in an
attack run. `ReceiptDeadlineProtocol` (uvicorn's httptools protocol) gives every request
`REQUEST_RECEIPT_TIMEOUT_S` from its first byte (or from the connection's opening) until its
last: headers and body. Past it, a request whose headers are incomplete gets `408` and the
connection is closed; one whose body is still arriving is closed (the app sees the client
leave). The time spent answering does not count: a long SSE stream is not a slow request.
The request head is bounded too: once more than `MAX_HEADER_BYTES` have arrived without the
head's end, the client gets `400` and the connection is closed (the parser would otherwise
buffer an endless header).

httptools (llhttp, in C) rather than uvicorn's default h11: on h11 the same chat request cost
about 6 % more server CPU (docs/performance.md).

On Lambda and Vercel the platform receives the request; this is for `serve` (a laptop, a
container, the Lambda Web Adapter).
"""

from __future__ import annotations

import asyncio
import errno
import json
import logging
import socket
import uuid
from typing import Any

import uvicorn
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

from aircoach import messages
from aircoach.messages import DEFAULT_LANGUAGE

log = logging.getLogger(__name__)

MAX_HEADER_BYTES = 16 * 1024


def _raw_error(status: bytes, code: str, key: str) -> tuple[bytes, str]:
    """A response written raw (there is no whole request for the app to answer) in the API's
    error shape, `{"error", "message"}` in the API's default language, with a request id the
    log line names too; and that id."""
    request_id = uuid.uuid4().hex
    body = json.dumps(
        {"error": code, "message": messages.text(key, DEFAULT_LANGUAGE)}, ensure_ascii=False
    ).encode()
    head = (
        b"HTTP/1.1 " + status + b"\r\n"
        b"content-type: application/json\r\n"
        b"x-request-id: " + request_id.encode() + b"\r\n"
        b"content-length: " + str(len(body)).encode() + b"\r\n"
        b"connection: close\r\n\r\n"
    )
    return head + body, request_id


class ReceiptDeadlineProtocol(HttpToolsProtocol):
    """uvicorn's httptools protocol with a deadline on receiving each request and a bound on
    its head (see the module)."""

    receipt_timeout_s: float = 20.0

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        self._receipt: asyncio.TimerHandle | None = None
        self._receiving = False  # a request has begun and not yet arrived whole
        self._in_head = True  # the current (or next) request's headers are not complete
        self._head_bytes = 0  # bytes received while in the head
        super().connection_made(transport)
        self._arm()  # a connection that sends nothing is a request that never arrives

    def data_received(self, data: bytes) -> None:
        if self._receipt is None and not self._receiving:
            self._arm()  # the first byte of the next request on a kept-alive connection
        if self._in_head:
            self._head_bytes += len(data)
        super().data_received(data)
        too_large = self._in_head and self._head_bytes > MAX_HEADER_BYTES
        if too_large and not self.transport.is_closing():
            self._disarm()
            self._refuse("request_head_too_large", f"head over {MAX_HEADER_BYTES} bytes")

    def send_400_response(self, msg: str) -> None:
        """uvicorn's 400 for a request llhttp cannot parse, as `_refuse` answers it."""
        self._refuse("request_unreadable", msg)

    def _refuse(self, key: str, why: str) -> None:
        """A 400 as the API's JSON error with a request id the log line names, not uvicorn's
        `text/plain` without one; the connection closed."""
        response, request_id = _raw_error(b"400 Bad Request", "bad_request", key)
        log.info("request from %s refused, 400 [%s]: %s", self.client, request_id, why[:80])
        self.transport.write(response)
        self.transport.close()

    def on_message_begin(self) -> None:
        if self._receipt is None:
            self._arm()  # a request pipelined behind one that arrived in the same read
        self._receiving = True
        super().on_message_begin()

    def on_headers_complete(self) -> None:
        self._in_head, self._head_bytes = False, 0
        super().on_headers_complete()

    def on_message_complete(self) -> None:
        self._receiving, self._in_head = False, True
        self._disarm()
        super().on_message_complete()

    def connection_lost(self, exc: Exception | None) -> None:
        self._disarm()
        super().connection_lost(exc)

    def _arm(self) -> None:
        self._disarm()
        self._receipt = self.loop.call_later(self.receipt_timeout_s, self._expired)

    def _disarm(self) -> None:
        if self._receipt is not None:
            self._receipt.cancel()
            self._receipt = None

    def _expired(self) -> None:
        self._receipt = None
        if self.transport.is_closing():
            return
        log.info(
            "request from %s not received within %gs (%s): connection closed",
            self.client,
            self.receipt_timeout_s,
            "headers" if self._in_head else "body",
        )
        if self._in_head:
            response, _ = _raw_error(b"408 Request Timeout", "request_timeout", "request_timeout")
            self.transport.write(response)
        self.transport.close()


def receipt_deadline_protocol(timeout_s: float) -> type[ReceiptDeadlineProtocol]:
    """The protocol class uvicorn instantiates per connection, with this deadline."""
    return type(
        "ReceiptDeadlineProtocol", (ReceiptDeadlineProtocol,), {"receipt_timeout_s": timeout_s}
    )


def server_config(app: Any, *, receipt_timeout_s: float, **options: Any) -> uvicorn.Config:
    """uvicorn's config for `app` with the receipt deadline and the header limit. uvicorn's
    own lines (lifecycle, one access line per request) go through the app's logging
    (aircoach.logs): uvicorn's default config gave them handlers of their own, plain text even
    with LOG_FORMAT=json."""
    options.setdefault("log_config", None)
    return uvicorn.Config(app, http=receipt_deadline_protocol(receipt_timeout_s), **options)


class PortUnavailable(Exception):
    """The server cannot listen where it was asked to (one line, for the command line)."""


def listen_socket(host: str, port: int) -> socket.socket:
    """The server's socket, bound (uvicorn listens on it). Bound by `serve` before the app is
    built: uvicorn would bind after its start-up, and a port in use would be one ERROR log line
    among its start-up lines."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as uvicorn's own socket
    try:
        sock.bind((host, port))
    except OSError as exc:
        sock.close()
        where = f"[{host}]:{port}" if family == socket.AF_INET6 else f"{host}:{port}"
        if exc.errno == errno.EADDRINUSE:
            raise PortUnavailable(
                f"{where} is in use: stop what listens there, or pass --port (or PORT)"
            ) from None
        raise PortUnavailable(f"cannot listen on {where}: {exc.strerror or exc}") from None
    return sock


def url_of(sock: socket.socket) -> str:
    """The URL a client on this machine reaches `sock` at."""
    host, port = sock.getsockname()[:2]
    return f"http://[{host}]:{port}" if sock.family == socket.AF_INET6 else f"http://{host}:{port}"


def serve(app: Any, sock: socket.socket, *, receipt_timeout_s: float) -> None:
    """uvicorn on `sock` (`listen_socket`), until it is told to stop."""
    host, port = sock.getsockname()[:2]
    config = server_config(
        app, receipt_timeout_s=receipt_timeout_s, host=host, port=port, log_level="info"
    )
    # uvicorn names the address only when it binds the socket itself.
    log.info("listening on %s (Ctrl-C to stop)", url_of(sock))
    try:
        uvicorn.Server(config).run(sockets=[sock])
    finally:
        sock.close()
