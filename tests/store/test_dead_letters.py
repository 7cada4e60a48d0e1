"""Dead letters: a turn the store refuses is spooled (S3, or files under the data dir) and
replayed into the store by the next request that finds it healthy, each turn once."""

from __future__ import annotations

import errno
import logging
import os
import sqlite3
import subprocess
import sys
import time
from contextlib import closing
from pathlib import Path

import pytest

from aircoach.errors import StoreUnavailable
from aircoach.services import Services, build_dead_letters
from aircoach.settings import ROOT
from aircoach.store.spool import FileSpool
from aircoach.turn.dead_letters import QUARANTINE_AFTER_S, DeadLetters
from aircoach.turn.records import Turn
from tests.clock import FakeClock
from tests.helpers import app_with, asgi_client, chat, services_of
from tests.s3 import BUCKET, PREFIX, s3_settings
from tests.scripted_model import Script, ScriptedModels, text
from tests.sse import parse_sse

N = 3


def refuse_writes(path: Path) -> None:
    """A real backend failure: the database refuses writes, reads still work."""
    with closing(sqlite3.connect(path)) as db:
        db.execute(
            "CREATE TRIGGER refuse BEFORE INSERT ON chats BEGIN SELECT RAISE(ABORT, 'full'); END"
        )
        db.commit()


def accept_writes(path: Path) -> None:
    with closing(sqlite3.connect(path)) as db:
        db.execute("DROP TRIGGER refuse")
        db.commit()


def a_turn(turn_id: str, human: str = "domanda", user: str = "user-1") -> Turn:
    return Turn(
        userId=user,
        human=human,
        system="risposta",
        timestamp="2026-11-22T10:00:00+00:00",
        prompt_version="v1",
        model="scripted",
        thread_id=f"{user}:vv1",
        turn_id=turn_id,
    )


async def test_store_down_for_n_turns_then_up_every_turn_in_history_once(
    settings, auth, caplog: pytest.LogCaptureFixture
):
    script = Script([text(f"risposta {i}") for i in range(N + 2)])
    app = app_with(settings, models=ScriptedModels(script))
    spool = services_of(app).dead_letters.spool
    async with asgi_client(app) as client:
        await chat(client, auth(), "prima, salvata")
        refuse_writes(settings.sqlite_file)
        refused = []
        with caplog.at_level(logging.ERROR, logger="aircoach.turn.recorder"):
            for i in range(N):
                events = await chat(client, auth(), f"rifiutata {i}")
                assert [e["type"] for e in events][-2:] == ["error", "done"]
                assert events[-2]["code"] == "persist_failed"  # the client is still told
                refused.append(events[-1]["turn_id"])
        assert await spool.keys(100) == [f"{turn_id}.json" for turn_id in refused]
        print(f"\nstore refusing writes: {N} turns answered, persist_failed sent, spooled:")
        for record in caplog.records:
            if record.getMessage().startswith("persist_failed"):
                print("  log:", record.getMessage())

        # Still down: a history read replays nothing and loses nothing.
        page = (await client.get("/api/history", headers=auth())).json()
        assert [t["human"] for t in page["turns"]] == ["prima, salvata"]
        assert len(await spool.keys(100)) == N

        accept_writes(settings.sqlite_file)
        page = (await client.get("/api/history", headers=auth())).json()
        humans = [t["human"] for t in page["turns"]]
        print(f"store back; GET /api/history (replays the spool first): {humans}")
        assert humans == [f"rifiutata {i}" for i in reversed(range(N))] + ["prima, salvata"]
        assert [t["turn_id"] for t in page["turns"][:N]] == refused[::-1]
        assert {t["status"] for t in page["turns"]} == {"ok"}
        assert await spool.keys(100) == []

        # Replayed turns are history like any other: the next turn is shown them, once.
        events = await chat(client, auth(), "dopo")
        assert events[-1]["context_turns"] == N + 1
        page = (await client.get("/api/history", headers=auth())).json()
        ids = [t["turn_id"] for t in page["turns"]]
        assert len(ids) == len(set(ids)) == N + 2
        print(f"after one more turn: {len(ids)} turns in history, each once; spool empty")
    script.assert_used()


async def test_the_next_healthy_turn_replays_after_its_done(settings, auth):
    script = Script([text("uno"), text("due")])
    app = app_with(settings, models=ScriptedModels(script))
    async with asgi_client(app) as client:
        await services_of(app).chats.latest_turn_ids("user-1")  # creates the file
        refuse_writes(settings.sqlite_file)
        await chat(client, auth(), "rifiutata")
        accept_writes(settings.sqlite_file)
        events = await chat(client, auth(), "salvata")
        assert "error" not in {e["type"] for e in events}
        stored = await services_of(app).chats.history("user-1", limit=10, before=None)
        assert sorted(t.human for t in stored) == ["rifiutata", "salvata"]
        assert await services_of(app).dead_letters.spool.keys(10) == []


async def test_a_failed_turn_keeps_its_error_code_in_the_spool_and_once_replayed(settings, auth):
    """A turn that failed and that the store refused too: the spool keeps why it failed (the
    model's error, not the refusal that came after), and so does the store once it is back."""
    app = app_with(settings, models=ScriptedModels(Script([RuntimeError("upstream 500")])))
    services = services_of(app)
    async with asgi_client(app) as client:
        await services.chats.latest_turn_ids("user-1")  # creates the file
        refuse_writes(settings.sqlite_file)
        events = await chat(client, auth(), "rifiutata")
        codes = [e["code"] for e in events if e["type"] == "error"]
        assert codes == ["model_unavailable", "persist_failed"]
        turn_id = events[-1]["turn_id"]
        spooled = (await client.get(f"/api/turns/{turn_id}", headers=auth())).json()
        assert (spooled["status"], spooled["error_code"]) == ("error", "model_unavailable")
        accept_writes(settings.sqlite_file)
        page = (await client.get("/api/history", headers=auth())).json()
    assert await services.dead_letters.spool.keys(10) == []
    assert [(t["turn_id"], t["error_code"]) for t in page["turns"]] == [
        (turn_id, "model_unavailable")
    ]


async def test_replay_is_idempotent_by_turn_id(settings, data_dir):
    services = Services.build(settings)
    stored = a_turn("0001", "già salvata")
    await services.chats.append_turn(stored)
    spool = FileSpool(data_dir / "spool")
    # The store took it although the write looked failed (a timeout after the commit), and
    # two instances replay the same entry.
    await spool.put(stored.model_copy(update={"system": "copia"}))
    await spool.put(a_turn("0002", "persa"))
    first, second = DeadLetters(spool), DeadLetters(spool)
    assert await first.replay(services.chats) == 2
    await spool.put(a_turn("0002", "persa"))  # a second copy, as if spooled twice
    assert await second.replay(services.chats) == 1
    turns = await services.chats.history("user-1", limit=10, before=None)
    assert sorted((t.turn_id, t.system) for t in turns) == [
        ("0001", "risposta"),  # the first write stays
        ("0002", "risposta"),
    ]


async def test_a_spool_that_fails_too_says_the_turn_is_lost(
    settings, auth, data_dir, caplog: pytest.LogCaptureFixture
):
    blocked = data_dir / "not-a-folder"
    blocked.write_text("a file where the spool folder should be")
    app = app_with(
        settings,
        models=ScriptedModels(Script([text("persa")])),
        dead_letters=DeadLetters(FileSpool(blocked)),
    )
    async with asgi_client(app) as client:
        await services_of(app).chats.latest_turn_ids("user-1")  # creates the file
        refuse_writes(settings.sqlite_file)
        with caplog.at_level(logging.INFO, logger="aircoach"):
            events = await chat(client, auth(), "domanda")
    assert events[-2]["code"] == "persist_failed"
    messages = [r.getMessage() for r in caplog.records]
    assert any(m.startswith("dead-letter spool (file) refused turn") for m in messages)
    assert any(m.endswith("dead_letter=lost") for m in messages)
    (summary,) = [m for m in messages if m.startswith("turn ")]
    assert " stored=lost " in summary


async def test_a_long_backlog_drains_in_batches(settings, data_dir):
    services = Services.build(settings)
    spool = FileSpool(data_dir / "spool")
    for n in range(5):
        await spool.put(a_turn(f"{n:04d}"))
    dead_letters = DeadLetters(spool, batch=2)
    moved = [await dead_letters.replay(services.chats) for _ in range(4)]
    assert moved == [2, 2, 1, 0]  # the last call finds the spool empty and is not due again
    assert len(await services.chats.history("user-1", limit=10, before=None)) == 5


async def test_a_full_batch_of_entries_that_are_not_turns_does_not_block_the_replay(
    settings, data_dir, caplog: pytest.LogCaptureFixture
):
    """Twenty entries an older version spooled (no longer valid turns) sort first: they are
    moved to the quarantine, each logged once by key, and the valid turn behind them is
    replayed by the next look; no look reads more than a batch."""
    folder = data_dir / "spool"
    folder.mkdir()
    unreadable = [f"0000{n:02d}.json" for n in range(20)]
    for name in unreadable[:-1]:
        (folder / name).write_text('{"userId": "user-1", "human": "segreto dello studente"}')
    (folder / unreadable[-1]).write_text("{not json")
    spool = FileSpool(folder)
    await spool.put(a_turn("0001"))
    chats = Services.build(settings).chats
    dead_letters = DeadLetters(spool)
    with caplog.at_level(logging.INFO, logger="aircoach.turn.dead_letters"):
        assert await dead_letters.replay(chats) == 0  # one batch: the 20 unreadable ones
        assert await spool.keys(100) == ["0001.json"]
        assert dead_letters.due  # a full batch: more may wait
        assert await dead_letters.replay(chats) == 1
        assert not dead_letters.due
        assert await dead_letters.replay(chats) == 0
    assert [t.turn_id for t in await chats.history("user-1", limit=5, before=None)] == ["0001"]
    assert sorted(p.name for p in (folder / "quarantine").iterdir()) == unreadable
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert [m.split()[2] for m in warnings] == [repr(name) for name in unreadable]
    assert all("moved to the spool's quarantine" in m for m in warnings)
    assert "segreto" not in caplog.text  # the key, never the content
    health = dead_letters.health()
    assert (health["quarantined"], health["replayed"], health["pending"]) == (20, 1, 0)
    assert (health["status"], health["last_error"]) == ("ok", None)


async def test_an_s3_entry_that_is_not_a_turn_moves_to_the_quarantine_folder(s3, data_dir):
    settings = s3_settings(data_dir, deadletter_bucket=BUCKET, deadletter_prefix="deadletter/")
    services = Services.build(settings)
    spool = services.dead_letters.spool
    s3.client.put_object(Bucket=BUCKET, Key="deadletter/0000.json", Body=b'{"userId": "x"}')
    await spool.put(a_turn("r001"))  # sorts after "quarantine/": its objects take no slot
    dead_letters = DeadLetters(spool, batch=1)
    assert await dead_letters.replay(services.chats) == 0
    assert await dead_letters.replay(services.chats) == 1
    assert await dead_letters.replay(services.chats) == 0
    assert [k for k in s3.all_keys() if k.startswith("deadletter/")] == [
        "deadletter/quarantine/0000.json"
    ]
    assert await spool.keys(10) == []
    assert dead_letters.health()["quarantined"] == 1
    # Gone since a listing (another instance moved it): no entry, no error.
    assert await spool.get("0000.json") is None and await spool.find("r001") is None


def test_without_a_bucket_the_spool_is_a_folder_of_the_data_dir(settings):
    spool = build_dead_letters(settings).spool
    assert isinstance(spool, FileSpool) and spool.folder == settings.data_dir / "deadletter"


async def test_an_s3_spool_beside_the_docs_leaves_prompt_version_unchanged(s3, data_dir, auth):
    """DEADLETTER_BUCKET may be the docs bucket, in a folder outside PROMPT_PREFIX: a spooled
    turn never becomes a prompt doc, and the docs are never replayed as turns."""
    settings = s3_settings(data_dir, deadletter_bucket=BUCKET, deadletter_prefix="deadletter/")
    app = app_with(settings, models=ScriptedModels(Script([text("risposta")])))
    services = services_of(app)
    before = (await services.prompts.current()).version
    async with asgi_client(app) as client:
        await services.chats.latest_turn_ids("user-1")  # creates the SQLite file
        refuse_writes(settings.sqlite_file)
        events = await chat(client, auth(), "rifiutata")
        assert events[-2]["code"] == "persist_failed"
    keys = [k for k in s3.all_keys() if k.startswith("deadletter/")]
    assert keys == [f"deadletter/{events[-1]['turn_id']}.json"]
    spooled = events[-1]["turn_id"]
    assert (await services.dead_letters.find("user-1", spooled)).human == "rifiutata"
    assert await services.dead_letters.find("someone-else", spooled) is None
    assert await services.dead_letters.find("user-1", "not-spooled") is None
    assert not any(k.startswith(PREFIX + "deadletter") for k in s3.all_keys())

    snapshot, previous = await services.prompts.reload()
    assert snapshot.version == previous == before
    assert all(not doc.key.startswith("deadletter") for doc in snapshot.docs)

    accept_writes(settings.sqlite_file)
    assert await services.dead_letters.replay(services.chats) == 1
    assert [t.human for t in await services.chats.history("user-1", limit=5, before=None)] == [
        "rifiutata"
    ]
    assert [k for k in s3.all_keys() if k.startswith("deadletter/")] == []


async def test_a_retry_after_an_outage_gets_the_spooled_turn_not_a_409(settings, auth):
    """The store refused the first request's turn; its client retries with the same
    `client_message_id`. The turn waits in the spool (no healthy request replayed it yet):
    the retry gets it from there, while the store is still down and after it is back."""
    script = Script([text("la risposta intera")])
    app = app_with(settings, models=ScriptedModels(script))
    async with asgi_client(app) as client:
        await services_of(app).chats.latest_turn_ids("user-1")  # creates the file
        refuse_writes(settings.sqlite_file)
        first = await chat(client, auth(), "domanda", client_message_id="msg-1")
        assert first[-2]["code"] == "persist_failed"
        turn_id = first[-1]["turn_id"]
        retried = await client.post(
            "/api/stream_query",
            json={"query": "domanda", "client_message_id": "msg-1"},
            headers=auth(),
        )
        assert retried.status_code == 200, retried.text
        assert retried.headers["idempotent-replayed"] == "true"
        events = parse_sse(retried.text)
        assert events[-1]["turn_id"] == turn_id
        assert "".join(e["content"] for e in events if e["type"] == "agent_message") == (
            "la risposta intera"
        )
        accept_writes(settings.sqlite_file)
        again = await chat(client, auth(), "domanda", client_message_id="msg-1")
        assert again[-1]["turn_id"] == turn_id
    script.assert_used()  # the model answered once


async def test_a_deleted_conversation_does_not_come_back_from_the_spool(settings, auth):
    """Instance b spools a turn of conversation c1 while the store refuses writes; instance a,
    which looked at the spool a moment ago (a replay is not due there), then deletes c1. The
    delete moves every spooled turn into the store first, so nothing of c1 comes back when b
    replays its spool."""
    script = Script([text("uno"), text("due"), text("tre")])
    a = app_with(settings, models=ScriptedModels(script))
    b = app_with(settings, models=ScriptedModels(script))
    me = auth()
    async with asgi_client(a) as on_a, asgi_client(b) as on_b:
        await chat(on_a, me, "salvata", conversation_id="c1")  # a looks at the spool after it
        refuse_writes(settings.sqlite_file)
        events = await chat(on_b, me, "rifiutata", conversation_id="c1")
        assert events[-2]["code"] == "persist_failed"
        accept_writes(settings.sqlite_file)
        assert not services_of(a).dead_letters.due

        deleted = await on_a.delete("/api/conversations/c1", headers=me)
        assert deleted.status_code == 204, deleted.text
        assert await services_of(a).dead_letters.spool.keys(10) == []

        assert services_of(b).dead_letters.due  # b spooled: its next request replays
        listed = await on_b.get("/api/conversations", headers=me)
        history = await on_b.get("/api/history?conversation_id=c1", headers=me)
    assert listed.json()["conversations"] == []
    assert history.json()["turns"] == []


async def test_a_delete_takes_its_own_spooled_turns_and_waits_for_no_other(settings, auth):
    """The store refuses every new turn: the spooled turn of the conversation being deleted
    leaves the spool with it (it would come back later), another conversation's waits there
    for the store and does not hold the delete back."""
    script = Script([text("uno")])
    app = app_with(settings, models=ScriptedModels(script))
    me = auth()
    spool = services_of(app).dead_letters.spool
    async with asgi_client(app) as client:
        await chat(client, me, "salvata", conversation_id="c1")
        await spool.put(a_turn("0001", "in attesa"))
        await spool.put(a_turn("0002", "di c1").model_copy(update={"conversation_id": "c1"}))
        refuse_writes(settings.sqlite_file)
        deleted = await client.delete("/api/conversations/c1", headers=me)
        assert deleted.status_code == 204, deleted.text
        assert await spool.keys(10) == ["0001.json"]
        accept_writes(settings.sqlite_file)
        await services_of(app).dead_letters.drain(services_of(app).chats)
        c1 = await client.get("/api/history?conversation_id=c1", headers=me)
        assert c1.json()["turns"] == []
        turns = (await client.get("/api/history", headers=me)).json()["turns"]
    assert [t["human"] for t in turns] == ["in attesa"]  # another conversation's turn, stored


async def test_a_delete_is_refused_while_the_spool_cannot_be_read(settings, auth, data_dir):
    """An entry the spool cannot read (a folder where the file should be: the read fails
    with an OSError, as a PermissionError would) may be the conversation's: the delete is a
    503 and removes nothing; once it is gone, the delete goes on."""
    script = Script([text("uno")])
    app = app_with(settings, models=ScriptedModels(script))
    me = auth()
    async with asgi_client(app) as client:
        await chat(client, me, "salvata", conversation_id="c1")
        unreadable = data_dir / "deadletter" / "0001.json"
        unreadable.mkdir(parents=True)
        refused = await client.delete("/api/conversations/c1", headers=me)
        assert refused.status_code == 503, refused.text
        assert refused.json()["error"] == "store_unavailable"
        assert refused.headers["Retry-After"] == "5"
        history = await client.get("/api/history?conversation_id=c1", headers=me)
        assert [t["human"] for t in history.json()["turns"]] == ["salvata"]
        unreadable.rmdir()
        deleted = await client.delete("/api/conversations/c1", headers=me)
        assert deleted.status_code == 204, deleted.text


async def test_a_conversation_the_store_refused_all_of_is_deleted_from_the_spool(settings, auth):
    """Its only turn waits in the spool (the store refused it; the conversation list, read
    from the store, does not show it yet, `GET /api/turns/{id}` does): the delete removes it
    from the spool and is a 204, as for a stored conversation, not a 404; its event log goes
    with it. A second delete finds nothing: 404."""
    app = app_with(settings, models=ScriptedModels(Script([text("uno")])))
    me = auth()
    services = services_of(app)
    async with asgi_client(app) as client:
        await services.chats.latest_turn_ids("user-1")  # creates the file
        refuse_writes(settings.sqlite_file)
        events = await chat(client, me, "rifiutata", conversation_id="c1")
        assert events[-2]["code"] == "persist_failed"
        turn_id = events[-1]["turn_id"]
        listed = await client.get("/api/conversations", headers=me)
        assert listed.json()["conversations"] == []
        assert (await client.get(f"/api/turns/{turn_id}", headers=me)).status_code == 200
        deleted = await client.delete("/api/conversations/c1", headers=me)
        assert deleted.status_code == 204, deleted.text
        assert await services.dead_letters.spool.keys(10) == []
        assert (await client.get(f"/api/turns/{turn_id}/events", headers=me)).status_code == 404
        again = await client.delete("/api/conversations/c1", headers=me)
        assert again.status_code == 404, again.text


class _DeleteFailsOnce(FileSpool):
    """A spool whose delete of one entry fails once, as S3 may while the others succeed."""

    def __init__(self, folder: Path, failing: str | None):
        super().__init__(folder)
        self.failing: str | None = failing

    async def delete(self, key: str) -> None:
        if key == self.failing:
            self.failing = None
            raise OSError("the spool failed")
        await super().delete(key)


async def test_a_spool_delete_that_fails_half_way_is_finished_by_the_retry(settings, auth):
    """The store refuses writes; three turns of c1 and one of c2 wait in the spool. The
    delete of the second of c1's fails: 503, the first is gone already. The retry removes
    the other two and is a 204 (the store never held a turn of c1); c2's turn still waits."""
    spool = _DeleteFailsOnce(settings.data_dir / "deadletter", failing="0002.json")
    app = app_with(settings, dead_letters=DeadLetters(spool))
    me = auth()
    async with asgi_client(app) as client:
        await services_of(app).chats.latest_turn_ids("user-1")  # creates the file
        refuse_writes(settings.sqlite_file)
        for n, conversation in [(1, "c1"), (2, "c1"), (3, "c2"), (4, "c1")]:
            turn = a_turn(f"000{n}").model_copy(update={"conversation_id": conversation})
            await spool.put(turn)
        refused = await client.delete("/api/conversations/c1", headers=me)
        assert refused.status_code == 503, refused.text
        assert refused.json()["error"] == "store_unavailable"
        assert await spool.keys(10) == ["0002.json", "0003.json", "0004.json"]
        retried = await client.delete("/api/conversations/c1", headers=me)
        assert retried.status_code == 204, retried.text
        assert await spool.keys(10) == ["0003.json"]
        accept_writes(settings.sqlite_file)
        await services_of(app).dead_letters.drain(services_of(app).chats)
        c2 = (await client.get("/api/history?conversation_id=c2", headers=me)).json()["turns"]
    assert [t["turn_id"] for t in c2] == ["0003"]


async def test_a_delete_that_fails_half_way_through_the_spool_leaves_no_event_log(settings, auth):
    """Both turns of c1 wait in the spool (the store refused them); removing the second
    entry fails once. The first entry went with its event log (a log left behind, with no
    turn to find it by, outlived the delete for a day): a turn's log goes before its entry,
    so the retry, which finds only the second, leaves neither log."""
    spool = _DeleteFailsOnce(settings.data_dir / "deadletter", failing=None)
    app = app_with(
        settings,
        models=ScriptedModels(Script([text("uno"), text("due")])),
        dead_letters=DeadLetters(spool),
    )
    me = auth()
    async with asgi_client(app) as client:
        await services_of(app).chats.latest_turn_ids("user-1")  # creates the file
        refuse_writes(settings.sqlite_file)
        turn_ids = [
            (await chat(client, me, question, conversation_id="c1"))[-1]["turn_id"]
            for question in ("prima", "seconda")
        ]
        spool.failing = f"{turn_ids[1]}.json"
        refused = await client.delete("/api/conversations/c1", headers=me)
        assert refused.status_code == 503, refused.text
        retried = await client.delete("/api/conversations/c1", headers=me)
        assert retried.status_code == 204, retried.text
        for turn_id in turn_ids:
            logged = await client.get(f"/api/turns/{turn_id}/events", headers=me)
            assert logged.status_code == 404, turn_id
        assert await spool.keys(10) == []


async def test_a_drain_moves_at_most_its_limit_per_call(settings, data_dir):
    services = Services.build(settings)
    spool = FileSpool(data_dir / "spool")
    for n in range(25):
        await spool.put(a_turn(f"{n:04d}"))
    dead_letters = DeadLetters(spool, batch=10)
    with pytest.raises(StoreUnavailable):
        await dead_letters.drain(services.chats, limit=20)  # 20 moved, 5 wait
    assert len(await spool.keys(100)) == 5
    await dead_letters.drain(services.chats, limit=20)
    assert await spool.keys(100) == []
    turns = await services.chats.history("user-1", limit=100, before=None)
    assert len(turns) == 25 and dead_letters.replayed == 25


class _Raced(FileSpool):
    """Another instance replays the second entry between this one's listing and its read."""

    async def keys(self, limit: int) -> list[str]:
        listed = await super().keys(limit)
        if len(listed) > 1:
            await super().delete(listed[1])
        return listed


async def test_an_entry_another_instance_replayed_since_the_listing_is_skipped(settings, data_dir):
    services = Services.build(settings)
    spool = _Raced(data_dir / "spool")
    await spool.put(a_turn("0001", "uno"))
    await spool.put(a_turn("0002", "due"))
    await DeadLetters(spool).drain(services.chats)
    turns = await services.chats.history("user-1", limit=10, before=None)
    assert [t.human for t in turns] == ["uno"] and await spool.keys(10) == []


# A disk that fills up while a turn is spooled, in a process of its own: RLIMIT_FSIZE makes
# a write past 4 KiB fail with EFBIG, as ENOSPC does on a full /tmp.
_FULL_DISK_PUT = """
import asyncio, resource, signal, sys
from pathlib import Path
from aircoach.store.spool import FileSpool
from aircoach.turn.records import Turn

signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
resource.setrlimit(resource.RLIMIT_FSIZE, (4096, resource.getrlimit(resource.RLIMIT_FSIZE)[1]))
turn = Turn(userId="user-1", human="domanda", system="risposta " * 2000, timestamp="t",
            prompt_version="v1", model="scripted", thread_id="user-1:vv1", turn_id="0001")
try:
    asyncio.run(FileSpool(Path(sys.argv[1])).put(turn))
except OSError as exc:
    print(type(exc).__name__, exc.errno)
"""


@pytest.mark.integration  # a process of its own, about half a second
def test_a_spool_write_that_fails_half_way_leaves_no_partial_file(tmp_path: Path):
    folder = tmp_path / "spool"
    folder.mkdir()
    done = subprocess.run(
        [sys.executable, "-c", _FULL_DISK_PUT, str(folder)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["OSError", str(errno.EFBIG)]
    # No entry, and no hidden temp file holding half a question and answer, filling the disk.
    assert sorted(os.listdir(folder)) == []


def refuse_turn(path: Path, turn_id: str) -> None:
    """A real refusal of one turn (as MongoDB refuses a document over 16 MB): the database
    refuses that turn's insert every time and takes the others."""
    with closing(sqlite3.connect(path)) as db:
        db.execute(
            f"CREATE TRIGGER refuse_{turn_id} BEFORE INSERT ON chats WHEN NEW.turn_id = "
            f"'{turn_id}' BEGIN SELECT RAISE(ABORT, 'too big'); END"
        )
        db.commit()


def accept_turn(path: Path, turn_id: str) -> None:
    with closing(sqlite3.connect(path)) as db:
        db.execute(f"DROP TRIGGER refuse_{turn_id}")
        db.commit()


async def test_a_turn_the_store_always_refuses_is_quarantined_and_the_turns_behind_it_stored(
    settings, data_dir, caplog: pytest.LogCaptureFixture
):
    chats = Services.build(settings).chats
    await chats.latest_turn_ids("user-1")  # creates the file
    refuse_turn(settings.sqlite_file, "0001")
    folder = data_dir / "spool"
    spool = FileSpool(folder)
    await spool.put(a_turn("0001", "segreto dello studente"))
    for n in (2, 3):
        await spool.put(a_turn(f"000{n}"))
    clock = FakeClock()
    dead_letters = DeadLetters(spool, clock=clock)
    with caplog.at_level(logging.INFO, logger="aircoach.turn.dead_letters"):
        with pytest.raises(StoreUnavailable):  # 0001 waits: a store coming back flickers
            await dead_letters.drain(chats)
        stored = await chats.history("user-1", limit=10, before=None)
        assert sorted(t.turn_id for t in stored) == ["0002", "0003"]
        assert await spool.keys(10) == ["0001.json"] and dead_letters.quarantined == 0
        clock.advance(QUARANTINE_AFTER_S)  # refused all along while the store took turns
        await dead_letters.drain(chats)
    assert await spool.keys(10) == []
    assert [p.name for p in (folder / "quarantine").iterdir()] == ["0001.json"]
    (warning,) = [r.getMessage() for r in caplog.records if "'0001.json'" in r.getMessage()]
    assert warning.startswith("dead letter '0001.json' refused by the store for 30 s or more")
    assert "IntegrityError" in warning and "moved to the spool's quarantine" in warning
    assert "segreto" not in caplog.text
    health = dead_letters.health()
    assert (health["quarantined"], health["replayed"], health["pending"]) == (1, 2, 0)


async def test_a_store_that_is_down_quarantines_nothing(settings, data_dir):
    chats = Services.build(settings).chats
    await chats.latest_turn_ids("user-1")  # creates the file
    refuse_writes(settings.sqlite_file)
    folder = data_dir / "spool"
    spool = FileSpool(folder)
    for n in range(4):
        await spool.put(a_turn(f"000{n}"))
    dead_letters = DeadLetters(spool)
    for _ in range(3):
        with pytest.raises(StoreUnavailable):
            await dead_letters.drain(chats)
    assert len(await spool.keys(10)) == 4 and not (folder / "quarantine").exists()
    assert dead_letters.health()["quarantined"] == 0
    accept_writes(settings.sqlite_file)
    await dead_letters.drain(chats)
    assert len(await chats.history("user-1", limit=10, before=None)) == 4


async def test_several_refused_turns_first_do_not_block_the_turn_behind_them(settings, data_dir):
    """Two refused turns sort first: the first look cannot tell a refusal from an outage and
    stops; the next tries the turns that did not fail first, and the store's answer to those
    settles it."""
    chats = Services.build(settings).chats
    await chats.latest_turn_ids("user-1")
    refuse_turn(settings.sqlite_file, "0001")
    refuse_turn(settings.sqlite_file, "0002")
    spool = FileSpool(data_dir / "spool")
    for n in (1, 2, 3):
        await spool.put(a_turn(f"000{n}"))
    clock = FakeClock()
    dead_letters = DeadLetters(spool, clock=clock)
    with pytest.raises(StoreUnavailable):
        await dead_letters.drain(chats)
    with pytest.raises(StoreUnavailable):  # 0003 went in; the two refused ones wait
        await dead_letters.drain(chats)
    assert [t.turn_id for t in await chats.history("user-1", limit=10, before=None)] == ["0003"]
    clock.advance(QUARANTINE_AFTER_S)
    await dead_letters.drain(chats)
    assert await spool.keys(10) == [] and dead_letters.quarantined == 2


async def test_a_delete_is_not_refused_for_ever_by_a_turn_the_store_refuses(settings, auth):
    script = Script([text("uno")])
    clock = FakeClock()
    dead_letters = DeadLetters(build_dead_letters(settings).spool, clock=clock)
    app = app_with(settings, models=ScriptedModels(script), dead_letters=dead_letters)
    me = auth()
    async with asgi_client(app) as client:
        await chat(client, me, "salvata", conversation_id="c1")
        spool = dead_letters.spool
        refuse_turn(settings.sqlite_file, "0001")
        await spool.put(a_turn("0001", "troppo grande"))
        await spool.put(a_turn("0002", "in attesa"))
        deleted = await client.delete("/api/conversations/c1", headers=me)
        assert deleted.status_code == 204, deleted.text  # 0001 is not c1's: it does not wait
        assert await spool.keys(10) == ["0001.json"]  # 0001 may be a store coming back
        clock.advance(QUARANTINE_AFTER_S)  # it is not: refused while the store took 0002
        await dead_letters.drain(services_of(app).chats)
        turns = (await client.get("/api/history", headers=me)).json()["turns"]
    assert [t["human"] for t in turns] == ["in attesa"]
    assert await spool.keys(10) == [] and dead_letters.quarantined == 1


async def test_a_refused_turn_alone_in_the_spool_is_quarantined_after_a_stored_turn(
    settings, auth, data_dir
):
    """Nothing else in the spool shows the store is up; a chat turn it stores does."""
    clock = FakeClock()
    dead_letters = DeadLetters(build_dead_letters(settings).spool, clock=clock)
    app = app_with(
        settings, models=ScriptedModels(Script([text("uno")])), dead_letters=dead_letters
    )
    async with asgi_client(app) as client:
        await services_of(app).chats.latest_turn_ids("user-1")
        refuse_turn(settings.sqlite_file, "0001")
        await dead_letters.spool.put(a_turn("0001", "troppo grande"))
        missing = await client.delete("/api/conversations/c1", headers=auth())
        assert missing.status_code == 404, missing.text  # 0001 is not c1's: no wait
        assert await dead_letters.spool.keys(10) == ["0001.json"]  # an outage, for all it knows
        events = await chat(client, auth(), "salvata")
        assert events[-1]["type"] == "done" and "error" not in {e["type"] for e in events}
        assert await dead_letters.spool.keys(10) == ["0001.json"]  # refused for a moment only
        clock.advance(QUARANTINE_AFTER_S)
        drained = await client.delete("/api/conversations/c1", headers=auth())
        assert drained.status_code == 404, drained.text  # past the drain: no such conversation
    assert await dead_letters.spool.keys(10) == []
    assert dead_letters.quarantined == 1
    assert (data_dir / "deadletter" / "quarantine" / "0001.json").exists()


async def test_a_spool_entry_that_cannot_be_read_is_quarantined(settings, data_dir):
    """An entry the process cannot read (here a folder where the file should be: the read
    fails with an OSError, as a PermissionError would) while the others read fine."""
    chats = Services.build(settings).chats
    folder = data_dir / "spool"
    spool = FileSpool(folder)
    (folder / "0001.json").mkdir(parents=True)
    await spool.put(a_turn("0002"))
    clock = FakeClock()
    dead_letters = DeadLetters(spool, clock=clock)
    with pytest.raises(StoreUnavailable):
        await dead_letters.drain(chats)
    clock.advance(QUARANTINE_AFTER_S)
    await dead_letters.drain(chats)
    assert [t.turn_id for t in await chats.history("user-1", limit=10, before=None)] == ["0002"]
    assert await spool.keys(10) == []
    assert (folder / "quarantine" / "0001.json").is_dir()


async def test_an_s3_turn_the_store_refuses_is_quarantined_as_on_disk(s3, data_dir):
    settings = s3_settings(data_dir, deadletter_bucket=BUCKET, deadletter_prefix="deadletter/")
    services = Services.build(settings)
    await services.chats.latest_turn_ids("user-1")
    refuse_turn(settings.sqlite_file, "0001")
    spool = services.dead_letters.spool
    await spool.put(a_turn("0001", "troppo grande"))
    await spool.put(a_turn("0002"))
    clock = FakeClock()
    dead_letters = DeadLetters(spool, clock=clock)
    with pytest.raises(StoreUnavailable):
        await dead_letters.drain(services.chats)
    clock.advance(QUARANTINE_AFTER_S)
    await dead_letters.drain(services.chats)
    assert [k for k in s3.all_keys() if k.startswith("deadletter/")] == [
        "deadletter/quarantine/0001.json"
    ]
    stored = await services.chats.history("user-1", limit=10, before=None)
    assert [t.turn_id for t in stored] == ["0002"]


async def test_a_temp_file_left_by_a_dead_process_is_swept_after_an_hour(tmp_path: Path):
    """A process that died between the write and the rename left its temp file: a listing
    removes it once it is an hour old (a younger one may still be written)."""
    folder = tmp_path / "spool"
    folder.mkdir()
    old, fresh = folder / ".0001.json.41.tmp", folder / ".0002.json.42.tmp"
    old.write_text("{mezza domanda")
    fresh.write_text("{in scrittura")
    an_hour_and_a_bit_ago = time.time() - 3700
    os.utime(old, (an_hour_and_a_bit_ago, an_hour_and_a_bit_ago))
    (folder / "0003.json").write_text("{}")
    assert await FileSpool(folder).keys(10) == ["0003.json"]
    assert sorted(os.listdir(folder)) == [".0002.json.42.tmp", "0003.json"]


async def test_a_store_down_after_the_callers_turn_was_stored_quarantines_nothing(
    settings, data_dir
):
    """The replay after a chat turn's `done` takes the store as up (that turn was just stored);
    a store that goes down right then (a failover, a lost network) refuses every entry, twice
    each. That is an outage, not entries of their own fault: none is moved aside, and all of
    them reach the store once it is back."""
    chats = Services.build(settings).chats
    await chats.latest_turn_ids("user-1")  # creates the file
    spool = FileSpool(data_dir / "spool")
    for n in range(4):
        await spool.put(a_turn(f"000{n}"))
    refuse_writes(settings.sqlite_file)
    dead_letters = DeadLetters(spool)
    await dead_letters.replay(chats, store_is_up=True)
    assert dead_letters.quarantined == 0
    assert len(await spool.keys(10)) == 4
    accept_writes(settings.sqlite_file)
    await dead_letters.replay(chats, store_is_up=True)
    assert len(await chats.history("user-1", limit=10, before=None)) == 4
    assert await spool.keys(10) == []


async def test_a_refused_turn_last_in_the_spool_does_not_refuse_a_delete(settings, data_dir):
    """A good turn, then one the store always refuses: the drain moves the first; the second,
    with nothing behind it, waits until it has been refused for QUARANTINE_AFTER_S, then is
    moved aside and the drain goes through."""
    chats = Services.build(settings).chats
    await chats.latest_turn_ids("user-1")
    refuse_turn(settings.sqlite_file, "0002")
    spool = FileSpool(data_dir / "spool")
    for n in (1, 2):
        await spool.put(a_turn(f"000{n}"))
    clock = FakeClock()
    dead_letters = DeadLetters(spool, clock=clock)
    with pytest.raises(StoreUnavailable):
        await dead_letters.drain(chats)
    assert [t.turn_id for t in await chats.history("user-1", limit=10, before=None)] == ["0001"]
    clock.advance(QUARANTINE_AFTER_S)
    await dead_letters.drain(chats)
    assert await spool.keys(10) == [] and dead_letters.quarantined == 1


async def test_a_turn_refused_while_the_store_flickers_back_is_stored_not_moved_aside(
    settings, data_dir
):
    """A store coming back after a restart takes one write and refuses the next a moment
    later: the spooled turn refused twice right after the caller's own turn was stored was
    moved aside (out of the history, and its conversation's claim held until its lease
    ended). It waits and is stored at the next look."""
    chats = Services.build(settings).chats
    await chats.latest_turn_ids("user-1")
    spool = FileSpool(data_dir / "spool")
    await spool.put(a_turn("0001"))
    refuse_turn(settings.sqlite_file, "0001")  # refused for now, as by a flickering store
    clock = FakeClock()
    dead_letters = DeadLetters(spool, clock=clock)
    await dead_letters.replay(chats, store_is_up=True)  # after the caller's turn was stored
    assert dead_letters.quarantined == 0 and await spool.keys(10) == ["0001.json"]
    accept_turn(settings.sqlite_file, "0001")
    clock.advance(dead_letters.recheck_s)
    await dead_letters.replay(chats, store_is_up=True)
    assert [t.turn_id for t in await chats.history("user-1", limit=10, before=None)] == ["0001"]
    assert await spool.keys(10) == [] and dead_letters.quarantined == 0


class _Down:
    """A store that cannot be reached: every read and write fails, as during a restart."""

    def __getattr__(self, name: str):
        async def unreachable(*args: object, **kwargs: object) -> None:
            raise StoreUnavailable()

        return unreachable


async def test_a_turn_alone_in_the_spool_of_a_store_that_does_not_answer_waits(data_dir):
    spool = FileSpool(data_dir / "spool")
    await spool.put(a_turn("0001"))
    clock = FakeClock()
    dead_letters = DeadLetters(spool, clock=clock)
    for _ in range(3):
        with pytest.raises(StoreUnavailable):
            await dead_letters.drain(_Down())
        clock.advance(QUARANTINE_AFTER_S)
    assert await spool.keys(10) == ["0001.json"] and dead_letters.quarantined == 0


async def test_a_store_that_answers_reads_and_refuses_every_write_keeps_the_spool(
    settings, data_dir
):
    """A full disk or an exhausted quota: reads answer, every turn is refused. Two turns
    refused one after the other are an outage, however long it lasts: none is moved aside."""
    chats = Services.build(settings).chats
    await chats.latest_turn_ids("user-1")  # creates the file
    refuse_writes(settings.sqlite_file)
    spool = FileSpool(data_dir / "spool")
    for n in (1, 2):
        await spool.put(a_turn(f"000{n}"))
    clock = FakeClock()
    dead_letters = DeadLetters(spool, clock=clock)
    for _ in range(3):
        with pytest.raises(StoreUnavailable):
            await dead_letters.drain(chats)
        clock.advance(QUARANTINE_AFTER_S)
    assert len(await spool.keys(10)) == 2 and dead_letters.quarantined == 0
    accept_writes(settings.sqlite_file)
    await dead_letters.drain(chats)
    assert len(await chats.history("user-1", limit=10, before=None)) == 2
