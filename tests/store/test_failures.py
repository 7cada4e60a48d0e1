"""A failing store never loses a turn silently: 503 before the stream when history cannot be
read, a `persist_failed` event (and a dead letter) when the answer cannot be stored; recovery
when it returns. The dead letters themselves: tests/store/test_dead_letters.py."""

from __future__ import annotations

import logging
import re
import sqlite3
import time
from contextlib import closing

import pytest

from tests.helpers import app_with, asgi_client, chat
from tests.mongo_server import MongoServer, mongo_settings
from tests.scripted_model import Script, ScriptedModels, text
from tests.sse import parse_sse


@pytest.mark.integration
async def test_mongodb_stopped_mid_run_gives_503_then_recovers(
    settings, auth, restartable_mongo: MongoServer
):
    # The first use of a cold database (connection, indexes, the quiz bank) under the default
    # timeout; then a short one, so that the stopped server is noticed quickly.
    cold = mongo_settings(restartable_mongo, settings)
    warm = app_with(cold).state.services
    await warm.quiz_service()
    await warm.chats.latest_turn_ids("nobody")
    await warm.chats.aclose()
    script = Script([text("prima"), text("seconda")])
    app = app_with(cold.model_copy(update={"store_timeout_s": 2.0}), models=ScriptedModels(script))
    async with asgi_client(app) as c:
        assert (await chat(c, auth(), "domanda uno"))[-1]["context_turns"] == 0

        restartable_mongo.stop()
        response = await c.post("/api/stream_query", json={"query": "ci sei?"}, headers=auth())
        assert response.status_code == 503
        assert response.headers["content-type"] == "application/json"
        assert response.json()["error"] == "store_unavailable"
        assert response.headers["retry-after"] == "5"  # a clear answer says when to retry
        history = await c.get("/api/history", headers=auth())
        assert history.status_code == 503 and history.json()["error"] == "store_unavailable"

        restartable_mongo.start()  # same port, same database file
        # The driver rediscovers the server within its heartbeat (>= 0.5 s); until then a
        # request may still get the 503, never a hang or a 500.
        deadline = time.monotonic() + 60
        while True:
            response = await c.post(
                "/api/stream_query", json={"query": "domanda due"}, headers=auth()
            )
            if response.status_code == 200 or time.monotonic() > deadline:
                break
            assert response.status_code == 503 and response.json()["error"] == "store_unavailable"
        assert response.status_code == 200, response.text
        events = parse_sse(response.text)
        assert events[-1]["context_turns"] == 1
        assert [t.text for t in script.calls[-1][1:]] == ["domanda uno", "prima", "domanda due"]
        page = (await c.get("/api/history", headers=auth())).json()
        assert [t["human"] for t in page["turns"]] == ["domanda due", "domanda uno"]


async def test_a_turn_that_cannot_be_stored_says_so_before_done(
    settings, app, client, auth, script, caplog: pytest.LogCaptureFixture
):
    script([text("risposta salvata"), text("risposta persa"), text("terza")])
    await chat(client, auth(), "domanda uno")
    # A real backend failure: the database refuses writes, reads still work.
    with closing(sqlite3.connect(settings.sqlite_file)) as db:
        db.execute(
            "CREATE TRIGGER refuse BEFORE INSERT ON chats BEGIN SELECT RAISE(ABORT, 'full'); END"
        )
        db.commit()

    with caplog.at_level(logging.ERROR, logger="aircoach.turn.recorder"):
        events = await chat(client, auth(), "domanda due")
    assert [e["type"] for e in events][-2:] == ["error", "done"]
    assert "".join(e["content"] for e in events if e["type"] == "agent_message") == (
        "risposta persa"
    )
    error, done = events[-2:]
    assert error["code"] == "persist_failed" and error["message"]
    (record,) = [r for r in caplog.records if "persist_failed" in r.getMessage()]
    assert re.search(
        rf"turn_id={done['turn_id']} user='user-1' content_sha256=[0-9a-f]{{16}} "
        r"dead_letter=file$",
        record.getMessage(),
    )

    with closing(sqlite3.connect(settings.sqlite_file)) as db:
        db.execute("DROP TRIGGER refuse")
        db.commit()
    # Memory does not pretend the refused turn was stored: the next turn sees only what the
    # store holds; after its `done` the dead letter is replayed into the store.
    events = await chat(client, auth(), "domanda tre")
    assert events[-1]["context_turns"] == 1
    history = (await client.get("/api/history", headers=auth())).json()["turns"]
    assert [t["human"] for t in history] == ["domanda tre", "domanda due", "domanda uno"]


async def test_an_sqlite_call_waits_for_a_write_lock_at_most_store_timeout_s(settings):
    """SQLite's wait for another connection's write lock is STORE_TIMEOUT_S (it was 5 s
    whatever the setting): then the call fails as a store failure, and works again once the
    lock is gone."""
    from aircoach.errors import StoreUnavailable
    from aircoach.services import open_stores
    from tests.store.test_contract import make_turn

    chats = open_stores(settings.model_copy(update={"store_timeout_s": 0.05})).chats
    await chats.append_turn(make_turn("u", 1))  # the file made (its set-up waits on its own)
    with closing(sqlite3.connect(settings.sqlite_file, isolation_level=None)) as other:
        other.execute("BEGIN IMMEDIATE")  # another writer holds the file until we roll back
        started = time.monotonic()
        with pytest.raises(StoreUnavailable):
            await chats.append_turn(make_turn("u", 2))
        waited = time.monotonic() - started
        other.execute("ROLLBACK")
    assert waited < 4.0  # far above 0.05 s, far below the 5 s it used to wait
    await chats.append_turn(make_turn("u", 2))
    assert [t.human for t in await chats.recent_turns("u", 5)] == ["domanda 1", "domanda 2"]


@pytest.mark.integration  # waits out the driver's server selection twice (about 1 s)
async def test_after_a_timeout_mongodb_operations_fail_at_once_for_store_timeout_s(settings):
    """A server that does not answer costs one operation STORE_TIMEOUT_S; the operations after
    it (a turn makes a dozen) fail at once until that time has passed, then one tries again.
    Nothing listens on the port: the driver's server selection times out."""
    from aircoach.errors import StoreUnavailable
    from aircoach.store.mongo import MongoClients, MongoConnection
    from tests.loopback import free_port

    now = [1000.0]
    configured = settings.model_copy(
        update={"mongodb_uri": f"mongodb://127.0.0.1:{free_port()}", "store_timeout_s": 0.2}
    )
    clients = MongoClients(configured, clock=lambda: now[0])
    connection = MongoConnection(configured, clients=clients, create_indexes=_no_indexes)
    tried = 0

    async def count(collection):
        nonlocal tried
        tried += 1
        return await collection.find_one({})

    with pytest.raises(StoreUnavailable):
        await connection.run("chats", count)
    assert (tried, clients.unreachable()) == (1, True)
    for _ in range(3):
        with pytest.raises(StoreUnavailable):
            await connection.run("chats", count)
    assert tried == 1  # failed at once, the server not tried again
    now[0] += 0.3
    assert not clients.unreachable()
    with pytest.raises(StoreUnavailable):
        await connection.run("chats", count)
    assert tried == 2  # tried again after STORE_TIMEOUT_S
    await clients.close()


async def _no_indexes(db) -> None:
    return None


@pytest.mark.integration  # waits out the deadline's margin (about five seconds), twice
@pytest.mark.parametrize("on_cancel", ["cancelled", "driver_error"])
async def test_a_mongodb_operation_the_driver_never_ends_is_cancelled_and_its_client_replaced(
    settings, caplog, on_cancel
):
    """The last line of defence behind the driver's `timeoutMS`: an operation that never ends
    (here one that waits on nothing) is cancelled, its request gets `StoreUnavailable`, and the
    next operation runs on a new client. The driver's own operation, once cancelled, may end in
    an error of its own (PyMongo 4.20 on Python 3.11: `RuntimeError: Lock is not acquired`):
    that is the same outcome, never a 500."""
    import anyio

    from aircoach.errors import StoreUnavailable
    from aircoach.store.mongo import MongoConnection
    from tests.loopback import free_port

    configured = settings.model_copy(
        update={"mongodb_uri": f"mongodb://127.0.0.1:{free_port()}", "store_timeout_s": 0.01}
    )
    connection = MongoConnection(configured, create_indexes=_no_indexes)
    jammed = connection.clients.current()

    async def never_ends(collection) -> None:
        assert collection.database.client is jammed
        try:
            await anyio.Event().wait()
        except anyio.get_cancelled_exc_class():
            if on_cancel == "driver_error":
                raise RuntimeError("Lock is not acquired") from None
            raise

    with (
        caplog.at_level(logging.WARNING, logger="aircoach.store.mongo"),
        pytest.raises(StoreUnavailable),
        anyio.fail_after(60),  # without the deadline: a hang, that fails here
    ):
        await connection.run("chats", never_ends)
    assert "MongoDB chats: an operation the driver did not end in 5.02s" in caplog.text
    assert connection.clients.current() is not jammed

    async def fails(collection) -> None:
        raise RuntimeError("a bug of ours")

    with pytest.raises(RuntimeError, match="a bug of ours"):  # before the deadline: a 500
        await connection.run("chats", fails)
    await connection.close()


async def test_an_error_inside_the_driver_that_is_not_its_own_replaces_the_client(settings, caplog):
    """PyMongo 4.20 on Python 3.11, in a MongoDB restart under load: `RuntimeError: Lock is not
    acquired` from its topology lock, before any deadline. The request gets `StoreUnavailable`
    (a 503, not a 500) and the next operation a new client, since that lock stays broken."""
    from pymongo._asyncio_lock import Lock

    from aircoach.errors import StoreUnavailable
    from aircoach.store.mongo import MongoConnection
    from tests.loopback import free_port

    configured = settings.model_copy(
        update={"mongodb_uri": f"mongodb://127.0.0.1:{free_port()}", "store_timeout_s": 5.0}
    )
    connection = MongoConnection(configured, create_indexes=_no_indexes)
    broken = connection.clients.current()

    async def releases_a_free_lock(collection) -> None:
        Lock().release()  # the driver's code raises it, as it did under load

    with (
        caplog.at_level(logging.WARNING, logger="aircoach.store.mongo"),
        pytest.raises(StoreUnavailable),
    ):
        await connection.run("chats", releases_a_free_lock)
    assert "MongoDB chats: the driver failed (RuntimeError('Lock is not acquired'))" in caplog.text
    assert connection.clients.current() is not broken
    await connection.close()


async def test_a_document_too_large_fails_alone_and_keeps_the_client(settings, caplog):
    """A turn over MongoDB's 16 MB (or that BSON cannot encode) is refused by the driver before
    it is sent: that says nothing about the connection. Its client, the process's one pool,
    was replaced on every try (each retry of the spooled turn dropped every connection)."""
    from pymongo.message import _raise_document_too_large

    from aircoach.errors import StoreUnavailable
    from aircoach.store.mongo import MongoConnection
    from tests.loopback import free_port

    configured = settings.model_copy(update={"mongodb_uri": f"mongodb://127.0.0.1:{free_port()}"})
    connection = MongoConnection(configured, create_indexes=_no_indexes)
    client = connection.clients.current()

    async def too_large(collection) -> None:
        _raise_document_too_large("insert", 17_000_000, 16_777_216)

    with (
        caplog.at_level(logging.WARNING, logger="aircoach.store.mongo"),
        pytest.raises(StoreUnavailable),
    ):
        await connection.run("chats", too_large)
    assert "MongoDB chats: a document was refused (DocumentTooLarge: BSON document too" in (
        caplog.text
    )
    assert connection.clients.current() is client
    await connection.close()


async def test_a_document_bson_cannot_encode_is_not_quoted_in_the_log(settings, caplog):
    """A value BSON cannot encode (a lone surrogate, which an HTTP tool's JSON may carry) is
    refused with an error that holds the whole string: a turn's question, answer or tool data,
    up to megabytes, perhaps a password the student pasted. The log names the error's class."""
    from bson.codec_options import DEFAULT_CODEC_OPTIONS
    from pymongo.message import _op_msg

    from aircoach.errors import StoreUnavailable
    from aircoach.store.mongo import MongoConnection
    from tests.loopback import free_port

    configured = settings.model_copy(update={"mongodb_uri": f"mongodb://127.0.0.1:{free_port()}"})
    connection = MongoConnection(configured, create_indexes=_no_indexes)
    client = connection.clients.current()
    document = {"human": "la mia password è segreto123 " + "x" * 1000 + "\ud800"}

    async def unencodable(collection) -> None:
        command = {"insert": "chats", "$db": "aircoach", "documents": [document]}
        _op_msg(0, command, "aircoach", None, DEFAULT_CODEC_OPTIONS)

    with (
        caplog.at_level(logging.WARNING, logger="aircoach.store.mongo"),
        pytest.raises(StoreUnavailable),
    ):
        await connection.run("chats", unencodable)
    assert "MongoDB chats: a document was refused (UnicodeEncodeError)" in caplog.text
    assert "segreto123" not in caplog.text and "xxxxxxxxxx" not in caplog.text
    assert connection.clients.current() is client
    await connection.close()


async def test_a_driver_error_quoting_a_value_reaches_the_log_bounded(settings, caplog):
    """An error of the driver's own code is logged with its message (it says what failed),
    but one that quotes a value (a field of a turn) puts at most 200 characters of it there."""
    from pymongo.common import validate_boolean

    from aircoach.errors import StoreUnavailable
    from aircoach.store.mongo import MongoConnection
    from tests.loopback import free_port

    configured = settings.model_copy(update={"mongodb_uri": f"mongodb://127.0.0.1:{free_port()}"})
    connection = MongoConnection(configured, create_indexes=_no_indexes)

    async def quotes_a_value(collection) -> None:
        validate_boolean("flag", "domanda dello studente " * 500)  # a TypeError quoting it

    with (
        caplog.at_level(logging.WARNING, logger="aircoach.store.mongo"),
        pytest.raises(StoreUnavailable),
    ):
        await connection.run("chats", quotes_a_value)
    assert "MongoDB chats: the driver failed (TypeError(" in caplog.text
    assert caplog.text.count("domanda dello studente") < 10
    await connection.close()


async def test_a_cancelled_caller_waits_for_its_mongodb_operation_to_end(settings):
    """A store operation is never cancelled from outside: PyMongo on Python 3.11 swallows a
    cancellation now and then, and an operation stopped halfway may leave half a write.
    The caller's cancellation comes once the operation has ended."""
    import anyio

    from aircoach.store.mongo import MongoConnection
    from tests.loopback import free_port

    configured = settings.model_copy(update={"mongodb_uri": f"mongodb://127.0.0.1:{free_port()}"})
    connection = MongoConnection(configured, create_indexes=_no_indexes)
    started, release = anyio.Event(), anyio.Event()
    ended = []

    async def op(collection) -> None:
        started.set()
        await release.wait()
        ended.append("op")

    async with anyio.create_task_group() as tg:
        tg.start_soon(connection.run, "chats", op)
        await started.wait()
        tg.cancel_scope.cancel()  # the caller leaves while the operation is in flight
        release.set()
    assert ended == ["op"]
    await connection.close()
