"""A client that leaves mid-answer, through a real uvicorn server on 127.0.0.1: the partial
answer is stored with status "interrupted" before the request task ends."""

from __future__ import annotations

import json
import socket
import threading
import time
from collections.abc import Iterator
from typing import Any

import anyio
import httpx
import pytest
import uvicorn

from aircoach.app import create_app
from aircoach.models import Turn
from tests.llm.fakes import gemini_text

pytestmark = pytest.mark.integration

WAIT_S = 5.0


class _SignallingStore:
    """The app's chat store, plus a thread-safe signal when a turn is stored (the server runs
    its own event loop in another thread)."""

    def __init__(self, inner: Any):
        self.inner = inner
        self.stored = threading.Event()
        self.turns: list[Turn] = []

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    async def append_turn(self, turn: Turn) -> None:
        await self.inner.append_turn(turn)
        self.turns.append(turn)
        self.stored.set()


@pytest.fixture
def served(gemini_settings) -> Iterator[tuple[str, _SignallingStore]]:
    app = create_app(gemini_settings(model_timeout_s=WAIT_S))
    store = _SignallingStore(app.state.runtime.chats)
    app.state.runtime.chats = store
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    server = uvicorn.Server(
        uvicorn.Config(app, lifespan="off", log_level="warning", timeout_graceful_shutdown=1)
    )
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    while not server.started:
        assert thread.is_alive(), "uvicorn did not start"
        threading.Event().wait(0.01)
    host, port = sock.getsockname()
    yield f"http://{host}:{port}", store
    server.should_exit = True
    thread.join(WAIT_S)
    sock.close()


def test_client_leaving_mid_answer_stores_the_partial_answer(served, gemini_api, auth):
    url, store = served
    # The model streams the first piece, then stalls (the rest would come much later).
    gemini_api.script(gemini_text("Prima parte ", "e il resto.", hang_after=1))

    with (
        httpx.Client(base_url=url, timeout=WAIT_S) as client,
        client.stream(
            "POST", "/api/stream_query", json={"query": "Spiegami la virata"}, headers=auth()
        ) as response,
    ):
        assert response.status_code == 200
        for line in response.iter_lines():
            if line.startswith("data: "):
                assert json.loads(line[len("data: ") :]) == {
                    "type": "agent_message",
                    "content": "Prima parte ",
                }
                break
        # Leaving the block closes the connection with the answer half-way.
        assert not store.stored.is_set()

    left = time.perf_counter()
    assert store.stored.wait(WAIT_S), "the interrupted turn was not stored"
    # Stored on the disconnect itself, not when the stalled model would have timed out.
    assert time.perf_counter() - left < WAIT_S / 2
    (turn,) = store.turns
    assert (turn.status, turn.system, turn.human) == (
        "interrupted",
        "Prima parte ",
        "Spiegami la virata",
    )
    assert turn.model == "gemini-2.5-flash"
    # The model request was cancelled with the turn, not left running in the background.
    gemini_api.release.set()
    assert gemini_api.client_left.wait(WAIT_S)


async def test_disconnect_is_noticed_on_asgi_2_4_servers(gemini_settings, gemini_api, token):
    """ASGI 2.4 servers report a disconnect only by failing the next `send`, and Starlette then
    stops listening for it: with a stalled model that next send could be minutes away. The
    stream listens anyway, so the turn ends (and is stored) when the client leaves."""
    app = create_app(gemini_settings(model_timeout_s=WAIT_S))
    gemini_api.script(gemini_text("Prima parte ", "e il resto.", hang_after=1))
    left = anyio.Event()
    sent: list[bytes] = []
    body = json.dumps({"query": "Spiegami la virata"}).encode()
    scope = {
        "type": "http",
        "asgi": {"version": "3.0", "spec_version": "2.4"},
        "http_version": "1.1",
        "method": "POST",
        "scheme": "http",
        "path": "/api/stream_query",
        "raw_path": b"/api/stream_query",
        "query_string": b"",
        "root_path": "",
        "headers": [
            (b"host", b"t"),
            (b"content-type", b"application/json"),
            (b"authorization", f"Bearer {token()}".encode()),
        ],
        "client": ("127.0.0.1", 1),
        "server": ("127.0.0.1", 80),
    }
    requested = False

    async def receive() -> dict[str, Any]:
        nonlocal requested
        if not requested:
            requested = True
            return {"type": "http.request", "body": body, "more_body": False}
        await left.wait()
        return {"type": "http.disconnect"}

    async def send(message: dict[str, Any]) -> None:
        if left.is_set():
            raise OSError("client disconnected")
        if message["type"] == "http.response.body" and b"agent_message" in message["body"]:
            sent.append(message["body"])
            left.set()

    with anyio.fail_after(WAIT_S / 2):
        await app(scope, receive, send)
    (turn,) = await app.state.runtime.chats.recent_turns("user-1", 5)
    assert (turn.status, turn.system) == ("interrupted", "Prima parte ")
    gemini_api.release.set()
