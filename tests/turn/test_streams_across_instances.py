"""Streams that survive phones (issue 30): two server processes share one store (SQLite, then
MongoDB on nx-27017), the model writes 40 words over about 4 s (a fake OpenAI-compatible
server on loopback). A client leaves after a few events and rejoins on the other instance; a
turn is cancelled from the other instance; a finished turn replays whole; another user sees
nothing of it."""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.llm.fakes import FakeModelServer, openai_text
from tests.load.harness import ServerProcess, two_servers
from tests.sse import parse_sse_ids

pytestmark = pytest.mark.integration

WAIT_S = 60.0  # for what should happen: generous, every wait ends as soon as it happens
WORDS = [f"parola{i} " for i in range(40)]
ANSWER = "".join(WORDS)


@pytest.fixture
def model() -> Iterator[FakeModelServer]:
    server = FakeModelServer().start()
    yield server
    server.stop()


@pytest.fixture(params=["sqlite", "mongo"])
def servers(
    request: pytest.FixtureRequest, tmp_path: Path, data_dir: Path, model: FakeModelServer
) -> Iterator[tuple[ServerProcess, ServerProcess]]:
    env = {
        "DATA_DIR": str(data_dir),
        "MODEL_PROVIDER": "openai",
        "MODEL_BASE_URL": f"{model.url}/v1",
        "OPENAI_API_KEY": "fake-key",
        "MODEL_NAME": "fake-llama",
        "MODEL_MAX_RETRIES": "0",
        "MODEL_TIMEOUT_S": "30",
        "GROUNDING_CAVEAT": "false",
    }
    mongo = request.getfixturevalue("mongo_server").uri if request.param == "mongo" else None
    with two_servers(tmp_path, env, mongo) as pair:
        try:
            yield pair
        finally:
            model.release.set()  # a reply held back must not keep a server from stopping


def read_events(response: httpx.Response, stop_after: int | None = None) -> list[tuple[int, Any]]:
    """The events of a streamed response, as (id, data); `stop_after` leaves the connection
    after that many events (the phone loses its signal)."""
    events: list[tuple[int, Any]] = []
    block: list[str] = []
    for line in response.iter_lines():
        if line:
            block.append(line)
            continue
        if block and not all(part.startswith(":") for part in block):
            events.extend(parse_sse_ids("\n".join(block) + "\n\n"))
            if stop_after is not None and len(events) >= stop_after:
                return events
        block = []
    return events


def text_of(events: list[tuple[int, Any]]) -> str:
    return "".join(e["content"] for _, e in events if e["type"] == "agent_message")


def stored(turn_id: str, url: str, headers: dict[str, str]) -> Any:
    response = httpx.get(f"{url}/api/turns/{turn_id}", headers=headers, timeout=WAIT_S)
    assert response.status_code == 200, response.text
    return response.json()


def test_leave_and_rejoin_on_the_other_instance_gets_the_whole_answer(servers, model, token):
    a, b = servers
    model.script(dataclasses.replace(openai_text(*WORDS), pace_s=0.1))
    headers = {"Authorization": f"Bearer {token('alice')}"}
    with (
        httpx.Client(base_url=a.url, timeout=WAIT_S) as client,
        client.stream(
            "POST", "/api/stream_query", json={"query": "Spiegami la portanza"}, headers=headers
        ) as response,
    ):
        assert response.status_code == 200
        turn_id = response.headers["x-turn-id"]
        first = read_events(response, stop_after=5)
    assert [n for n, _ in first] == [1, 2, 3, 4, 5]

    last_id = first[-1][0]
    with (
        httpx.Client(base_url=b.url, timeout=WAIT_S) as client,
        client.stream(
            "GET",
            f"/api/turns/{turn_id}/events",
            headers={**headers, "Last-Event-ID": str(last_id)},
        ) as response,
    ):
        assert response.status_code == 200, response.read()
        rest = read_events(response)
    ids = [n for n, _ in first + rest]
    assert ids == list(range(1, len(ids) + 1))  # no gap, no repeat, in order
    assert text_of(first + rest) == ANSWER
    assert rest[-1][1]["type"] == "done" and rest[-1][1]["status"] == "ok"
    turn = stored(turn_id, b.url, headers)
    assert turn["status"] == "ok" and turn["system"] == ANSWER

    # Finished: the whole turn replays, from the start, on either instance.
    replay = httpx.get(f"{a.url}/api/turns/{turn_id}/events", headers=headers, timeout=WAIT_S)
    assert [n for n, _ in parse_sse_ids(replay.text)] == ids
    assert text_of(parse_sse_ids(replay.text)) == ANSWER
    # ?last_event_id= for clients that cannot set headers.
    tail = httpx.get(
        f"{b.url}/api/turns/{turn_id}/events?last_event_id={ids[-2]}",
        headers=headers,
        timeout=WAIT_S,
    )
    assert [n for n, _ in parse_sse_ids(tail.text)] == ids[-1:]

    # Another user sees nothing of it.
    eve = {"Authorization": f"Bearer {token('eve')}"}
    assert httpx.get(f"{b.url}/api/turns/{turn_id}/events", headers=eve).status_code == 404
    assert httpx.post(f"{b.url}/api/turns/{turn_id}/cancel", headers=eve).status_code == 404
    # A finished turn cannot be cancelled.
    finished = httpx.post(f"{b.url}/api/turns/{turn_id}/cancel", headers=headers)
    assert finished.status_code == 409 and finished.json()["error"] == "turn_finished"


def test_a_turn_whose_client_left_is_stored_whole(servers, model, token):
    a, b = servers
    model.script(dataclasses.replace(openai_text(*WORDS), pace_s=0.05))
    headers = {"Authorization": f"Bearer {token('alice')}"}
    with (
        httpx.Client(base_url=a.url, timeout=WAIT_S) as client,
        client.stream(
            "POST", "/api/stream_query", json={"query": "Spiegami la portanza"}, headers=headers
        ) as response,
    ):
        turn_id = response.headers["x-turn-id"]
        read_events(response, stop_after=3)
    # Follow it to its end on the other instance, then read the stored turn.
    with (
        httpx.Client(base_url=b.url, timeout=WAIT_S) as client,
        client.stream("GET", f"/api/turns/{turn_id}/events", headers=headers) as response,
    ):
        events = read_events(response)
    assert text_of(events) == ANSWER
    turn = stored(turn_id, a.url, headers)
    assert (turn["status"], turn["system"]) == ("ok", ANSWER)


def test_cancel_from_the_other_instance_ends_the_stream_and_keeps_the_part(servers, model, token):
    a, b = servers
    model.script(dataclasses.replace(openai_text(*WORDS), hang_after=6))
    headers = {"Authorization": f"Bearer {token('alice')}"}
    with (
        httpx.Client(base_url=a.url, timeout=WAIT_S) as client,
        client.stream(
            "POST", "/api/stream_query", json={"query": "Spiegami la portanza"}, headers=headers
        ) as response,
    ):
        turn_id = response.headers["x-turn-id"]
        lines = response.iter_lines()
        assert model.hanging.wait(WAIT_S)  # the model stalls half-way
        # A second message while this one runs: 409 with the running turn's id.
        busy = httpx.post(
            f"{b.url}/api/stream_query", json={"query": "altra"}, headers=headers, timeout=WAIT_S
        )
        assert busy.status_code == 409 and busy.json()["error"] == "turn_in_progress"
        assert busy.json()["turn_id"] == turn_id
        cancelled_at = time.monotonic()
        cancel = httpx.post(f"{b.url}/api/turns/{turn_id}/cancel", headers=headers)
        assert cancel.status_code == 202, cancel.text
        body = "\n".join(lines)
    ended_in = time.monotonic() - cancelled_at
    events = parse_sse_ids(body + "\n\n")
    assert events[-1][1]["type"] == "done" and events[-1][1]["status"] == "cancelled"
    partial = text_of(events)
    assert partial and partial != ANSWER and ANSWER.startswith(partial)
    turn = stored(turn_id, b.url, headers)
    assert turn["status"] == "interrupted" and turn["system"] == partial
    print(f"cancelled from the other instance: the stream ended {ended_in:.2f} s later")
