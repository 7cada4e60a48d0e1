"""Long-term memory across two server processes sharing one store (SQLite, then MongoDB on
nx-27017), on the offline model: what one instance keeps, the other lists, shows the model
and forgets."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from aircoach.memory.service import FORGOTTEN
from tests.load.harness import ServerProcess
from tests.mongo_server import MongoServer
from tests.sse import parse_sse

pytestmark = pytest.mark.integration

WAIT_S = 60.0  # for what should succeed: every call returns as soon as it is done


@pytest.fixture(params=["sqlite", "mongo"])
def servers(
    request: pytest.FixtureRequest, tmp_path: Path, data_dir: Path
) -> Iterator[tuple[ServerProcess, ServerProcess]]:
    env = {
        "DATA_DIR": str(data_dir),
        "MODEL_PROVIDER": "offline",
        "AUTH0_DOMAIN": "",
        "PROMPT_BUCKET": "",
        "MONGODB_URI": "",
    }
    if request.param == "mongo":
        mongo: MongoServer = request.getfixturevalue("mongo_server")
        env |= {"MONGODB_URI": mongo.uri, "MONGODB_DB": f"t{time.time_ns():x}"}
    a = ServerProcess(tmp_path / "a", env).start()
    b = ServerProcess(tmp_path / "b", env)
    try:
        b.start()
        yield a, b
    finally:
        a.stop()
        b.stop()


def ask(server: ServerProcess, headers: dict[str, str], query: str) -> list[dict[str, Any]]:
    response = httpx.post(
        f"{server.url}/api/stream_query", json={"query": query}, headers=headers, timeout=WAIT_S
    )
    assert response.status_code == 200, response.text
    events = parse_sse(response.text)
    assert events[-1]["type"] == "done" and events[-1]["status"] == "ok"
    return events


def listed(server: ServerProcess, headers: dict[str, str]) -> list[dict[str, Any]]:
    response = httpx.get(f"{server.url}/api/memory", headers=headers, timeout=WAIT_S)
    assert response.status_code == 200, response.text
    return response.json()["items"]


def test_one_instance_remembers_the_other_lists_and_forgets(servers, token):
    a, b = servers
    alice = {"Authorization": f"Bearer {token('alice')}"}
    bob = {"Authorization": f"Bearer {token('bob')}"}
    ask(a, alice, "Studio per il VDS e faccio fatica con la meteo. Come si legge un METAR?")
    ask(a, bob, "ho l'esame a marzo")
    items = listed(b, alice)
    assert [(i["kind"], i["text"]) for i in items] == [
        ("goal", "Studia per: VDS"),
        ("difficulty", "Fa fatica con: meteo"),
        (
            "topic",
            "Ha chiesto: Studio per il VDS e faccio fatica con la meteo. Come si legge un METAR?",
        ),
    ]
    assert [i["kind"] for i in listed(a, bob)] == ["exam", "topic"]
    # Another user's item is a 404 on either instance, and stays.
    gone = httpx.delete(f"{a.url}/api/memory/{items[0]['id']}", headers=bob, timeout=WAIT_S)
    assert gone.status_code == 404
    assert len(listed(b, alice)) == 3
    # Forgotten through the chat on B: A lists nothing, Bob keeps his.
    events = ask(b, alice, "dimentica quello che ti ho detto")
    assert "".join(e["content"] for e in events if e["type"] == "agent_message") == FORGOTTEN
    assert listed(a, alice) == []
    assert len(listed(b, bob)) == 2
