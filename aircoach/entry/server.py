"""`python -m aircoach serve`: uvicorn, with a deadline on receiving each request.

uvicorn has no header or body deadline: its keep-alive timer is cancelled by the first byte
of a request and nothing replaces it, so a client trickling one header byte at a time (a
slowloris) holds a connection open as long as it likes; 300 of them stayed open 60 s in an
attack run. `ReceiptDeadlineProtocol` (uvicorn's h11 protocol) gives every request
`REQUEST_RECEIPT_TIMEOUT_S` from its first byte (or from the connection's opening) until its
last: headers and body. Past it, a request whose headers are incomplete gets `408` and the
connection is closed; one whose body is still arriving is closed (the app sees the client
leave). The time spent answering does not count: a long SSE stream is not a slow request.
The request head is bounded too: h11 buffers at most `MAX_HEADER_BYTES` of a head whose end it
has not seen (a client still sending headers past it gets `400`).

On Lambda and Vercel the platform receives the request; this is for `serve` (a laptop, a
container, the Lambda Web Adapter).
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import h11
import uvicorn
from uvicorn.protocols.http.h11_impl import H11Protocol

log = logging.getLogger(__name__)

MAX_HEADER_BYTES = 16 * 1024

_TIMEOUT_TEXT = b"The request was not received in time."
# Written raw: h11 lets a server answer only a request whose headers it has.
_TIMEOUT_RESPONSE = (
    b"HTTP/1.1 408 Request Timeout\r\n"
    b"content-type: text/plain; charset=utf-8\r\n"
    b"content-length: %d\r\n"
    b"connection: close\r\n\r\n%s" % (len(_TIMEOUT_TEXT), _TIMEOUT_TEXT)
)
# States in which the client has finished sending its current request.
_RECEIVED = (h11.DONE, h11.MUST_CLOSE, h11.CLOSED, h11.ERROR)


class ReceiptDeadlineProtocol(H11Protocol):
    """uvicorn's h11 protocol with a deadline on receiving each request (see the module)."""

    receipt_timeout_s: float = 20.0

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        self._receipt: asyncio.TimerHandle | None = None
        super().connection_made(transport)
        self._arm()  # a connection that sends nothing is a request that never arrives

    def data_received(self, data: bytes) -> None:
        if self._receipt is None and self.conn.their_state is h11.IDLE:
            self._arm()  # the first byte of the next request on a kept-alive connection
        super().data_received(data)
        if self._receipt is not None and self.conn.their_state in _RECEIVED:
            self._disarm()

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
        headers_incomplete = self.conn.their_state is h11.IDLE
        log.info(
            "request from %s not received within %gs (%s): connection closed",
            self.client,
            self.receipt_timeout_s,
            "headers" if headers_incomplete else "body",
        )
        if headers_incomplete:
            self.transport.write(_TIMEOUT_RESPONSE)
        self.transport.close()


def receipt_deadline_protocol(timeout_s: float) -> type[ReceiptDeadlineProtocol]:
    """The protocol class uvicorn instantiates per connection, with this deadline."""
    return type(
        "ReceiptDeadlineProtocol", (ReceiptDeadlineProtocol,), {"receipt_timeout_s": timeout_s}
    )


def server_config(app: Any, *, receipt_timeout_s: float, **options: Any) -> uvicorn.Config:
    """uvicorn's config for `app` with the receipt deadline and the header limit."""
    return uvicorn.Config(
        app,
        http=receipt_deadline_protocol(receipt_timeout_s),
        h11_max_incomplete_event_size=MAX_HEADER_BYTES,
        **options,
    )


def serve(app: Any, *, host: str, port: int, receipt_timeout_s: float) -> None:
    uvicorn.Server(
        server_config(
            app, receipt_timeout_s=receipt_timeout_s, host=host, port=port, log_level="info"
        )
    ).run()
