"""Conversations (issue 32): one user's conversations on two instances (two apps with their
own process memory, sharing one store: SQLite, then MongoDB on nx-27017) each keep their own
history and memory; the one running turn is per conversation; listing and deleting."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Sequence
from dataclasses import dataclass
from typing import Any

import anyio
import httpx
import pytest
from langchain_core.messages import BaseMessage

from aircoach.errors import StoreUnavailable
from aircoach.services import build_turn_log
from aircoach.settings import Settings
from aircoach.turn.log import TurnLogStore
from aircoach.turn.records import Turn
from tests.helpers import app_with, asgi_client, chat, services_of
from tests.mongo_server import MongoServer, mongo_settings
from tests.scripted_model import Script, ScriptedModels, text

# A student's conversation played through the app: an integration module (docs/testing.md).
pytestmark = pytest.mark.integration


@dataclass
class Instance:
    client: httpx.AsyncClient
    script: Script
    app: Any

    async def ask(self, headers: dict[str, str], query: str, answer: str, **body: Any) -> str:
        self.script.replies.append(text(answer))
        events = await chat(self.client, headers, query, **body)
        assert events[-1]["type"] == "done" and events[-1]["status"] == "ok", events
        return str(events[-1]["turn_id"])

    def shown(self) -> str:
        """Everything the model was shown on its last call."""
        messages: list[BaseMessage] = self.script.calls[-1]
        return "\n".join(str(m.content) for m in messages)

    def history(self) -> str:
        """The turns the model was shown on its last call, without the system prompt (whose
        long-term memory section is the user's, across conversations)."""
        messages: list[BaseMessage] = self.script.calls[-1][1:]
        return "\n".join(str(m.content) for m in messages)


@pytest.fixture(params=["sqlite", "mongo"])
def shared_settings(request: pytest.FixtureRequest, settings: Settings) -> Settings:
    if request.param == "sqlite":
        return settings
    server: MongoServer = request.getfixturevalue("mongo_server")
    return mongo_settings(server, settings)


@pytest.fixture
async def instances(shared_settings: Settings) -> AsyncIterator[tuple[Instance, Instance]]:
    made = []
    for _ in range(2):
        script = Script([])
        app = app_with(shared_settings, models=ScriptedModels(script))
        made.append((app, script))
    (app_a, script_a), (app_b, script_b) = made
    async with asgi_client(app_a) as a, asgi_client(app_b) as b:
        yield Instance(a, script_a, app_a), Instance(b, script_b, app_b)


async def test_two_conversations_on_two_instances_keep_their_own_history_and_memory(
    instances: tuple[Instance, Instance], auth: Callable[..., dict[str, str]]
):
    a, b = instances
    me = auth()
    await a.ask(me, "Domanda alfa uno", "Risposta alfa uno", conversation_id="alfa")
    await b.ask(me, "Domanda beta uno", "Risposta beta uno", conversation_id="beta")
    await a.ask(me, "Domanda predefinita", "Risposta predefinita")

    await b.ask(me, "Domanda alfa due", "Risposta alfa due", conversation_id="alfa")
    shown = b.history()
    assert "Domanda alfa uno" in shown and "Risposta alfa uno" in shown
    assert "beta" not in shown and "predefinita" not in shown

    await a.ask(me, "Domanda beta due", "Risposta beta due", conversation_id="beta")
    shown = a.history()
    assert "Domanda beta uno" in shown and "Risposta beta uno" in shown
    assert "alfa" not in shown and "predefinita" not in shown

    # The default conversation (no id: today's clients) keeps its own history.
    await b.ask(me, "Altra domanda predefinita", "Altra risposta")
    shown = b.history()
    assert "Domanda predefinita" in shown and "alfa" not in shown and "beta" not in shown

    # Warm on A now (it answered alfa's first turn, B the second): A reseeds from the store.
    await a.ask(me, "Domanda alfa tre", "Risposta alfa tre", conversation_id="alfa")
    shown = a.history()
    assert "Risposta alfa uno" in shown and "Risposta alfa due" in shown
    assert "beta" not in shown

    page = (await a.client.get("/api/history?conversation_id=alfa", headers=me)).json()
    assert [t["human"] for t in page["turns"]] == [
        "Domanda alfa tre",
        "Domanda alfa due",
        "Domanda alfa uno",
    ]
    assert {t["conversation_id"] for t in page["turns"]} == {"alfa"}
    everything = (await b.client.get("/api/history", headers=me)).json()["turns"]
    assert len(everything) == 7  # without the filter: every conversation's turns, as before

    listed = (await b.client.get("/api/conversations", headers=me)).json()["conversations"]
    assert [(c["conversation_id"], c["first_question"], c["turns"]) for c in listed] == [
        ("alfa", "Domanda alfa uno", 3),
        ("beta", "Domanda beta uno", 2),
    ]
    assert listed[0]["last_activity"] > listed[1]["last_activity"]
    other = (await a.client.get("/api/conversations", headers=auth("user-2"))).json()
    assert other == {"conversations": [], "next_cursor": None}


async def test_deleting_a_conversation_removes_it_on_every_instance(
    instances: tuple[Instance, Instance], auth: Callable[..., dict[str, str]]
):
    a, b = instances
    me = auth()
    first = await a.ask(
        me, "Domanda alfa uno", "Risposta alfa uno", conversation_id="alfa", client_message_id="m1"
    )
    await a.ask(me, "Domanda beta uno", "Risposta beta uno", conversation_id="beta")
    services = services_of(a.app)
    assert await services.turn_log.read("user-1", first) != []

    # Another user cannot delete it; an unknown id is 404.
    assert (
        await b.client.delete("/api/conversations/alfa", headers=auth("user-2"))
    ).status_code == 404
    assert (await b.client.delete("/api/conversations/nessuna", headers=me)).status_code == 404

    response = await b.client.delete("/api/conversations/alfa", headers=me)
    assert response.status_code == 204, response.text
    assert (await b.client.delete("/api/conversations/alfa", headers=me)).status_code == 404
    page = (await a.client.get("/api/history?conversation_id=alfa", headers=me)).json()
    assert page["turns"] == []
    listed = (await a.client.get("/api/conversations", headers=me)).json()["conversations"]
    assert [c["conversation_id"] for c in listed] == ["beta"]
    assert await services.turn_log.read("user-1", first) == []  # its event log is gone

    # A (warm on alfa) starts it afresh: no memory of the deleted turns; the same message id
    # is a new message now (its idempotency record went with the conversation).
    await a.ask(
        me, "Domanda alfa nuova", "Risposta nuova", conversation_id="alfa", client_message_id="m1"
    )
    assert "Domanda alfa uno" not in a.shown() and "Risposta alfa uno" not in a.shown()
    await b.ask(me, "Domanda beta due", "Risposta beta due", conversation_id="beta")
    assert "Risposta beta uno" in b.shown()


async def test_one_running_turn_per_conversation(
    instances: tuple[Instance, Instance], auth: Callable[..., dict[str, str]]
):
    a, b = instances
    me = auth()
    turn_log = services_of(a.app).turn_log
    now = services_of(a.app).clock()
    # A turn of conversation alfa runs (on some instance): alfa is busy, beta and the default
    # conversation are not.
    assert (
        await turn_log.claim("user-1", "conversation:alfa", "t-alfa", now=now, expires_at=now + 30)
        is None
    )
    busy = await b.client.post(
        "/api/stream_query", json={"query": "ciao", "conversation_id": "alfa"}, headers=me
    )
    assert busy.status_code == 409 and busy.json()["turn_id"] == "t-alfa"
    await b.ask(me, "Domanda beta", "Risposta beta", conversation_id="beta")
    await a.ask(me, "Domanda predefinita", "Risposta predefinita")

    # Deleting alfa asks its running turn to stop and waits until it has let go.
    async def running_turn_stops() -> None:
        # The flag lives in the store, as for a turn on another instance: polled.
        while True:
            if await turn_log.cancel_requested("t-alfa"):
                break
            await anyio.sleep(0.05)
        await turn_log.release("user-1", "conversation:alfa", "t-alfa")

    async with anyio.create_task_group() as tg:
        tg.start_soon(running_turn_stops)
        response = await a.client.delete("/api/conversations/alfa", headers=me)
    assert response.status_code == 204, response.text
    assert await turn_log.holder("user-1", "conversation:alfa", now=now) is None


@pytest.mark.parametrize("conversation_id", ["", "a:b", "x" * 65, "con spazio", "ü"])
async def test_a_malformed_conversation_id_is_422(client, auth, conversation_id):
    response = await client.post(
        "/api/stream_query",
        json={"query": "ciao", "conversation_id": conversation_id},
        headers=auth(),
    )
    assert response.status_code == 422
    assert ["body", "conversation_id"] in [e["loc"] for e in response.json()["detail"]]


async def test_default_names_no_client_conversation(client, auth, script):
    """The default conversation's memory is tagged `default`: a client's conversation of that
    name would share it, and deleting it would erase the default conversation's memory."""
    script([text("Il QNH è la pressione al livello del mare.")])
    me = auth()
    await chat(client, me, "Studio per il VDS. Cos'è il QNH?")  # the default conversation
    memory = (await client.get("/api/memory", headers=me)).json()["items"]
    assert len(memory) == 2

    refused = [
        (
            "conversation_id",
            await client.post(
                "/api/stream_query",
                json={"query": "Come si legge un METAR?", "conversation_id": "default"},
                headers=me,
            ),
        ),
        ("conversation_id", await client.delete("/api/conversations/default", headers=me)),
        (
            "id",
            await client.post(
                "/api/chat",
                json={
                    "id": "default",
                    "messages": [
                        {"id": "m", "role": "user", "parts": [{"type": "text", "text": "x"}]}
                    ],
                },
                headers=me,
            ),
        ),
        ("chat_id", await client.get("/api/chat/default/stream", headers=me)),
    ]
    for field, response in refused:
        assert response.status_code == 422, response.text
        body = response.json()
        assert body["message"] == f"La richiesta non è valida: controlla il campo {field!r}."
        assert body["detail"][0]["type"] == "conversation_id_reserved"

    # Nothing was stored, nothing was forgotten.
    assert (await client.get("/api/memory", headers=me)).json()["items"] == memory
    turns = (await client.get("/api/history", headers=me)).json()["turns"]
    assert [t["human"] for t in turns] == ["Studio per il VDS. Cos'è il QNH?"]
    # Reading is no naming: on `GET /api/history` the reserved id asks for that conversation.
    default = await client.get("/api/history?conversation_id=default", headers=me)
    assert default.json()["turns"] == turns
    # An id that only starts like it is a client's id as any other.
    assert (await client.delete("/api/conversations/defaults", headers=me)).status_code == 404


def _stored(turn_id: str, conversation_id: str, question: str) -> Turn:
    return Turn(
        userId="user-1",
        human=question,
        system="Risposta",
        timestamp=f"2025-03-01T10:00:{int(turn_id[-2:]):02d}.000000+00:00",
        prompt_version="abc123",
        model="scripted",
        thread_id=f"user-1:{conversation_id}:vabc123",
        turn_id=turn_id,
        conversation_id=conversation_id,
    )


async def test_a_conversation_stored_as_default_before_the_id_was_reserved_is_the_default_one(
    shared_settings: Settings, auth: Callable[..., dict[str, str]]
):
    """A client may have named a conversation `default` before that id was reserved: no
    route takes the id now, so none shows it; its turns count as the default conversation's
    (as its long-term memory always did)."""
    app = app_with(shared_settings)
    chats = services_of(app).chats
    await chats.append_turn(_stored("18eb0000000000000000aa01", "alfa", "Domanda alfa"))
    legacy = _stored("18eb0000000000000000aa02", "default", "Domanda di prima")
    await chats.append_turn(legacy)  # the most recently active
    me = auth()
    async with asgi_client(app) as client:
        for limit in (1, 50):
            listed = (await client.get(f"/api/conversations?limit={limit}", headers=me)).json()[
                "conversations"
            ]
            assert [c["conversation_id"] for c in listed] == ["alfa"], limit
        # Every listed id opens.
        opened = await client.get("/api/history?conversation_id=alfa", headers=me)
        assert [t["human"] for t in opened.json()["turns"]] == ["Domanda alfa"]

        turns = (await client.get("/api/history", headers=me)).json()["turns"]
        assert [(t["human"], t["conversation_id"]) for t in turns] == [
            ("Domanda di prima", None),
            ("Domanda alfa", "alfa"),
        ]
        default = await client.get("/api/history?conversation_id=default", headers=me)
        assert [(t["human"], t["conversation_id"]) for t in default.json()["turns"]] == [
            ("Domanda di prima", None)
        ]
        one = (await client.get(f"/api/turns/{legacy.turn_id}", headers=me)).json()
        assert one["conversation_id"] is None


async def test_the_conversation_list_pages_with_a_cursor(
    shared_settings: Settings, auth: Callable[..., dict[str, str]]
):
    """A student with more conversations than a page (at most 100) reaches every one of
    them: `next_cursor` leads to the older ones, each listed once, also when a conversation
    seen already gets a new turn between the pages (it moves to the top, for the next look
    at the first page) and when one stored as `default` sits among them (never listed)."""
    app = app_with(shared_settings)
    chats = services_of(app).chats
    names = [f"c{n}" for n in range(7)]
    for n, name in enumerate(names):
        await chats.append_turn(_stored(f"18eb00000000000000000a{n:02d}", name, f"Domanda {n}"))
        await chats.append_turn(_stored(f"18eb00000000000000000b{n:02d}", name, "Ancora"))
    await chats.append_turn(_stored("18eb00000000000000000b03", "default", "Di prima"))
    mallory = _stored("18eb00000000000000000c09", "c9", "Di Mallory")
    await chats.append_turn(mallory.model_copy(update={"userId": "mallory"}))
    me = auth()
    async with asgi_client(app) as client:
        seen: list[str] = []
        cursor = None
        for page_number in range(10):
            params = {"limit": 2, **({"cursor": cursor} if cursor else {})}
            response = await client.get("/api/conversations", params=params, headers=me)
            assert response.status_code == 200, response.text
            page = response.json()
            seen += [c["conversation_id"] for c in page["conversations"]]
            assert all(c["turns"] == 2 for c in page["conversations"])
            cursor = page["next_cursor"]
            if page_number == 0:  # c6 gets a new turn: it was listed already
                await chats.append_turn(_stored("18eb00000000000000000d06", "c6", "Nuova"))
            if cursor is None:
                break
        assert seen == list(reversed(names))
        first = (await client.get("/api/conversations?limit=1", headers=me)).json()
        assert [c["conversation_id"] for c in first["conversations"]] == ["c6"]
        assert first["conversations"][0]["turns"] == 3

        everything = (await client.get("/api/conversations?limit=7", headers=me)).json()
        assert len(everything["conversations"]) == 7 and everything["next_cursor"] is None
        theirs = (await client.get("/api/conversations", headers=auth("mallory"))).json()
        assert [c["conversation_id"] for c in theirs["conversations"]] == ["c9"]
        forged = await client.get("/api/conversations?cursor=%21%21", headers=me)
        assert forged.status_code == 422 and forged.json()["detail"][0]["loc"] == [
            "query",
            "cursor",
        ]


class _ForgetFailsOnce:
    """The turn log, whose first `forget` fails as a store outage would."""

    def __init__(self, log: TurnLogStore):
        self.log = log
        self.failed = False

    def __getattr__(self, name: str) -> Any:
        return getattr(self.log, name)

    async def forget(self, user_id: str, turn_ids: Sequence[str]) -> None:
        if not self.failed:
            self.failed = True
            raise StoreUnavailable()
        await self.log.forget(user_id, turn_ids)


async def test_a_delete_whose_log_forget_fails_keeps_the_turns_for_its_retry(settings, auth):
    """The turn log fails while the delete removes the conversation's logs: 503 and both turns
    are still there; the retry removes them with their logs (it used to remove the turns
    first: the retry found none, a 404, and the logs outlived the delete for a day)."""
    log = _ForgetFailsOnce(build_turn_log(settings))
    app = app_with(
        settings, models=ScriptedModels(Script([text("uno"), text("due")])), turn_log=log
    )
    me = auth()
    async with asgi_client(app) as client:
        turn_ids = [
            (await chat(client, me, question, conversation_id="c1"))[-1]["turn_id"]
            for question in ("prima", "seconda")
        ]
        refused = await client.delete("/api/conversations/c1", headers=me)
        assert refused.status_code == 503, refused.text
        history = await client.get("/api/history?conversation_id=c1", headers=me)
        assert [t["turn_id"] for t in history.json()["turns"]] == turn_ids[::-1]
        retried = await client.delete("/api/conversations/c1", headers=me)
        assert retried.status_code == 204, retried.text
        for turn_id in turn_ids:
            logged = await client.get(f"/api/turns/{turn_id}/events", headers=me)
            assert logged.status_code == 404, turn_id
        history = await client.get("/api/history?conversation_id=c1", headers=me)
        assert history.json()["turns"] == []
