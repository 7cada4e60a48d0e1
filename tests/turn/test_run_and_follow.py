"""A turn that outlives its connection (`TurnRun`) and its followers on other instances
(`follow`), over the real turn log on SQLite and MongoDB (nx-27017)."""

from __future__ import annotations

import time
from collections.abc import AsyncGenerator
from typing import Any, Literal

import anyio
import pytest
from pydantic import BaseModel

from aircoach.services import build_turn_log
from aircoach.settings import Settings
from aircoach.turn.follow import follow
from aircoach.turn.log import LoggedEvent, TurnLogStore
from aircoach.turn.run import EARLY_STOPS, RunningTurns, TurnRun

WAIT_S = 30.0  # for things that should happen at once; the test fails past it


class Word(BaseModel):
    type: Literal["agent_message"] = "agent_message"
    content: str


class Done(BaseModel):
    type: Literal["done"] = "done"
    status: str = "ok"


@pytest.fixture
def two(store_settings: Settings) -> tuple[TurnLogStore, TurnLogStore]:
    """Two instances' turn logs on the same database."""
    return build_turn_log(store_settings), build_turn_log(store_settings)


async def words(n: int) -> AsyncGenerator[Word | Done, None]:
    for i in range(n):
        yield Word(content=f"parola{i} ")
    yield Done()


def texts(events: list[LoggedEvent]) -> list[Any]:
    return [e.data.get("content", e.data["type"]) for e in events]


async def ended_interrupted(n: int) -> dict[str, Any]:
    return {"type": "done", "status": "interrupted"}


async def test_a_turn_is_written_in_a_few_batches_and_read_back_whole(two):
    a, b = two
    run = TurnRun(a, user_id="alice", turn_id="t1")
    await run.produce(words(150))
    logged = await b.read("alice", "t1")
    assert [e.seq for e in logged] == list(range(1, 152))
    assert texts(logged) == [f"parola{i} " for i in range(150)] + ["done"]
    assert run.writes <= 4  # 64 + 64 + the rest with done: not one write per word
    assert [e.seq for e in logged] == [e.seq for e in run.events]


class _StuckLog:
    """A turn log whose writes hang until `unstick` (a store in an outage, each write
    waiting for its timeout)."""

    def __init__(self) -> None:
        self.unstick = anyio.Event()
        self.written: list[int] = []
        self.freed = False

    async def append(self, user_id, turn_id, events, *, expires_at) -> None:
        with anyio.fail_after(WAIT_S):  # the write fails (the run logs it and goes on)
            await self.unstick.wait()
        self.written += [e.seq for e in events]

    async def finish(self, user_id, turn_id, events, *, expires_at) -> None:
        await self.append(user_id, turn_id, events, expires_at=expires_at)
        self.freed = True

    async def renew(self, *args, **kw) -> None:
        pass

    async def cancel_requested(self, turn_id) -> bool:
        return False


async def test_a_log_that_hangs_never_holds_the_turn_back_before_done():
    """The turn's events reach the connection while every log write hangs: only the last
    write, the one with `done` that also frees the thread, is waited for, so that a client
    that reads `done` may send its next message at once (before, the turn waited for the
    write at every 64th event, and a store outage ate the turn's deadline)."""
    log = _StuckLog()
    run = TurnRun(log, user_id="alice", turn_id="t1", tick_s=0.01, flush_events=8)  # type: ignore[arg-type]
    read: list[LoggedEvent] = []
    words_read = anyio.Event()

    async def reader() -> None:
        async for event in run.live():
            read.append(event)
            if len(read) == 100:
                words_read.set()

    with anyio.fail_after(WAIT_S):
        async with anyio.create_task_group() as tg:
            tg.start_soon(run.produce, words(100))
            tg.start_soon(reader)
            await words_read.wait()  # every word reaches the reader while the writes hang
            await anyio.wait_all_tasks_blocked()
            assert len(run.events) == len(read) == 100  # `done` waits for its write
            assert not log.freed
            log.unstick.set()
    assert run.finished and texts(read) == [f"parola{i} " for i in range(100)] + ["done"]
    assert sorted(log.written) == list(range(1, 102)) and log.freed


class _DownLog(_StuckLog):
    """A turn log whose every write fails at once (a store that refuses connections)."""

    async def append(self, user_id, turn_id, events, *, expires_at) -> None:
        raise ConnectionError("store down")


async def test_a_log_that_is_down_still_ends_the_turn_and_says_the_thread_stays_claimed(caplog):
    run = TurnRun(_DownLog(), user_id="alice", turn_id="t1")  # type: ignore[arg-type]
    with anyio.fail_after(WAIT_S):
        await run.produce(words(3))
    assert run.finished and texts(run.events) == ["parola0 ", "parola1 ", "parola2 ", "done"]
    lines = [r.getMessage() for r in caplog.records if "last write failed" in r.getMessage()]
    assert len(lines) == 2  # with `done`, and once more as the run ends
    assert "stays claimed until the claim lapses (CLAIM_LEASE_S=30s)" in lines[0]


async def test_a_turn_stopped_before_done_logs_what_it_said_and_frees_its_thread(two):
    a, b = two
    now = time.time()
    await a.claim("alice", "main", "t1", now=now, expires_at=now + 60)
    run = TurnRun(a, user_id="alice", turn_id="t1")
    said = anyio.Event()

    async def endless() -> AsyncGenerator[Word | Done, None]:
        yield Word(content="inizio ")
        said.set()
        await anyio.sleep_forever()
        yield Done()

    with anyio.fail_after(WAIT_S):
        async with anyio.create_task_group() as tg:
            tg.start_soon(run.produce, endless())
            await said.wait()
            tg.cancel_scope.cancel()  # the instance shuts down
    assert run.finished
    assert texts(await b.read("alice", "t1")) == ["inizio "]
    assert await b.holder("alice", "main", now=time.time()) is None


async def test_the_turn_goes_on_after_its_reader_leaves(two):
    a, b = two
    run = TurnRun(a, user_id="alice", turn_id="t1")
    read: list[LoggedEvent] = []
    release = anyio.Event()

    async def slow_words() -> AsyncGenerator[Word | Done, None]:
        for i in range(5):
            yield Word(content=f"parola{i} ")
        await release.wait()  # the model is slow; meanwhile the reader leaves
        for i in range(5, 40):
            yield Word(content=f"parola{i} ")
        yield Done()

    with anyio.fail_after(WAIT_S):
        async with anyio.create_task_group() as tg:
            tg.start_soon(run.produce, slow_words())
            async for event in run.live():
                read.append(event)
                if len(read) == 5:
                    break  # the phone lost its signal
            release.set()
    assert texts(read) == [f"parola{i} " for i in range(5)]
    logged = await b.read("alice", "t1")
    assert texts(logged) == [f"parola{i} " for i in range(40)] + ["done"]


async def test_a_follower_on_another_instance_gets_every_event_once_in_order(two):
    a, b = two
    await a.claim("alice", "main", "t1", now=time.time(), expires_at=time.time() + 60)
    run = TurnRun(a, user_id="alice", turn_id="t1", tick_s=0.05, flush_events=3)
    feed_send, feed = anyio.create_memory_object_stream[Word | Done](100)

    async def fed() -> AsyncGenerator[Word | Done, None]:
        async with feed:
            async for event in feed:
                yield event

    followed: list[LoggedEvent] = []

    async def follower() -> None:
        async for event in follow(
            b, "alice", "t1", after=2, ended=ended_interrupted, poll_s=0.02, give_up_s=WAIT_S
        ):
            followed.append(event)
            if event.seq == 10:
                async with feed_send:  # the turn's last event: its generator ends
                    await feed_send.send(Done())

    with anyio.fail_after(WAIT_S):
        async with anyio.create_task_group() as tg:
            tg.start_soon(run.produce, fed())
            for i in range(10):
                await feed_send.send(Word(content=f"parola{i} "))
            tg.start_soon(follower)
        await a.release("alice", "main", "t1")
    assert [e.seq for e in followed] == list(range(3, 12))
    assert texts(followed) == [f"parola{i} " for i in range(2, 10)] + ["done"]


async def test_a_turn_that_ended_without_done_ends_its_followers_as_interrupted(two):
    a, b = two
    await a.append(
        "alice",
        "t1",
        [LoggedEvent(1, {"type": "agent_message", "content": "mezza "})],
        expires_at=time.time() + 60,
    )
    # No claim: its instance was frozen when its response ended.
    with anyio.fail_after(WAIT_S):
        followed = [
            e
            async for e in follow(
                b, "alice", "t1", ended=ended_interrupted, poll_s=0.01, give_up_s=WAIT_S
            )
        ]
    assert [(e.seq, e.type) for e in followed] == [(1, "agent_message"), (2, "done")]
    assert followed[-1].data["status"] == "interrupted"
    assert [
        e async for e in follow(b, "bob", "t1", ended=ended_interrupted, poll_s=0.01, give_up_s=1)
    ] == [LoggedEvent(1, {"type": "done", "status": "interrupted"})]


async def test_a_client_at_or_past_a_logged_done_gets_nothing_more(two):
    a, b = two
    logged = [
        LoggedEvent(1, {"type": "agent_message", "content": "ciao "}),
        LoggedEvent(2, {"type": "done", "status": "ok"}),
    ]
    await a.finish("alice", "t1", logged, expires_at=time.time() + 60)

    async def rest(after: int) -> list[LoggedEvent]:
        with anyio.fail_after(WAIT_S):
            return [
                e
                async for e in follow(
                    b,
                    "alice",
                    "t1",
                    after=after,
                    ended=ended_interrupted,
                    poll_s=3600,  # it must know at once: no poll (it took three, 0.75 s)
                    give_up_s=WAIT_S,
                )
            ]

    assert await rest(1) == logged[1:]
    assert await rest(2) == []
    # An id past the turn's `done` is none of this turn's: no `done` 10 made up for it.
    assert await rest(9) == []


async def test_a_client_past_the_log_of_a_turn_that_died_gets_its_interrupted_done(two):
    a, b = two
    # The client read events 1..5 live; the instance froze before it logged past 1.
    await a.append(
        "alice",
        "t1",
        [LoggedEvent(1, {"type": "agent_message", "content": "mezza "})],
        expires_at=time.time() + 60,
    )
    with anyio.fail_after(WAIT_S):
        followed = [
            e
            async for e in follow(
                b, "alice", "t1", after=5, ended=ended_interrupted, poll_s=0.01, give_up_s=WAIT_S
            )
        ]
    assert followed == [LoggedEvent(6, {"type": "done", "status": "interrupted"})]


async def test_a_cancel_from_another_instance_stops_the_turn(two):
    a, b = two
    now = time.time()
    await a.claim("alice", "main", "t1", now=now, expires_at=now + 60)
    run = TurnRun(a, user_id="alice", turn_id="t1", tick_s=0.05)

    async def stoppable() -> AsyncGenerator[Word | Done, None]:
        yield Word(content="inizio ")
        await run.stop.wait()  # the model would still be writing
        yield Done(status="cancelled")

    with anyio.fail_after(WAIT_S):
        async with anyio.create_task_group() as tg:
            tg.start_soon(run.produce, stoppable())
            assert await b.request_cancel("alice", "t1", now=time.time())
    logged = await b.read("alice", "t1")
    assert texts(logged) == ["inizio ", "done"]
    assert logged[-1].data["status"] == "cancelled"


async def test_a_cancel_on_this_instance_reaches_the_turn_at_once(two):
    """A turn that runs here is stopped by the cancel itself, not at its next read of the
    flag (an hour away here); it leaves the running turns when it ends."""
    a, b = two
    now = time.time()
    await a.claim("alice", "main", "t1", now=now, expires_at=now + 60)
    running = RunningTurns()
    cancelled: list[str] = []
    run = TurnRun(
        a,
        user_id="alice",
        turn_id="t1",
        tick_s=3600,
        on_cancel=lambda: cancelled.append("t1"),
        running=running,
    )
    started = anyio.Event()

    async def stoppable() -> AsyncGenerator[Word | Done, None]:
        yield Word(content="inizio ")
        started.set()
        await run.stop.wait()
        yield Done(status="cancelled")

    with anyio.fail_after(WAIT_S):
        async with anyio.create_task_group() as tg:
            tg.start_soon(run.produce, stoppable())
            await started.wait()
            assert running.get("t1") is run
            running.stop("t2")  # another turn: nothing happens
            assert not run.stop.is_set()
            assert await b.request_cancel("alice", "t1", now=time.time())
            running.stop("t1")
            running.stop("t1")  # once is enough
        await run.ended.wait()
    assert cancelled == ["t1"]
    assert running.get("t1") is None and len(running) == 0
    assert await a.holder("alice", "main", now=time.time()) is None
    logged = await b.read("alice", "t1")
    assert texts(logged) == ["inizio ", "done"] and logged[-1].data["status"] == "cancelled"


async def test_a_turn_stopped_before_it_runs_here_stops_as_it_starts(two):
    """An interrupt that takes the thread while the turn is still being prepared (claimed, no
    event yet) stops it as it starts, before it calls the model; it waited for the turn's first
    read of its cancel flag. The stops of turns that never come are bounded."""
    a, _ = two
    running = RunningTurns()
    running.stop("t1")  # interrupted between its claim and its first event
    cancelled: list[str] = []
    run = TurnRun(
        a,
        user_id="alice",
        turn_id="t1",
        tick_s=3600,
        on_cancel=lambda: cancelled.append("t1"),
        running=running,
    )

    async def never_started() -> AsyncGenerator[Word | Done, None]:
        assert run.stop.is_set(), "the turn ran before its stop reached it"
        yield Done(status="cancelled")

    with anyio.fail_after(WAIT_S):
        await run.produce(never_started())
    assert cancelled == ["t1"]
    for n in range(EARLY_STOPS + 10):
        running.stop(f"elsewhere-{n}")  # turns of other instances
    assert len(running._stopped) == EARLY_STOPS and "elsewhere-0" not in running._stopped


class _HeldLog:
    """A turn log whose writes wait until `release` (a slow store): nothing is in it yet."""

    def __init__(self, log: TurnLogStore):
        self.log = log
        self.release = anyio.Event()

    def __getattr__(self, name: str) -> Any:
        return getattr(self.log, name)

    async def append(self, *args: Any, **kwargs: Any) -> None:
        await self.release.wait()
        await self.log.append(*args, **kwargs)

    async def finish(self, *args: Any, **kwargs: Any) -> None:
        await self.release.wait()
        await self.log.finish(*args, **kwargs)


async def test_a_client_that_rejoins_on_this_instance_gets_each_event_as_it_comes(two, settings):
    """Two clients rejoin a turn that runs here, while its log has nothing yet: each gets the
    events from the turn itself, at once and in order, to `done`; a client of another user
    does not."""
    from aircoach.services import open_stores
    from aircoach.turn.rejoin import turn_events

    a, _ = two
    held = _HeldLog(a)
    running = RunningTurns()
    run = TurnRun(held, user_id="alice", turn_id="t1", flush_events=1000, running=running)  # type: ignore[arg-type]
    feed_send, feed = anyio.create_memory_object_stream[Word | Done](100)

    async def fed() -> AsyncGenerator[Word | Done, None]:
        async with feed:
            async for event in feed:
                yield event

    chats = open_stores(settings).chats

    async def rejoin(user: str, after: int) -> AsyncGenerator[LoggedEvent, None] | None:
        return await turn_events(
            held,  # type: ignore[arg-type]
            chats,
            user,
            "t1",
            after=after,
            language="it",
            give_up_s=WAIT_S,
            caveats=True,
            running=running,
        )

    got: dict[str, list[LoggedEvent]] = {"first": [], "second": []}
    seen = {name: anyio.Event() for name in got}

    async def client(name: str, after: int) -> None:
        events = await rejoin("alice", after)
        assert events is not None
        async for event in events:
            got[name].append(event)
            if event.seq == 2:
                seen[name].set()

    with anyio.fail_after(WAIT_S):
        async with anyio.create_task_group() as tg:
            tg.start_soon(run.produce, fed())
            await feed_send.send(Word(content="uno "))
            await feed_send.send(Word(content="due "))
            tg.start_soon(client, "first", 0)
            tg.start_soon(client, "second", 1)
            for event in seen.values():
                await event.wait()  # both have event 2 though the log holds nothing
            assert await a.read("alice", "t1") == []
            assert await rejoin("bob", 0) is None  # not bob's turn, and not in bob's store
            async with feed_send:
                await feed_send.send(Word(content="tre "))
                await feed_send.send(Done())
            held.release.set()
    assert texts(got["first"]) == ["uno ", "due ", "tre ", "done"]
    assert [e.seq for e in got["second"]] == [2, 3, 4]
