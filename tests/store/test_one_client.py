"""One MongoDB client (one connection pool) per process: the chat, quiz, task and guard
stores that `Services.build` wires share it, each group creating its own indexes."""

from __future__ import annotations

import time

import pytest

from aircoach.services import Services
from aircoach.store import mongo
from aircoach.tasks.records import Contact
from aircoach.turn.records import Turn
from tests.mongo_server import mongo_settings


@pytest.fixture
def clients_made(monkeypatch: pytest.MonkeyPatch) -> list[object]:
    made: list[object] = []
    real = mongo.AsyncMongoClient

    def counted(*args: object, **kwargs: object) -> object:
        client = real(*args, **kwargs)
        made.append(client)
        return client

    monkeypatch.setattr(mongo, "AsyncMongoClient", counted)
    return made


async def test_every_mongo_store_shares_one_client(mongo_server, settings, clients_made):
    services = Services.build(mongo_settings(mongo_server, settings))
    turn = Turn(
        userId="u",
        human="ciao",
        system="ciao!",
        timestamp="2026-01-01T00:00:00+00:00",
        prompt_version="v",
        model="offline",
        thread_id="u:vv",
        turn_id="t-one-client",
    )
    await services.chats.append_turn(turn)
    assert await services.quiz.count() >= 0
    anna = Contact(email="anna@example.it", name="Anna")
    assert await services.task_stores.contacts.upsert_contacts([anna]) == 1
    assert await services.guards.quotas.hit(
        "u", "w", limit=5, now=time.time(), expires_at=time.time() + 60
    )
    assert await services.chats.get_turn("u", "t-one-client") == turn
    assert await services.task_stores.contacts.find_contact("email:anna@example.it") == anna
    assert len(clients_made) == 1
    await clients_made[0].close()  # type: ignore[attr-defined]
