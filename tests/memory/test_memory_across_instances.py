"""Long-term memory and conversations across two server processes sharing one store (SQLite,
then MongoDB on nx-27017), on the offline model: what one instance keeps, the other lists,
shows the model and forgets; one user's conversations keep their own history and memory on
both, and a conversation deleted on one is gone on the other."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from aircoach.memory.service import FORGOTTEN
from tests.load.harness import ServerProcess, two_servers
from tests.sse import parse_sse

pytestmark = pytest.mark.integration

WAIT_S = 60.0  # for what should succeed: every call returns as soon as it is done


@pytest.fixture(params=["sqlite", "mongo"])
def servers(
    request: pytest.FixtureRequest, tmp_path: Path, data_dir: Path
) -> Iterator[tuple[ServerProcess, ServerProcess]]:
    env = {"DATA_DIR": str(data_dir), "MODEL_PROVIDER": "offline"}
    mongo = request.getfixturevalue("mongo_server").uri if request.param == "mongo" else None
    with two_servers(tmp_path, env, mongo) as pair:
        yield pair


def ask(
    server: ServerProcess, headers: dict[str, str], query: str, **body: Any
) -> list[dict[str, Any]]:
    response = httpx.post(
        f"{server.url}/api/stream_query",
        json={"query": query, **body},
        headers=headers,
        timeout=WAIT_S,
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


def get(server: ServerProcess, headers: dict[str, str], path: str) -> Any:
    response = httpx.get(f"{server.url}{path}", headers=headers, timeout=WAIT_S)
    assert response.status_code == 200, response.text
    return response.json()


def test_two_conversations_of_one_user_on_two_processes(servers, token):
    a, b = servers
    alice = {"Authorization": f"Bearer {token('alice')}"}
    metar = "Studio per il VDS e faccio fatica con la meteo. Come si legge un METAR?"
    assert ask(a, alice, metar, conversation_id="alfa")[-1]["context_turns"] == 0
    assert ask(b, alice, "ho l'esame a marzo", conversation_id="beta")[-1]["context_turns"] == 0
    # B goes on with alfa from the store: A's turn is its history, beta's is not.
    assert ask(b, alice, "Cos'è il QNH?", conversation_id="alfa")[-1]["context_turns"] == 1
    assert ask(a, alice, "e la visibilità?", conversation_id="beta")[-1]["context_turns"] == 1

    history = get(a, alice, "/api/history?conversation_id=alfa")["turns"]
    assert [t["human"] for t in history] == ["Cos'è il QNH?", metar]
    listed_ = get(a, alice, "/api/conversations")["conversations"]
    assert [(c["conversation_id"], c["first_question"], c["turns"]) for c in listed_] == [
        ("beta", "ho l'esame a marzo", 2),
        ("alfa", metar, 2),
    ]
    kept = {(i["conversation_id"], i["kind"]) for i in listed(b, alice)}
    assert {("alfa", "goal"), ("alfa", "difficulty"), ("beta", "exam")} <= kept

    # Deleted on B: A lists none of it, and a new turn of alfa on A starts with no history.
    gone = httpx.delete(f"{b.url}/api/conversations/alfa", headers=alice, timeout=WAIT_S)
    assert gone.status_code == 204, gone.text
    again = httpx.delete(f"{a.url}/api/conversations/alfa", headers=alice, timeout=WAIT_S)
    assert again.status_code == 404
    assert get(a, alice, "/api/history?conversation_id=alfa")["turns"] == []
    assert [c["conversation_id"] for c in get(a, alice, "/api/conversations")["conversations"]] == [
        "beta"
    ]
    assert {i["conversation_id"] for i in listed(a, alice)} == {"beta"}
    assert ask(a, alice, "Cos'è il QNH?", conversation_id="alfa")[-1]["context_turns"] == 0
    assert ask(b, alice, "e il QFE?", conversation_id="beta")[-1]["context_turns"] == 2
