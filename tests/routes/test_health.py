"""GET /api/health tells the truth about every dependency (token keys, store, prompt, model,
dead letters), still answers 200 while one fails, and never shows a secret."""

from __future__ import annotations

import json

import pytest

from aircoach.auth.auth0 import Auth0KeySource
from aircoach.auth.tokens import TokenVerifier
from aircoach.store.spool import FileSpool
from aircoach.turn.dead_letters import DeadLetters
from aircoach.turn.records import Turn
from tests.helpers import app_with, asgi_client, services_of
from tests.loopback import free_port
from tests.s3 import s3_settings
from tests.scripted_model import Script, ScriptedModels, text


async def test_a_healthy_laptop(client):
    body = (await client.get("/api/health")).json()
    assert body["status"] == "ok"
    assert body["auth"] == {"source": "dev-issuer", "status": "ok", "key_loaded": False}
    store = body["store"]
    assert (store["backend"], store["status"], store["error"]) == ("sqlite", "ok", None)
    assert body["prompt"]["status"] == "not_loaded"  # a cold instance: nothing asked yet
    assert body["model"] == {"provider": "offline", "name": None, "fallback": None}
    turn_log = body["turn_log"]
    assert (turn_log["backend"], turn_log["status"], turn_log["error"]) == ("sqlite", "ok", None)
    assert body["dead_letters"] == {
        "spool": "file",
        "status": "ok",
        "spooled": 0,
        "replayed": 0,
        "quarantined": 0,
        "pending": None,
        "last_error": None,
    }


async def test_a_store_that_cannot_be_opened_is_reported(settings, data_dir):
    (data_dir / "blocked").write_text("a file where a folder should be")
    broken = settings.model_copy(update={"sqlite_path": data_dir / "blocked" / "db.sqlite3"})
    async with asgi_client(app_with(broken)) as client:
        response = await client.get("/api/health")
    assert response.status_code == 200  # alive; the body says what fails
    body = response.json()
    assert body["status"] == "degraded"
    assert body["store"]["status"] == "unavailable" and body["store"]["error"] == "FileExistsError"


async def test_a_store_that_reads_but_refused_a_request_is_degraded_for_a_minute(settings, auth):
    """A full disk: every turn was a 503 `store_unavailable`, and health said `ok` (its probe
    is a read, which still worked)."""
    import sqlite3
    from contextlib import closing

    app = app_with(settings, models=ScriptedModels(Script([text("Ciao.")])))
    async with asgi_client(app) as client:
        first = await client.post(
            "/api/stream_query", json={"query": "Ciao", "client_message_id": "m-0"}, headers=auth()
        )
        assert first.status_code == 200 and first.headers["X-Turn-ID"]
        assert (await client.get("/api/health")).json()["store_refused"] is None
        with closing(sqlite3.connect(settings.sqlite_file)) as db:
            db.execute(
                "CREATE TRIGGER full BEFORE INSERT ON idempotency "
                "BEGIN SELECT RAISE(ABORT, 'database or disk is full'); END"
            )
            db.commit()
        body = {"query": "Ciao", "client_message_id": "m-1"}
        refused = await client.post("/api/stream_query", json=body, headers=auth())
        assert refused.status_code == 503 and refused.json()["error"] == "store_unavailable"
        health = (await client.get("/api/health")).json()
    assert health["status"] == "degraded"
    assert health["store"]["status"] == "ok"  # its read still works
    refusal = health["store_refused"]
    assert refusal["error"] == "IntegrityError" and 0 <= refusal["age_s"] < 60
    assert "disk" not in json.dumps(health)  # the class, not the text


async def test_a_turn_log_that_cannot_be_opened_is_reported(settings, data_dir, auth):
    """On SQLite the turn log is a file of its own: while it cannot be opened every chat turn
    is a 503, and health said `ok` (it read the chats' file only)."""
    chats = settings.sqlite_file
    chats.parent.mkdir(parents=True, exist_ok=True)
    chats.with_name(f"{chats.stem}-turns{chats.suffix}").mkdir()  # a folder, not a database
    async with asgi_client(app_with(settings)) as client:
        turn = await client.post("/api/stream_query", json={"query": "Ciao"}, headers=auth())
        body = (await client.get("/api/health")).json()
    assert turn.status_code == 503 and turn.json()["error"] == "store_unavailable"
    assert body["status"] == "degraded"
    assert body["store"]["status"] == "ok"  # the chats' file is fine
    turn_log = body["turn_log"]
    assert (turn_log["backend"], turn_log["status"]) == ("sqlite", "unavailable")
    assert turn_log["error"] == "OperationalError"


SECRETS = {
    "google_api_key": "sekrit-google-key",
    "openai_api_key": "sekrit-openai-key",
    "update_docs_secret": "sekrit-webhook",
    "tool_env": {"TOOL_KB_TOKEN": "sekrit-tool-token", "KB_SEARCH_URL": "http://kb.local"},
}


async def test_no_secret_in_the_health_answer(settings):
    configured = settings.model_copy(
        update={**SECRETS, "model_provider": "gemini", "model_fallback": "openai:gpt-4o-mini"}
    )
    async with asgi_client(app_with(configured)) as client:
        body = (await client.get("/api/health")).json()
    text = json.dumps(body)
    assert "sekrit" not in text
    assert body["model"] == {
        "provider": "gemini",
        "name": "gemini-2.5-flash",
        "fallback": "openai:gpt-4o-mini",
    }


@pytest.mark.integration
async def test_an_unreachable_mongodb_is_reported_without_its_password(settings):
    uri = f"mongodb://aircoach:sekrit-db-password@127.0.0.1:{free_port()}/?directConnection=true"
    down = settings.model_copy(update={"mongodb_uri": uri, "store_timeout_s": 0.5})
    async with asgi_client(app_with(down)) as client:
        body = (await client.get("/api/health")).json()
    assert body["status"] == "degraded" and body["store"]["backend"] == "mongodb"
    assert body["store"]["status"] == "unavailable" and body["store"]["error"]
    assert "sekrit" not in json.dumps(body)


async def test_auth0_key_cache_fresh_age_and_last_error(tenant, data_dir, clock):
    settings = tenant.settings(data_dir)
    keys = Auth0KeySource(settings, clock=clock)
    verifier = TokenVerifier(
        keys, issuer=tenant.issuer, audience=tenant.audience, cache_ttl_s=0, clock=clock
    )
    app = app_with(settings, verifier=verifier)
    headers = {"Authorization": f"Bearer {tenant.mint()}"}
    async with asgi_client(app) as client:
        cold = (await client.get("/api/health")).json()
        assert cold["auth"]["status"] == "not_loaded" and cold["status"] == "ok"
        assert (await client.get("/api/tools", headers=headers)).status_code == 200
        warm = (await client.get("/api/health")).json()["auth"]
        assert (warm["status"], warm["keys"], warm["fresh"], warm["last_error"]) == (
            "ok",
            1,
            True,
            None,
        )
        assert warm["age_s"] == 0

        tenant.down.add("jwks")
        clock.advance(keys.max_age_s + 5)  # due for a refresh, which fails
        assert (await client.get("/api/tools", headers=headers)).status_code == 200
        body = (await client.get("/api/health")).json()
    auth = body["auth"]
    assert (auth["status"], auth["keys"], auth["fresh"]) == ("degraded", 1, False)
    assert auth["age_s"] == keys.max_age_s + 5 and "503" in auth["last_error"]
    assert body["status"] == "degraded"


def a_turn(turn_id: str) -> Turn:
    return Turn(
        userId="user-1",
        human="domanda",
        system="risposta",
        timestamp="2026-11-22T10:00:00+00:00",
        prompt_version="v1",
        model="scripted",
        thread_id="user-1:vv1",
        turn_id=turn_id,
    )


async def test_a_spool_that_refuses_turns_is_degraded_and_named_by_class(settings, data_dir):
    """Turns the store refuses are being lost: health says so, without the spool's path."""
    folder = data_dir / "spool-behind-a-file"
    folder.write_text("a file where the spool folder should be")
    app = app_with(settings, dead_letters=DeadLetters(FileSpool(folder)))
    dead_letters = services_of(app).dead_letters
    async with asgi_client(app) as client:
        assert not await dead_letters.keep(a_turn("0001"))
        failing = (await client.get("/api/health")).json()
        folder.unlink()
        assert await dead_letters.keep(a_turn("0002"))
        healed = (await client.get("/api/health")).json()
    assert failing["status"] == "degraded"
    assert failing["dead_letters"]["status"] == "unavailable"
    assert failing["dead_letters"]["last_error"] in ("FileExistsError", "NotADirectoryError")
    assert str(data_dir) not in json.dumps(failing)
    assert (healed["status"], healed["dead_letters"]["status"]) == ("ok", "ok")
    assert healed["dead_letters"]["last_error"] == failing["dead_letters"]["last_error"]


async def test_an_unreachable_s3_spool_shows_neither_its_url_nor_its_bucket(aws_env, data_dir):
    settings = s3_settings(
        data_dir,
        prompt_bucket=None,
        deadletter_bucket="private-spool-bucket",
        aws_endpoint_url=f"http://127.0.0.1:{free_port()}",  # nothing listens: refused
    )
    app = app_with(settings)
    async with asgi_client(app) as client:
        assert not await services_of(app).dead_letters.keep(a_turn("0001"))
        body = (await client.get("/api/health")).json()
    assert body["status"] == "degraded"
    spool = body["dead_letters"]
    assert (spool["spool"], spool["status"]) == ("s3", "unavailable")
    assert spool["last_error"] == "EndpointConnectionError"
    assert "private-spool-bucket" not in json.dumps(body) and "127.0.0.1" not in json.dumps(body)


async def test_entries_moved_to_the_quarantine_are_counted(settings, data_dir, auth):
    folder = settings.deadletter_folder
    folder.mkdir(parents=True)
    (folder / "0000.json").write_text('{"userId": "user-1"}')
    async with asgi_client(app_with(settings)) as client:
        assert (await client.get("/api/history", headers=auth())).status_code == 200
        body = (await client.get("/api/health")).json()
    assert body["status"] == "ok"  # the spool works; the count asks an operator to look
    assert (body["dead_letters"]["quarantined"], body["dead_letters"]["pending"]) == (1, 0)
    assert (folder / "quarantine" / "0000.json").exists()


async def test_a_store_file_locked_by_another_process_is_a_timeout_not_a_hang(settings):
    """A new instance sets up its SQLite file at its first operation, and waits up to 30 s
    for a file another process holds locked. Health's read gives up after STORE_TIMEOUT_S
    (it hung for the 30 s: the store's calls waited for their thread whatever the caller).
    The set-up goes on in its thread and succeeds once the lock is gone."""
    import sqlite3

    path = settings.sqlite_file
    path.parent.mkdir(parents=True, exist_ok=True)
    holder = sqlite3.connect(path, isolation_level=None)
    holder.execute("BEGIN EXCLUSIVE")
    app = app_with(settings.model_copy(update={"store_timeout_s": 0.05}))
    try:
        async with asgi_client(app) as client:
            body = (await client.get("/api/health")).json()
    finally:
        holder.execute("ROLLBACK")
        holder.close()
    assert body["status"] == "degraded"
    assert (body["store"]["status"], body["store"]["error"]) == ("unavailable", "timeout")
    assert await services_of(app).chats.latest_turn_ids("user-1", 1) == []
