"""`serve`'s receipt deadline: a request must arrive whole within REQUEST_RECEIPT_TIMEOUT_S of
its first byte, however slowly it trickles; answering it may take as long as it takes."""

from __future__ import annotations

import asyncio
import json
import socket
import time
from collections.abc import Iterator
from urllib.parse import urlsplit

import httpx
import pytest
from fastapi import FastAPI

from aircoach.entry.server import MAX_HEADER_BYTES
from tests.helpers import served

pytestmark = pytest.mark.integration

DEADLINE_S = 1.0  # the server's; the test waits up to WAIT_S for it to act
WAIT_S = 30.0
# uvloop arms a timer from the time it cached at its iteration's start: a few ms early.
EARLY_S = 0.05


def tiny_app() -> FastAPI:
    app = FastAPI()

    @app.get("/ok")
    async def ok() -> str:
        return "ok"

    @app.get("/slow")
    async def slow() -> str:
        await asyncio.sleep(DEADLINE_S * 2)  # answering past the deadline is fine
        return "slow"

    @app.post("/echo")
    async def echo(payload: dict) -> dict:
        return payload

    return app


@pytest.fixture
def server() -> Iterator[tuple[str, int]]:
    with served(tiny_app(), receipt_timeout_s=DEADLINE_S) as url:
        parts = urlsplit(url)
        assert parts.hostname and parts.port
        yield parts.hostname, parts.port


def trickle(address: tuple[str, int], chunks: Iterator[bytes], pause_s: float = 0.1) -> bytes:
    """Send `chunks` one by one with a pause, until the server closes or answers; what it
    sent. Fails after WAIT_S: the server never acted."""
    with socket.create_connection(address) as sock:
        sock.settimeout(pause_s)
        answer = b""
        deadline = time.monotonic() + WAIT_S
        for chunk in chunks:
            assert time.monotonic() < deadline, "the server kept a trickling request open"
            try:
                sock.sendall(chunk)
            except (BrokenPipeError, ConnectionResetError):
                break
            try:
                data = sock.recv(65536)
            except TimeoutError:
                continue
            except ConnectionResetError:
                break
            if not data:
                break
            answer += data
        return answer


def header_bytes_forever() -> Iterator[bytes]:
    yield b"GET /ok HTTP/1.1\r\nHost: t\r\n"
    while True:
        yield b"X-A: b\r\n"


def body_bytes_forever() -> Iterator[bytes]:
    yield b"POST /echo HTTP/1.1\r\nHost: t\r\nContent-Type: application/json\r\n"
    yield b"Content-Length: 100000\r\n\r\n{"
    while True:
        yield b" "


def test_headers_trickling_past_the_deadline_get_408_and_a_close(server):
    started = time.monotonic()
    answer = trickle(server, header_bytes_forever())
    assert answer.startswith(b"HTTP/1.1 408 "), answer
    assert time.monotonic() - started >= DEADLINE_S - EARLY_S


def test_a_body_trickling_past_the_deadline_is_cut(server):
    answer = trickle(server, body_bytes_forever())
    assert b"200 OK" not in answer


def raw_answer(sock: socket.socket) -> bytes:
    """Everything the server writes before it closes the connection."""
    answer = b""
    while chunk := sock.recv(4096):
        answer += chunk
    return answer


def json_error(answer: bytes) -> tuple[dict[str, str], dict[str, str]]:
    """(headers, body) of a raw error: the API's error shape, with a request id (they were
    `text/plain` without one, against docs/security.md's "one error shape")."""
    head, _, body = answer.partition(b"\r\n\r\n")
    lines = head.decode().split("\r\n")[1:]
    headers = {k.lower(): v.strip() for k, _, v in (line.partition(":") for line in lines)}
    assert headers["content-type"] == "application/json", headers
    assert len(headers["x-request-id"]) == 32
    return headers, json.loads(body)


def test_a_connection_that_sends_nothing_is_closed(server):
    with socket.create_connection(server) as sock:
        sock.settimeout(WAIT_S)
        answer = raw_answer(sock)
    assert answer.startswith(b"HTTP/1.1 408 ")
    _, body = json_error(answer)
    assert body == {
        "error": "request_timeout",
        "message": "La richiesta non è arrivata per intero in tempo: inviala di nuovo.",
    }


def test_an_unfinished_head_over_the_limit_is_refused_at_once(server):
    # At most MAX_HEADER_BYTES of a request head whose end has not arrived are taken in.
    with socket.create_connection(server) as sock:
        sock.settimeout(WAIT_S)
        sock.sendall(b"GET /ok HTTP/1.1\r\nHost: t\r\nX-Big: " + b"x" * (MAX_HEADER_BYTES + 1))
        answer = raw_answer(sock)
    assert answer.startswith(b"HTTP/1.1 400 ")
    _, body = json_error(answer)
    assert body["error"] == "bad_request" and "16 KB" in body["message"]


def test_a_request_the_parser_cannot_read_gets_the_json_error(server):
    with socket.create_connection(server) as sock:
        sock.settimeout(WAIT_S)
        sock.sendall(b"GET /ok HTTP/1.1\r\nHost t\r\n\r\n")  # a header without its colon
        answer = raw_answer(sock)
    assert answer.startswith(b"HTTP/1.1 400 ")
    assert json_error(answer)[1]["error"] == "bad_request"


def test_a_head_over_the_limit_in_small_pieces_is_refused(server):
    def lines() -> Iterator[bytes]:
        yield b"GET /ok HTTP/1.1\r\nHost: t\r\n"
        while True:
            yield b"X-A: " + b"x" * 4000 + b"\r\n"

    assert trickle(server, lines(), pause_s=0.01).startswith(b"HTTP/1.1 400 ")


def then_forever(first: bytes, filler: bytes) -> Iterator[bytes]:
    yield first
    while True:
        yield filler


WHOLE = b"GET /ok HTTP/1.1\r\nHost: t\r\n\r\n"


@pytest.mark.parametrize(
    ("first", "filler"),
    [
        # a request pipelined behind a whole one, in the same read, then trickling headers
        (WHOLE + b"GET /ok HTTP/1.1\r\nHost: t\r\n", b"X-A: b\r\n"),
        # empty lines on the kept-alive connection after a whole request
        (WHOLE, b"\r\n"),
    ],
    ids=["pipelined", "empty-lines"],
)
def test_what_follows_a_whole_request_has_its_own_deadline(server, first, filler):
    started = time.monotonic()
    answer = trickle(server, then_forever(first, filler))
    assert answer.startswith(b"HTTP/1.1 200 ") and answer.count(b"HTTP/1.1 ") == 2
    assert answer.count(b"HTTP/1.1 408 ") == 1
    assert time.monotonic() - started >= DEADLINE_S - EARLY_S


def test_a_slow_answer_and_a_kept_alive_connection_are_not_cut(server):
    with httpx.Client(base_url=f"http://{server[0]}:{server[1]}", timeout=WAIT_S) as client:
        assert client.get("/slow").json() == "slow"
        assert client.get("/ok").json() == "ok"  # the same connection, after the deadline
        assert client.post("/echo", json={"a": 1}).json() == {"a": 1}
