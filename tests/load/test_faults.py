"""Faults injected while a real server (`python -m aircoach serve` in a subprocess, on
127.0.0.1) is under load, one at a time: the store, the prompt source, the JWKS, the model, a
tool. Each run: 128 turns from 16 users at concurrency 16, the fault injected after the 40th
answer. Whatever breaks, the server stays up, every request gets a full answer or a clear
error, and every turn a client was told is done is in the store."""

from __future__ import annotations

import shutil
import time
from collections import Counter
from collections.abc import Callable, Sequence
from functools import cache
from pathlib import Path

import anyio
import httpx
import pytest
from pymongo import MongoClient

from aircoach.quiz.bank import seed_demo_questions
from aircoach.services import build_stores
from aircoach.settings import ROOT, Settings
from tests.fake_auth0 import FakeTenant, rsa_key
from tests.llm.fakes import FakeModelServer, Reply, gemini_text
from tests.load.harness import (
    REQUEST_TIMEOUT_S,
    Outcome,
    check_clear,
    check_stored,
    figures,
    run_load,
    send_turn,
    sqlite_turns,
)
from tests.loopback import free_port
from tests.mongo_server import MongoServer
from tests.s3 import BUCKET, PREFIX, REGION, Bucket, MotoServer
from tests.tools.conftest import fast, shipped_tools, write_tools
from tests.tools.fake_service import FakeToolService
from tests.tools.fake_service import Reply as ToolReply

pytestmark = [pytest.mark.load, pytest.mark.integration]

USERS = 16
TURNS_PER_USER = 8
CONCURRENCY = 16
FAULT_AT = 40  # answers before the fault is injected
QUERY = "Cos'è lo stallo?"


def _plan(query: str = QUERY, users: int = USERS, turns: int = TURNS_PER_USER):
    return [(f"u{i:02d}", [f"[u{i:02d} #{n}] {query}" for n in range(turns)]) for i in range(users)]


def _at(n: int, action: Callable[[], object]):
    """An `after` hook that runs the blocking `action` in a worker thread once, after the
    n-th answer (the client's event loop keeps serving the other users meanwhile)."""

    async def hook(done: int) -> None:
        if done == n:
            await anyio.to_thread.run_sync(action)

    return hook


def _hooks(*hooks):
    async def run(done: int) -> None:
        for hook in hooks:
            await hook(done)

    return run


def _report(label: str, outcomes: Sequence[Outcome], elapsed: float) -> None:
    kinds = Counter((o.status, *o.error_codes) if o.error_codes else (o.status,) for o in outcomes)
    print(f"\n{figures(label, outcomes, elapsed)}\n  outcomes: {dict(kinds)}")


async def _warm_mongodb(uri: str, db: str) -> None:
    """Create the indexes and load the quiz bank, as the app's first requests would."""
    settings = Settings(_env_file=None, mongodb_uri=uri, mongodb_db=db, store_timeout_s=60)
    chats, quiz = build_stores(settings)
    await seed_demo_questions(quiz)
    await chats.latest_turn_ids("nobody")
    await chats.aclose()  # type: ignore[attr-defined]


async def _healthy(url: str) -> dict:
    async with httpx.AsyncClient(base_url=url, timeout=REQUEST_TIMEOUT_S) as client:
        response = await client.get("/api/health")
    assert response.status_code == 200, response.text
    return response.json()


# --- the store ----------------------------------------------------------------------------------


async def test_mongodb_stopped_and_restarted_under_load(
    serve, dev_token, restartable_mongo: MongoServer
):
    # The database's first use (indexes, the quiz bank) before the server under test starts,
    # with no deadline to speak of; then operations that should succeed get five seconds
    # (hundreds of times a loopback operation), and an outage costs each request as much.
    await _warm_mongodb(restartable_mongo.uri, "load")
    # LOG_LEVEL INFO: each turn's summary line (its stages, its request id) is in the server's
    # log, so a request that takes too long can be found there.
    server = serve(
        MONGODB_URI=restartable_mongo.uri,
        MONGODB_DB="load",
        STORE_TIMEOUT_S="5",
        LOG_LEVEL="INFO",
    )
    async with httpx.AsyncClient(base_url=server.url, timeout=REQUEST_TIMEOUT_S) as client:
        warm = await send_turn(client, "u00", dev_token("u00"), "[u00 #warm] ciao")
    assert warm.answered, warm.describe()
    hooks = _hooks(_at(FAULT_AT, restartable_mongo.stop), _at(90, restartable_mongo.start))

    outcomes, elapsed = await run_load(
        server.url, _plan(), dev_token, concurrency=CONCURRENCY, after=hooks
    )
    _report("MongoDB stopped after 40 answers, restarted after 90", outcomes, elapsed)

    for outcome in outcomes:
        check_clear(outcome, codes={"store_unavailable", "persist_failed"})
    codes = Counter(c for o in outcomes for c in o.error_codes)
    assert codes["store_unavailable"] > 0, "the outage was not seen"
    assert all(o.answered for o in outcomes[:FAULT_AT]), [
        o.describe() for o in outcomes[:FAULT_AT] if not o.answered
    ]
    # Recovery: the driver finds the restarted server within its heartbeat.
    deadline = time.monotonic() + 60
    async with httpx.AsyncClient(base_url=server.url, timeout=REQUEST_TIMEOUT_S) as client:
        while True:
            last = await send_turn(client, "u00", dev_token("u00"), "[u00 #after] ci sei?")
            check_clear(last, codes={"store_unavailable"})
            if last.answered or time.monotonic() > deadline:
                break
    assert last.answered, last.describe()
    await _healthy(server.url)

    with MongoClient(restartable_mongo.uri, serverSelectionTimeoutMS=5000) as mongo:
        stored = [d["turn_id"] for d in mongo["load"]["chats"].find({}, {"turn_id": 1})]
    check_stored([warm, *outcomes, last], stored)


# --- the prompt source (S3) ---------------------------------------------------------------------


def _s3_env(endpoint_url: str) -> dict[str, str]:
    return {
        "PROMPT_BUCKET": BUCKET,
        "PROMPT_PREFIX": PREFIX,
        "AWS_REGION": REGION,
        "AWS_ENDPOINT_URL": endpoint_url,
        "PROMPT_TTL_S": "0.2",  # revalidated many times during the run
        "S3_MAX_ATTEMPTS": "1",
        # Generous: the first load (20 docs from moto, served by this busy test process) must
        # succeed; the outage is a closed port, refused at once, so nothing waits for it.
        "S3_TIMEOUT_S": "30",
    }


async def test_s3_down_after_a_good_load_keeps_serving_the_last_prompt(
    serve, dev_token, data_dir: Path, moto_server: MotoServer, s3_server: Bucket
):
    server = serve(**_s3_env(moto_server.url))

    outcomes, elapsed = await run_load(
        server.url,
        _plan(),
        dev_token,
        concurrency=CONCURRENCY,
        after=_at(FAULT_AT, moto_server.stop),
    )
    _report("S3 stopped after 40 answers", outcomes, elapsed)

    for outcome in outcomes:
        check_clear(outcome, codes=())  # the last good prompt answers everything
        assert outcome.answered
    assert len({o.done["prompt_version"] for o in outcomes}) == 1
    prompt = (await _healthy(server.url))["prompt"]
    assert prompt["status"] == "degraded" and prompt["error"], prompt
    rows = sqlite_turns(data_dir / "aircoach.sqlite3")
    assert len(rows) == len(outcomes)
    check_stored(outcomes, [r["turn_id"] for r in rows])


async def test_s3_down_from_the_start_is_a_clear_503(serve, dev_token, aws_env, data_dir: Path):
    server = serve(**_s3_env(f"http://127.0.0.1:{free_port()}"))  # nothing listens there

    outcomes, elapsed = await run_load(
        server.url, _plan(users=8, turns=4), dev_token, concurrency=CONCURRENCY
    )
    _report("S3 down, nothing cached", outcomes, elapsed)

    for outcome in outcomes:
        check_clear(outcome, codes={"prompt_unavailable"})
        assert outcome.status == 503
    assert (await _healthy(server.url))["prompt"]["status"] == "unavailable"
    assert not (data_dir / "aircoach.sqlite3").exists() or not sqlite_turns(
        data_dir / "aircoach.sqlite3"
    )


# --- the JWKS (Auth0) ---------------------------------------------------------------------------


def _auth0_env(tenant: FakeTenant, base_url: str) -> dict[str, str]:
    return {
        "AUTH0_DOMAIN": tenant.domain,
        "AUTH0_AUDIENCE": tenant.audience,
        "AUTH0_BASE_URL": base_url,
        # Generous: the first JWKS fetch should succeed; an outage here is a closed port,
        # refused at once, so no request waits for this deadline.
        "AUTH0_TIMEOUT_S": "30",
    }


def _tenant_tokens(tenant: FakeTenant) -> Callable[[str], str]:
    @cache
    def mint(sub: str) -> str:
        if sub == "u15":  # signed by a key the tenant never published: always refused
            return tenant.mint(sub, kid="key-unpublished", key=rsa_key(9))
        return tenant.mint(sub)

    return mint


async def test_jwks_unreachable_after_keys_were_cached(serve, tenant: FakeTenant, data_dir: Path):
    server = serve(
        **_auth0_env(tenant, tenant.base_url),
        # The cache goes stale during the outage: refetches are tried, fail, and the cached
        # keys keep verifying tokens.
        JWKS_MAX_AGE_S="0.3",
        JWKS_REFETCH_COOLDOWN_S="0.1",
        AUTH_CACHE_TTL_S="0",  # every request verifies its token against the (cached) keys
    )

    outcomes, elapsed = await run_load(
        server.url,
        _plan(),
        _tenant_tokens(tenant),
        concurrency=CONCURRENCY,
        after=_at(FAULT_AT, tenant.stop),
    )
    _report("JWKS unreachable after 40 answers", outcomes, elapsed)

    for outcome in outcomes:
        check_clear(outcome, codes={"invalid_token"})
        if outcome.user == "u15":
            assert (outcome.status, outcome.error_codes) == (401, ["invalid_token"])
        else:
            assert outcome.answered, outcome.describe()
    assert "JWKS fetch from" in server.log(), "no JWKS refetch failed during the outage"
    await _healthy(server.url)
    rows = sqlite_turns(data_dir / "aircoach.sqlite3")
    assert len(rows) == sum(o.answered for o in outcomes)
    check_stored(outcomes, [r["turn_id"] for r in rows])


async def test_jwks_unreachable_with_nothing_cached_is_a_clear_503(
    serve, tenant: FakeTenant, data_dir: Path
):
    server = serve(**_auth0_env(tenant, f"http://127.0.0.1:{free_port()}"))

    outcomes, elapsed = await run_load(
        server.url, _plan(users=8, turns=4), _tenant_tokens(tenant), concurrency=CONCURRENCY
    )
    _report("JWKS unreachable, nothing cached", outcomes, elapsed)

    for outcome in outcomes:
        check_clear(outcome, codes={"auth_unavailable"})
        assert outcome.status == 503
    await _healthy(server.url)
    assert not (data_dir / "aircoach.sqlite3").exists() or not sqlite_turns(
        data_dir / "aircoach.sqlite3"
    )


# --- the model ----------------------------------------------------------------------------------


async def test_model_timing_out_under_load(serve, dev_token, data_dir: Path):
    gemini = FakeModelServer().start()
    total = USERS * TURNS_PER_USER
    good_first = FAULT_AT + CONCURRENCY  # requests are answered in order of arrival
    kinds = [
        "good" if i < good_first else {1: "silent", 4: "stalled"}.get(i % 6, "good")
        for i in range(total)
    ]
    gemini.script(
        *(
            {
                "good": gemini_text("Lo stallo è ", "la perdita di portanza."),
                "silent": Reply(hang_before=True),  # never answers
                "stalled": gemini_text("Lo stallo ", "e poi nulla.", hang_after=1),
            }[kind]
            for kind in kinds
        )
    )
    try:
        server = serve(
            GOOGLE_API_KEY="fake-key",
            MODEL_BASE_URL=gemini.url,
            # Met by the silent and stalled replies; a good reply streams in milliseconds
            # on loopback, a thousand times under this even on a busy machine.
            MODEL_TIMEOUT_S="5",
            MODEL_MAX_RETRIES="0",
        )
        outcomes, elapsed = await run_load(server.url, _plan(), dev_token, concurrency=CONCURRENCY)
    finally:
        gemini.stop()
    _report("Gemini silent or stalled on 1 of 3 requests after the first 56", outcomes, elapsed)

    gemini.assert_used()  # one request per turn, none retried, none left over
    # The i-th request got the i-th reply: which turn got which.
    kind_of = {
        _last_user_text(r.body): kind for r, kind in zip(gemini.requests, kinds, strict=True)
    }
    for outcome in outcomes:
        check_clear(outcome, codes={"model_unavailable"})
        assert outcome.answered, outcome.describe()
        kind = kind_of[outcome.query]
        assert outcome.error_codes == ([] if kind == "good" else ["model_unavailable"]), (
            kind,
            outcome.describe(),
        )
        if kind == "stalled":  # what was said before the stall stays
            assert outcome.answer == "Lo stallo ", outcome.describe()
    await _healthy(server.url)
    rows = sqlite_turns(data_dir / "aircoach.sqlite3")
    assert len(rows) == total
    check_stored(outcomes, [r["turn_id"] for r in rows])
    failed_ids = {o.done["turn_id"] for o in outcomes if o.error_codes}
    assert {r["turn_id"] for r in rows if r["status"] == "error"} == failed_ids


def _last_user_text(body: dict) -> str:
    (last,) = [c for c in body["contents"] if c["role"] == "user"][-1:]
    return "".join(part.get("text", "") for part in last["parts"])


# --- a tool -------------------------------------------------------------------------------------

KB_QUERY = "Cosa dice il manuale sulla densità dell'aria"
KB_HIT = {"riferimento": "Manuale 5.2", "materia": "meteorologia", "testo": "La densità..."}


async def test_tool_answering_503_under_load(serve, dev_token, tmp_path: Path, data_dir: Path):
    docs = tmp_path / "prompt_docs"
    docs.mkdir()
    for doc in (ROOT / "prompt_docs").glob("*.md"):
        shutil.copy(doc, docs / doc.name)
    config = fast(shipped_tools())  # short retry pauses
    for tool in config["tools"]:
        if http := tool.get("http"):
            http["timeout_s"] = 5.0  # only the 503s fail: no timeout on a busy machine
    write_tools(docs, config)
    service = FakeToolService().start()
    service.plan("/kb", ToolReply(200, {"results": [KB_HIT]}))
    try:
        server = serve(PROMPT_DOCS_DIR=str(docs), KB_SEARCH_URL=f"{service.url}/kb")
        outcomes, elapsed = await run_load(
            server.url,
            _plan(KB_QUERY),
            dev_token,
            concurrency=CONCURRENCY,
            body={"tools": {"kb_search": True}},
            after=_hooks(
                _at(FAULT_AT, lambda: service.plan("/kb", ToolReply(503))),
                _at(100, lambda: service.plan("/kb", ToolReply(200, {"results": [KB_HIT]}))),
            ),
        )
    finally:
        service.stop()
    _report("kb_search answering 503 from answer 40 to 100", outcomes, elapsed)

    tool_errors = Counter()
    for outcome in outcomes:
        check_clear(outcome, codes=())  # a failed tool is told to the model, not the user
        assert outcome.answered
        (result,) = [e for e in outcome.events if e["type"] == "tool_result"]
        assert result["tool_name"] == "kb_search" and not result["final"]
        tool_errors[result["data"].get("error")] += 1
    failed = "HTTP 503"  # `{"success": false, "error", "meta"}`
    assert tool_errors[failed] > 0 and tool_errors[None] > FAULT_AT, tool_errors
    assert set(tool_errors) == {None, failed}, tool_errors
    await _healthy(server.url)
    rows = sqlite_turns(data_dir / "aircoach.sqlite3")
    assert len(rows) == len(outcomes)
    check_stored(outcomes, [r["turn_id"] for r in rows])
    assert all(r["tool"] for r in rows)
