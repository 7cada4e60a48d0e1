"""Safe retries and per-user budgets, with two app instances sharing one store (SQLite and
MongoDB): a repeated client_message_id replays the stored turn without running the model; a
stream names its turn in `X-Turn-ID` and `GET /api/turns/{id}` returns it; the quota is never
exceeded, whichever instance answers."""

from __future__ import annotations

import contextlib
import dataclasses
import sqlite3
from collections.abc import AsyncIterator, Callable
from contextlib import AsyncExitStack
from typing import Any

import anyio
import httpx
import pytest

from aircoach.errors import StoreUnavailable
from aircoach.services import build_guard_stores, build_turn_log, open_stores
from aircoach.settings import Settings
from aircoach.turn.guards import GuardStores
from aircoach.turn.ports import ChatStore
from tests.clock import FakeClock, quota_clock
from tests.helpers import app_with, asgi_client, services_of
from tests.scripted_model import HeldModels, Script, ScriptedModels, call, text
from tests.sse import parse_sse, parse_sse_ids


@pytest.fixture
def wall() -> FakeClock:
    """The instances' wall clock, moved by hand."""
    return quota_clock()


@pytest.fixture
async def two(store_settings: Settings, wall: FakeClock) -> AsyncIterator[Callable[..., Any]]:
    """`two(script, **settings)`: two instances over one database and one clock (`wall`),
    and their clients."""
    async with AsyncExitStack() as stack:

        async def build(script: Script, **update: Any) -> list[httpx.AsyncClient]:
            settings = store_settings.model_copy(update=update)
            apps = [app_with(settings, models=ScriptedModels(script), clock=wall) for _ in range(2)]
            return [await stack.enter_async_context(asgi_client(app)) for app in apps]

        yield build


async def post(client: httpx.AsyncClient, headers: dict[str, str], **body: Any) -> httpx.Response:
    return await client.post("/api/stream_query", json={"query": "ciao", **body}, headers=headers)


async def test_a_retried_post_replays_the_stored_turn_on_any_instance(two, auth):
    script = Script([text("Prima risposta.")])
    a, b = await two(script)
    first = await post(a, auth(), client_message_id="msg-1")
    again = await post(b, auth(), client_message_id="msg-1")
    assert len(script.calls) == 1  # the model ran once
    events = parse_sse(first.text)
    turn_id = events[-1]["turn_id"]
    assert first.headers["x-turn-id"] == again.headers["x-turn-id"] == turn_id
    assert "idempotent-replayed" not in first.headers
    assert again.headers["idempotent-replayed"] == "true"
    # The events of the first stream, numbered as then (from the turn's log).
    assert parse_sse_ids(again.text) == parse_sse_ids(first.text)
    assert "".join(e.get("content", "") for e in events) == "Prima risposta."
    history = (await a.get("/api/history", headers=auth())).json()["turns"]
    assert [t["turn_id"] for t in history] == [turn_id]  # one turn stored

    as_json = await b.post(
        "/api/stream_query",
        json={"query": "ciao", "stream": False},
        headers={**auth(), "Idempotency-Key": "msg-1"},
    )
    assert as_json.json()["answer"] == "Prima risposta." and as_json.json()["turn_id"] == turn_id
    # The same id from another user is another message.
    script.replies.append(text("Per Bob."))
    other = await post(b, auth("bob"), client_message_id="msg-1")
    assert parse_sse(other.text)[-1]["turn_id"] != turn_id


async def test_a_replayed_quiz_turn_carries_client_data_only(two, auth):
    script = Script([call("domanda_teoria", capitolo=1, numero=1)])
    a, b = await two(script)
    first = parse_sse((await post(a, auth(), client_message_id="q-1")).text)
    again = await b.post(
        "/api/stream_query",
        json={"query": "ciao", "stream": False, "client_message_id": "q-1"},
        headers=auth(),
    )
    body = again.json()
    assert body["tool"]["data"] == first[0]["data"]
    assert body["answer"].startswith("Capitolo 1, domanda 1: ")
    assert "RISERVATO" not in again.text and "spiegazione" not in again.text


async def test_a_lost_stream_is_fetched_by_its_turn_id(two, auth):
    a, b = await two(Script([call("domanda_teoria", capitolo=2)]))
    response = await post(a, auth())
    turn_id = response.headers["x-turn-id"]
    fetched = await b.get(f"/api/turns/{turn_id}", headers=auth())
    assert fetched.status_code == 200
    turn = fetched.json()
    assert turn["turn_id"] == turn_id and turn["human"] == "ciao"
    assert turn["tools"][0]["data"] == parse_sse(response.text)[0]["data"]
    assert "text" not in turn["tools"][0]  # what the model alone read
    for who, path in (("mallory", turn_id), ("user-1", "f" * 24), ("user-1", "x" * 65)):
        missing = await b.get(f"/api/turns/{path}", headers=auth(who))
        assert missing.status_code in (404, 422) and '"tools"' not in missing.text
    assert (await b.get(f"/api/turns/{turn_id}", headers=auth("mallory"))).status_code == 404


async def test_a_duplicate_while_the_first_is_answered_is_409_and_a_dead_one_is_taken_over(
    two, auth, wall
):
    script = Script([text("Ripresa.")])
    a, b = await two(script)
    services = a._transport.app.state.services  # type: ignore[attr-defined]
    reservations = services.guards.reservations
    await reservations.reserve("user-1", "busy", "f" * 24, now=wall(), ttl_s=86_400)
    busy = await post(b, auth(), client_message_id="busy")
    assert busy.status_code == 409 and busy.headers["retry-after"] == "2"
    assert busy.json()["error"] == "turn_in_progress" and script.calls == []
    # In a conversation the key is kept with it; the message names the id the client sent.
    await reservations.reserve("user-1", "c-1/busy", "d" * 24, now=wall(), ttl_s=86_400)
    named = await post(b, auth(), client_message_id="busy", conversation_id="c-1")
    assert named.status_code == 409 and "'busy'" in named.json()["message"]
    assert "c-1" not in named.json()["message"]
    # A reservation whose turn never came (its instance died) is taken over by the repeat.
    await reservations.reserve("user-1", "dead", "e" * 24, now=wall() - 600, ttl_s=86_400)
    taken = await post(b, auth(), client_message_id="dead")
    assert taken.status_code == 200 and parse_sse(taken.text)[-1]["type"] == "done"
    assert len(script.calls) == 1


@pytest.mark.parametrize(
    ("body", "headers", "loc"),
    [
        ({"client_message_id": "a b"}, {}, ["body", "client_message_id"]),
        ({"client_message_id": "x" * 129}, {}, ["body", "client_message_id"]),
        ({}, {"Idempotency-Key": "a/b"}, ["header", "Idempotency-Key"]),
        ({"client_message_id": "one"}, {"Idempotency-Key": "two"}, ["body", "client_message_id"]),
    ],
)
async def test_a_bad_message_id_is_a_422(client, auth, body, headers, loc):
    response = await post(client, {**auth(), **headers}, **body)
    assert response.status_code == 422 and response.json()["detail"][0]["loc"] == loc
    # The input shown is the field's named (it showed the header's beside the body's name).
    shown = body.get("client_message_id") if loc[0] == "body" else headers["Idempotency-Key"]
    assert shown.startswith(response.json()["detail"][0]["input"].rstrip("…"))


async def test_the_quota_holds_across_instances_and_replays_are_free(two, auth):
    script = Script([text(f"risposta {i}") for i in range(10)])
    a, b = await two(script, quota_turns_per_day=3)
    # One after another: a user's turns run one at a time (concurrent counting: the guard
    # store's contract tests).
    responses = [await post((a, b)[i % 2], auth(), client_message_id=f"m{i}") for i in range(8)]
    statuses = sorted(r.status_code for r in responses)
    assert statuses == [200] * 3 + [429] * 5 and len(script.calls) == 3
    refused = next(r for r in responses if r.status_code == 429)
    assert refused.json()["error"] == "quota_exceeded"
    assert refused.json()["message"].startswith("Hai raggiunto il limite di domande al giorno (3)")
    assert refused.headers["retry-after"] == str(86_400 - 10 + 1)  # the day's seconds left
    # A repeat of an answered message is replayed, not charged; a refused one stays free.
    answered = next(i for i, r in enumerate(responses) if r.status_code == 200)
    replay = await post(b, auth(), client_message_id=f"m{answered}")
    assert replay.status_code == 200 and replay.headers["idempotent-replayed"] == "true"
    assert (await post(a, auth("bob"))).status_code == 200  # another user's own budget


async def test_the_minute_quota_answers_429_with_the_seconds_left(two, auth, wall):
    a, b = await two(
        Script([text("uno"), text("tre")]), quota_turns_per_minute=1, quota_turns_per_day=50
    )
    assert (await post(a, auth())).status_code == 200
    wall.advance(30)
    refused = await b.post(
        "/api/stream_query", json={"query": "due"}, headers={**auth(), "Accept-Language": "en"}
    )
    assert refused.status_code == 429
    assert refused.json()["message"].startswith(
        "You have reached the per-minute limit of questions (1); retry in "
    )
    assert refused.headers["retry-after"] == "21"  # the minute's 20 s left, rounded up
    wall.advance(20)  # the next minute: a new budget
    assert (await post(b, auth(), query="tre")).status_code == 200


class _HistoryDownOnce:
    """The chat store, with its first history read failing (the store briefly down)."""

    def __init__(self, chats: ChatStore):
        self.chats = chats
        self.failed = False

    def __getattr__(self, name: str) -> Any:
        return getattr(self.chats, name)

    async def latest_turn_ids(self, *args: Any, **kwargs: Any) -> list[str]:
        if not self.failed:
            self.failed = True
            raise StoreUnavailable()
        return await self.chats.latest_turn_ids(*args, **kwargs)


async def test_a_request_that_fails_before_its_turn_runs_is_not_charged(settings, auth, wall):
    settings = settings.model_copy(update={"quota_turns_per_minute": 1, "quota_turns_per_day": 50})
    stores = open_stores(settings)
    app = app_with(
        settings,
        models=ScriptedModels(Script([text("Eccomi.")])),
        clock=wall,
        chats=_HistoryDownOnce(stores.chats),
        quiz=stores.quiz,
        attempts=stores.attempts,
    )
    async with asgi_client(app) as client:
        down = await post(client, auth(), client_message_id="m1")
        assert down.status_code == 503 and down.json()["error"] == "store_unavailable"
        # The same message again, within the minute: neither its key nor the minute's one
        # turn was used up by the request that never ran.
        again = await post(client, auth(), client_message_id="m1")
        assert again.status_code == 200, again.text
        assert "idempotent-replayed" not in again.headers
        assert parse_sse(again.text)[-1]["status"] == "ok"
        assert (await post(client, auth(), query="ancora")).status_code == 429


@pytest.mark.parametrize("refunds", ["work", "fail"])
async def test_a_message_refused_as_busy_is_not_charged_and_its_key_stays_free(
    settings, auth, wall, caplog, refunds
):
    settings = settings.model_copy(update={"quota_turns_per_minute": 1, "quota_turns_per_day": 50})
    guards = build_guard_stores(settings)
    if refunds == "fail":
        quotas = guards.quotas

        class _Quotas:
            def __getattr__(self, name: str) -> Any:
                return getattr(quotas, name)

            async def refund(self, user_id: str, window: str) -> None:
                raise StoreUnavailable()

        guards = GuardStores(reservations=guards.reservations, quotas=_Quotas())  # type: ignore[arg-type]
    app = app_with(
        settings, models=ScriptedModels(Script([text("Eccomi.")])), clock=wall, guards=guards
    )
    turn_log = services_of(app).turn_log
    await turn_log.claim("user-1", "user-1", "t-other", now=wall(), expires_at=wall() + 30)
    async with asgi_client(app) as client:
        busy = await post(client, auth(), client_message_id="m1")
        # The client gets the 409 whether or not the store could take the charge back.
        assert busy.status_code == 409 and busy.json()["turn_id"] == "t-other"
        await turn_log.release("user-1", "user-1", "t-other")
        again = await post(client, auth(), client_message_id="m1")
    if refunds == "work":
        assert again.status_code == 200, again.text
    else:  # the key was released; the minute's one turn stayed charged, and the log says so
        assert again.status_code == 429
        assert "could not be given back" in caplog.text


def _guards_with(settings: Settings, **broken: str) -> GuardStores:
    """The settings' guard stores, with the methods named (`quotas="hit"`,
    `reservations="release"`, `quotas="refund"`) failing as a store that is down; `hit`
    fails once, on the minute's window, after the day's was counted."""
    guards = build_guard_stores(settings)
    failed: list[str] = []

    class Broken:
        def __init__(self, store: Any, method: str | None):
            self.store, self.method = store, method

        def __getattr__(self, name: str) -> Any:
            if name != self.method:
                return getattr(self.store, name)

            async def fail(*args: Any, **kwargs: Any) -> Any:
                if name == "hit" and (failed or not args[1].startswith("m:")):
                    return await self.store.hit(*args, **kwargs)
                failed.append(name)
                raise StoreUnavailable()

            return fail

    return GuardStores(
        reservations=Broken(guards.reservations, broken.get("reservations")),  # type: ignore[arg-type]
        quotas=Broken(guards.quotas, broken.get("quotas")),  # type: ignore[arg-type]
    )


async def test_a_quota_store_that_fails_while_counting_keeps_no_count_and_no_key(
    settings, auth, wall
):
    settings = settings.model_copy(update={"quota_turns_per_minute": 5, "quota_turns_per_day": 1})
    app = app_with(
        settings,
        models=ScriptedModels(Script([text("Eccomi.")])),
        clock=wall,
        guards=_guards_with(settings, quotas="hit"),
    )
    async with asgi_client(app) as client:
        down = await post(client, auth(), client_message_id="m1")
        assert down.status_code == 503 and down.json()["error"] == "store_unavailable"
        # The store is back: the same message runs now, as the day's one turn (the day's
        # count taken before the minute's failed was given back).
        again = await post(client, auth(), client_message_id="m1")
        assert again.status_code == 200, again.text
        assert (await post(client, auth(), query="ancora")).status_code == 429


@pytest.mark.parametrize(
    ("limits", "broken"),
    [
        ({"quota_turns_per_minute": 1}, {"reservations": "release"}),
        ({"quota_turns_per_minute": 1, "quota_turns_per_day": 5}, {"quotas": "refund"}),
    ],
)
async def test_over_quota_is_a_429_even_when_giving_back_fails(
    settings, auth, wall, caplog, limits, broken
):
    settings = settings.model_copy(update=limits)
    app = app_with(
        settings,
        models=ScriptedModels(Script([text("uno")])),
        clock=wall,
        guards=_guards_with(settings, **broken),
    )
    async with asgi_client(app) as client:
        assert (await post(client, auth())).status_code == 200
        refused = await post(client, auth(), query="due", client_message_id="m2")
    assert refused.status_code == 429 and refused.json()["error"] == "quota_exceeded"
    assert int(refused.headers["retry-after"]) > 5  # the window's end, not a 503's retry
    assert "could not be" in caplog.text


# Two instances; the follower reads the turn's log every TICK_S of real time, by design.
@pytest.mark.integration
async def test_a_json_repeat_that_joined_a_turn_the_store_refused_gets_it_from_the_spool(
    settings, auth
):
    started, release = anyio.Event(), anyio.Event()

    async def hold(call: int) -> None:
        started.set()
        await release.wait()

    stores = open_stores(settings)
    real, log = stores.chats, build_turn_log(settings)
    joined = anyio.Event()

    class RefusesTheTurn:
        def __getattr__(self, name: str) -> Any:
            return getattr(real, name)

        async def append_turn(self, turn: Any) -> Any:
            raise StoreUnavailable()  # the store is down for the turn's write

    class Followed:
        def __getattr__(self, name: str) -> Any:
            return getattr(log, name)

        async def read(self, *args: Any, **kwargs: Any) -> Any:
            joined.set()  # only a client that follows the turn reads its log
            return await log.read(*args, **kwargs)

    # The turn runs on instance a; the repeat reaches instance b, which follows its log.
    app = app_with(
        settings,
        models=HeldModels(Script([text("La risposta.")]), hold),
        chats=RefusesTheTurn(),
        quiz=stores.quiz,
        attempts=stores.attempts,
    )
    other = app_with(settings, quiz=stores.quiz, attempts=stores.attempts, turn_log=Followed())
    body = {"query": "ciao", "client_message_id": "k"}
    async with (
        asgi_client(app) as on_a,
        asgi_client(other) as client,
        anyio.create_task_group() as tg,
    ):
        first: list[httpx.Response] = []

        async def send_first() -> None:
            first.append(await post(on_a, auth(), **body))

        async def let_it_end_once_joined() -> None:
            await joined.wait()
            release.set()

        tg.start_soon(send_first)
        await started.wait()
        tg.start_soon(let_it_end_once_joined)
        # The same message while its turn runs, as JSON: it joins the turn, whose store write
        # then fails; the turn waits in the spool, and the repeat gets it from there.
        repeat = await post(client, auth(), **body, stream=False)
    assert repeat.status_code == 200, repeat.text
    assert repeat.headers["idempotent-replayed"] == "true"
    assert repeat.json()["answer"] == "La risposta."
    assert [e["type"] for e in parse_sse(first[0].text)][-2:] == ["error", "done"]


async def test_a_message_id_sent_again_with_another_question_is_a_422(two, auth):
    """A client that reuses a `client_message_id` for a new question (a bug, or a counter that
    restarted) must not get the other question's answer as if it were this one's: a 422
    naming the id, and the model does not run. The same question is still replayed."""
    script = Script([text("Il QNH è la pressione al livello del mare.")])
    a, b = await two(script)
    first = await post(a, auth(), query="Cos'è il QNH?", client_message_id="m1")
    assert first.status_code == 200
    other = await post(b, auth(), query="Cos'è la portanza?", client_message_id="m1")
    assert other.status_code == 422, other.text
    assert other.json()["detail"][0]["loc"] == ["body", "client_message_id"]
    assert "another question" in other.json()["detail"][0]["msg"]
    header = await b.post(
        "/api/stream_query",
        json={"query": "Cos'è la portanza?"},
        headers={**auth(), "Idempotency-Key": "m1"},
    )
    assert header.status_code == 422
    assert header.json()["detail"][0]["loc"] == ["header", "Idempotency-Key"]
    assert len(script.calls) == 1
    same = await post(b, auth(), query="Cos'è il QNH?", client_message_id="m1", stream=False)
    assert same.status_code == 200 and same.headers["idempotent-replayed"] == "true"


async def test_a_reused_message_id_is_a_422_before_its_first_turn_is_stored(two, auth, wall):
    from aircoach.turn.admission import question_fingerprint

    script = Script([])
    a, b = await two(script)
    # The first request holds the id and its turn is between its run and its store write.
    reservations = services_of(a._transport.app).guards.reservations  # type: ignore[attr-defined]
    await reservations.reserve(
        "user-1", "m2", "f" * 24, fingerprint=question_fingerprint("uno"), now=wall(), ttl_s=60
    )
    assert (await post(b, auth(), query="due", client_message_id="m2")).status_code == 422
    assert (await post(b, auth(), query="uno", client_message_id="m2")).status_code == 409
    # A reservation made before reservations kept their question matches any question.
    await reservations.reserve("user-1", "m3", "e" * 24, now=wall(), ttl_s=60)
    assert (await post(b, auth(), query="tre", client_message_id="m3")).status_code == 409
    assert script.calls == []


async def test_of_two_interrupts_at_once_the_last_takes_the_thread(settings):
    """Two messages with `if_busy: "interrupt"` find the same running turn t0; t1's
    interrupt lands between t2's read of the claim and t2's take-over. t2 interrupts t1 in
    turn (it was asked to replace whatever runs), instead of a 409 naming t0, a turn that is
    no longer running."""
    from aircoach.turn.admission import Admission, hold_thread

    gate = services_of(app_with(settings)).gate
    log, now = gate.turn_log, gate.clock()
    await log.claim("user-1", "user-1", "t0", now=now, expires_at=now + 30)

    class OtherInterruptFirst:
        def __getattr__(self, name: str) -> Any:
            return getattr(log, name)

        async def claim(self, user_id: str, thread: str, turn_id: str, **kwargs: Any) -> Any:
            held = await log.claim(user_id, thread, turn_id, **kwargs)
            if turn_id == "t2":
                await hold_thread(gate, user_id, thread, Admission("t1"), interrupt=True)
            return held

    racing = dataclasses.replace(gate, turn_log=OtherInterruptFirst())
    await hold_thread(racing, "user-1", "user-1", Admission("t2"), interrupt=True)
    holder = await log.holder("user-1", "user-1", now=now)
    assert holder is not None and holder.turn_id == "t2"
    assert await log.cancel_requested("t0") and await log.cancel_requested("t1")


async def test_a_429_names_the_day_when_both_budgets_are_spent(two, auth, wall):
    """The day's last turn was also the minute's: the 429 says the day's budget is spent and
    Retry-After is the day's end. Told the minute's end instead, a client (and the student,
    in the message) waited it out only to be refused again."""
    a, b = await two(Script([text("uno")]), quota_turns_per_minute=1, quota_turns_per_day=1)
    assert (await post(a, auth())).status_code == 200
    refused = await post(b, auth(), query="due")
    assert refused.status_code == 429
    assert refused.json()["message"].startswith("Hai raggiunto il limite di domande al giorno (1)")
    assert refused.headers["retry-after"] == str(86_400 - 10 + 1)
    wall.advance(60)  # the next minute: still the day's refusal
    again = await post(a, auth(), query="tre")
    assert again.status_code == 429 and again.headers["retry-after"] == str(86_400 - 70 + 1)


async def test_sqlite_drops_expired_keys_and_counters_as_turns_are_admitted(settings, auth, wall):
    """A server that runs for months keeps only live reservations and counters: each turn's
    writes drop the expired ones, by the gate's clock (MongoDB's TTL indexes do it there)."""
    settings = settings.model_copy(update={"quota_turns_per_minute": 5, "quota_turns_per_day": 1})
    app = app_with(settings, models=ScriptedModels(Script([text("uno"), text("due")])), clock=wall)

    def rows(sql: str) -> list[tuple[object, ...]]:
        with contextlib.closing(sqlite3.connect(settings.sqlite_file)) as db:
            return sorted(db.execute(sql).fetchall())

    async with asgi_client(app) as client:
        assert (await post(client, auth(), client_message_id="m1")).status_code == 200
        assert len(rows("SELECT window FROM quotas")) == 2  # the day and the minute
        wall.advance(2 * 86_400)  # the key (24 h) and both windows have expired
        assert (await post(client, auth(), client_message_id="m2")).status_code == 200
        day, minute = int(wall.now // 86_400), int(wall.now // 60)
        assert rows("SELECT key FROM idempotency") == [("m2",)]
        assert rows("SELECT window FROM quotas") == [(f"d:{day}",), (f"m:{minute}",)]
        # The day's one turn is spent: the live counter still counts.
        assert (await post(client, auth(), client_message_id="m3")).status_code == 429


async def test_a_claim_the_store_took_while_failing_does_not_hold_the_thread(settings, auth):
    """The store takes a turn's claim and fails before it answers (it went down as it wrote):
    the turn gets a 503 and never runs, but its claim would hold the thread for its lease,
    and the next message a 409 "Sto ancora rispondendo" naming a turn that never ran."""
    log = build_turn_log(settings)

    class TakesThenFails:
        failing = True

        def __getattr__(self, name: str) -> Any:
            return getattr(log, name)

        async def claim(self, *args: Any, **kwargs: Any) -> Any:
            held = await log.claim(*args, **kwargs)
            if self.failing:
                self.failing = False
                raise StoreUnavailable()  # written, but the answer was lost
            return held

    app = app_with(
        settings, models=ScriptedModels(Script([text("Eccomi.")])), turn_log=TakesThenFails()
    )
    async with asgi_client(app) as client:
        refused = await post(client, auth(), query="uno")
        assert refused.status_code == 503, refused.text
        holder = await log.holder("user-1", "user-1", now=services_of(app).gate.clock())
        assert holder is not None  # the claim the store took
        answered = await post(client, auth(), query="ci sei?")
    assert answered.status_code == 200, answered.text
    assert parse_sse(answered.text)[-1]["status"] == "ok"
