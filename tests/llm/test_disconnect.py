"""A client that leaves mid-answer, through a real uvicorn server on 127.0.0.1: the turn goes on
to its end and is stored whole (the client can rejoin it, `GET /api/turns/{id}/events`); the
sending stops at once, on every ASGI server."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Iterator
from typing import Any

import anyio
import httpx
import pytest

from aircoach.services import build_stores
from tests.helpers import ObservedChats, app_with, served
from tests.llm.fakes import Reply, gemini_text

pytestmark = pytest.mark.integration

# Generous: every wait below ends as soon as what it waits for happens.
WAIT_S = 30.0
# The model hangs until the test releases it and never times out on its own, so a turn stored
# while it hangs was stored because the client left.
MODEL_TIMEOUT_S = 600.0


def stalled(reply: Reply) -> Reply:
    """`reply`, each chunk after the first held until the test releases the model."""
    return dataclasses.replace(reply, pace_s=MODEL_TIMEOUT_S)


@pytest.fixture
def server(gemini_settings) -> Iterator[tuple[str, ObservedChats]]:
    settings = gemini_settings(model_timeout_s=MODEL_TIMEOUT_S)
    chats = ObservedChats(build_stores(settings)[0])
    with served(app_with(settings, chats=chats)) as url:
        yield url, chats


def test_a_turn_goes_on_after_its_client_leaves_and_is_stored_whole(server, gemini_api, auth):
    url, store = server
    # The model streams the first piece, then stalls (the rest comes when the test says).
    gemini_api.script(stalled(gemini_text("Prima parte ", "e il resto.")))

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
    assert gemini_api.hanging.wait(WAIT_S)
    assert not store.stored.is_set()  # the turn waits for its model, not for its client
    gemini_api.release.set()  # the model goes on writing for nobody
    assert store.stored.wait(WAIT_S), "the turn was not stored"
    (turn,) = store.turns
    assert (turn.status, turn.system, turn.human) == (
        "ok",
        "Prima parte e il resto.",
        "Spiegami la virata",
    )
    assert turn.model == "gemini-2.5-flash"


async def test_disconnect_is_noticed_on_asgi_2_4_servers(gemini_settings, gemini_api, token):
    """ASGI 2.4 servers report a disconnect only by failing the next `send`, and Starlette then
    stops listening for it. The stream listens anyway: the sending stops when the client
    leaves (nothing more is sent to it), and the turn runs on to its end and is stored."""
    app = app_with(gemini_settings(model_timeout_s=MODEL_TIMEOUT_S))
    gemini_api.script(stalled(gemini_text("Prima parte ", "e il resto.")))
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

    sent_after_leaving = 0

    async def send(message: dict[str, Any]) -> None:
        nonlocal sent_after_leaving
        if left.is_set():
            sent_after_leaving += 1
            raise OSError("client disconnected")
        if message["type"] == "http.response.body" and b"agent_message" in message["body"]:
            sent.append(message["body"])
            left.set()

    async def model_resumes_once_the_client_left() -> None:
        await left.wait()
        await anyio.to_thread.run_sync(gemini_api.hanging.wait, WAIT_S)
        gemini_api.release.set()

    with anyio.fail_after(WAIT_S):
        async with anyio.create_task_group() as tg:
            tg.start_soon(model_resumes_once_the_client_left)
            await app(scope, receive, send)
    (turn,) = await app.state.services.chats.recent_turns("user-1", 5)
    assert (turn.status, turn.system) == ("ok", "Prima parte e il resto.")
    # The rest of the answer and `done` were never offered to the client that left.
    assert sent_after_leaving == 0
