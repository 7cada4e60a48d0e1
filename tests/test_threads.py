"""`aircoach.threads.Threads`: the hop off the loop for SQLite statements and the citation check.
What callers rely on: results and errors come back; a cancelled caller waits for a call it
started (or, when it abandons, does not); no more than `limit` calls run at once; nothing
starts before the first call. Waits are on events, with generous bounds."""

from __future__ import annotations

import asyncio
import threading

import anyio
import pytest

from aircoach.threads import Threads

WAIT_S = 30  # a bound for what must happen, never a delay


def _names(pool: Threads) -> set[str]:
    return {t.name for t in threading.enumerate() if t.name.startswith(f"{pool.name}-")}


async def test_a_call_returns_its_result_from_another_thread():
    pool = Threads("test-result", limit=2)
    assert await pool.run(threading.get_ident) != threading.get_ident()
    assert await pool.run(lambda: 41 + 1) == 42


async def test_an_error_in_the_call_is_raised_to_the_caller():
    pool = Threads("test-error", limit=1)

    def fails() -> None:
        raise ValueError("from the thread")

    with pytest.raises(ValueError, match="from the thread"):
        await pool.run(fails)
    assert await pool.run(lambda: "still serving") == "still serving"


async def test_no_thread_starts_before_the_first_call_and_never_more_than_the_limit():
    pool = Threads("test-bounded", limit=3)
    assert _names(pool) == set()
    await asyncio.gather(*(pool.run(lambda: None) for _ in range(20)))
    assert _names(pool) == {"test-bounded-1", "test-bounded-2", "test-bounded-3"}


async def test_calls_beyond_the_limit_wait_for_a_free_thread():
    pool = Threads("test-queue", limit=2)
    started = [threading.Event() for _ in range(3)]
    release = threading.Event()

    def blocked(i: int) -> int:
        started[i].set()
        release.wait(WAIT_S)
        return i

    async with anyio.create_task_group() as tg:
        results: list[int] = []

        async def call(i: int) -> None:
            results.append(await pool.run(lambda: blocked(i)))

        for i in range(3):
            tg.start_soon(call, i)
        # Two calls hold both threads; the third is queued, not running.
        assert await anyio.to_thread.run_sync(started[0].wait, WAIT_S)
        assert await anyio.to_thread.run_sync(started[1].wait, WAIT_S)
        assert not started[2].is_set()
        release.set()
    assert sorted(results) == [0, 1, 2]
    assert started[2].is_set()


async def test_a_cancelled_caller_waits_for_the_call_to_end():
    """As anyio.to_thread.run_sync: a write the caller started lands before the caller goes on."""
    pool = Threads("test-shield", limit=1)
    started, release = threading.Event(), threading.Event()
    ended: list[str] = []

    def write() -> None:
        started.set()
        release.wait(WAIT_S)
        ended.append("written")

    async def caller(scope: anyio.CancelScope) -> None:
        with scope:
            await pool.run(write)
        ended.append("caller on")

    scope = anyio.CancelScope()
    async with anyio.create_task_group() as tg:
        tg.start_soon(caller, scope)
        assert await anyio.to_thread.run_sync(started.wait, WAIT_S)
        scope.cancel()
        for _ in range(10):  # let the cancellation reach the caller: it must still wait
            await asyncio.sleep(0)
        assert ended == []
        release.set()
    assert ended == ["written", "caller on"]


async def test_an_abandoning_caller_returns_at_once_and_the_call_ends_apart():
    pool = Threads("test-abandon", limit=1)
    started, release, done = threading.Event(), threading.Event(), threading.Event()

    def check() -> str:
        started.set()
        release.wait(WAIT_S)
        done.set()
        return "verdict"

    with anyio.CancelScope() as scope:
        async with anyio.create_task_group() as tg:

            async def cancel_when_started() -> None:
                assert await anyio.to_thread.run_sync(started.wait, WAIT_S)
                scope.cancel()

            tg.start_soon(cancel_when_started)
            await pool.run(check, abandon_on_cancel=True)
    assert scope.cancelled_caught
    assert not done.is_set()  # the caller went on while the call still ran
    release.set()
    assert await anyio.to_thread.run_sync(done.wait, WAIT_S)
    # The abandoned call's thread is free again.
    assert await pool.run(lambda: "next") == "next"


def test_a_result_for_a_closed_loop_is_dropped():
    """A call that ends after its loop closed (a test's loop, a shut-down server) must not
    kill the thread: the next call is still served."""
    pool = Threads("test-closed", limit=1)
    started, release = threading.Event(), threading.Event()

    def slow() -> str:
        started.set()
        release.wait(WAIT_S)
        return "late"

    async def start_and_leave() -> None:
        task = asyncio.ensure_future(pool.run(slow, abandon_on_cancel=True))
        await anyio.to_thread.run_sync(started.wait, WAIT_S)
        task.cancel()

    asyncio.run(start_and_leave())  # the loop closes while `slow` still runs
    release.set()
    assert asyncio.run(pool.run(lambda: "served")) == "served"
