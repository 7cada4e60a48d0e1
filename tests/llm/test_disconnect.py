"""A client that leaves mid-answer, through a real uvicorn server on 127.0.0.1: the partial
answer is stored with status "interrupted" before the request task ends."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import anyio
import httpx
import pytest

from aircoach.services import build_stores
from tests.helpers import ObservedChats, app_with, served
from tests.llm.fakes import gemini_text

pytestmark = pytest.mark.integration

# Generous: every wait below ends as soon as what it waits for happens.
WAIT_S = 30.0
# The model hangs until the test releases it and never times out on its own, so a turn stored
# while it hangs was stored because the client left.
MODEL_TIMEOUT_S = 600.0


@pytest.fixture
def server(gemini_settings) -> Iterator[tuple[str, ObservedChats]]:
    settings = gemini_settings(model_timeout_s=MODEL_TIMEOUT_S)
    chats = ObservedChats(build_stores(settings)[0])
    with served(app_with(settings, chats=chats)) as url:
        yield url, chats


def test_client_leaving_mid_answer_stores_the_partial_answer(server, gemini_api, auth):
    url, store = server
    # The model streams the first piece, then stalls (the rest would come much later).
    gemini_api.script(gemini_text("Prima parte ", "e il resto.", hang_after=1))

    with (
        httpx.Client(base_url=url, timeout=WAIT_S) as client,
        client.stream(
            "POST", "/api/stream_query", json={"query": "Spiegami la virata"}, headers=auth()
        ) as response,
    ):
        assert response.status_code == 200
        # Held until the block ends: a line iterator dropped half-way closes the connection
        # (httpcore closes an unfinished stream when its generator is closed).
        lines = response.iter_lines()
        first = next(line for line in lines if line.startswith("data: "))
        assert json.loads(first[len("data: ") :]) == {
            "type": "agent_message",
            "content": "Prima parte ",
        }
        # Leaving the block closes the connection with the answer half-way.
        assert not store.stored.is_set()

    assert store.stored.wait(WAIT_S), "the interrupted turn was not stored"
    # Stored on the disconnect itself: the model is still hanging (and never times out).
    assert not gemini_api.release.is_set()
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
    app = app_with(gemini_settings(model_timeout_s=MODEL_TIMEOUT_S))
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

    with anyio.fail_after(WAIT_S):
        await app(scope, receive, send)
    (turn,) = await app.state.services.chats.recent_turns("user-1", 5)
    assert not gemini_api.release.is_set()  # stored while the model still hangs
    assert (turn.status, turn.system) == ("interrupted", "Prima parte ")
    gemini_api.release.set()
