"""A client that sends what well-behaved clients do not: large bodies streamed from a
generator (so the test never holds them), stopping as soon as the server answers, and
requests trickled a few bytes at a time. Raw sockets: httpx would send the whole body before
it reads the answer."""

from __future__ import annotations

import select
import socket
import time
from dataclasses import dataclass
from urllib.parse import urlsplit

WAIT_S = 30.0  # for the server to answer or close; it should do so at once
CHUNK = 64 * 1024


@dataclass
class RawAnswer:
    status: int | None  # None: the server closed without answering
    head: bytes  # status line and headers
    body: bytes
    sent: int  # body bytes the server took before it answered or closed
    elapsed_s: float


def address(url: str) -> tuple[str, int]:
    parts = urlsplit(url)
    assert parts.hostname and parts.port
    return parts.hostname, parts.port


def post_large(
    url: str,
    path: str,
    total: int,
    *,
    headers: dict[str, str] | None = None,
    declared: bool = True,
) -> RawAnswer:
    """POST `total` bytes of `x`, with a Content-Length (`declared`) or chunked, until the
    server answers or closes."""
    started = time.monotonic()
    lines = [f"POST {path} HTTP/1.1", "Host: 127.0.0.1", "Content-Type: application/json"]
    lines += [f"{k}: {v}" for k, v in (headers or {}).items()]
    lines.append(f"Content-Length: {total}" if declared else "Transfer-Encoding: chunked")
    sent = 0
    with socket.create_connection(address(url), timeout=WAIT_S) as sock:
        sock.sendall(("\r\n".join(lines) + "\r\n\r\n").encode())
        piece = b"x" * CHUNK
        while sent < total and not _readable(sock):
            size = min(CHUNK, total - sent)
            frame = piece[:size] if declared else b"%x\r\n%s\r\n" % (size, piece[:size])
            try:
                sock.sendall(frame)
            except (BrokenPipeError, ConnectionResetError, TimeoutError):
                break
            sent += size
        head, body = _read_answer(sock)
    status = int(head.split(b" ", 2)[1]) if head.startswith(b"HTTP/1.1 ") else None
    return RawAnswer(status, head, body, sent, time.monotonic() - started)


def _readable(sock: socket.socket) -> bool:
    return bool(select.select([sock], [], [], 0)[0])


def _read_answer(sock: socket.socket) -> tuple[bytes, bytes]:
    data = b""
    deadline = time.monotonic() + WAIT_S
    while time.monotonic() < deadline:
        try:
            chunk = sock.recv(65536)
        except ConnectionResetError:
            break
        if not chunk:
            break
        data += chunk
        head, sep, body = data.partition(b"\r\n\r\n")
        if sep and b"content-length:" in head.lower():
            length = int(head.lower().split(b"content-length:")[1].split(b"\r\n")[0])
            if len(body) >= length:
                return head, body[:length]
    head, _, body = data.partition(b"\r\n\r\n")
    return head, body


def trickle_head(url: str, *, pause_s: float = 0.2) -> RawAnswer:
    """Send a request head one header line every `pause_s`, forever, until the server
    answers or closes (a slowloris). Fails after WAIT_S."""
    started = time.monotonic()
    with socket.create_connection(address(url), timeout=WAIT_S) as sock:
        sock.sendall(b"GET /api/health HTTP/1.1\r\nHost: 127.0.0.1\r\n")
        sent = 0
        while not _readable(sock):
            assert time.monotonic() - started < WAIT_S, "the server kept a trickling request open"
            try:
                sock.sendall(b"X-Trickle: %d\r\n" % sent)
            except (BrokenPipeError, ConnectionResetError):
                break
            sent += 1
            time.sleep(pause_s)
        head, body = _read_answer(sock)
    status = int(head.split(b" ", 2)[1]) if head.startswith(b"HTTP/1.1 ") else None
    return RawAnswer(status, head, body, sent, time.monotonic() - started)
