"""Short blocking calls off the event loop: a few long-lived threads fed by one queue.

A turn makes seven or eight such calls (seven SQLite operations; the citation check of an
answer that cites something or is long). Through `anyio.to_thread.run_sync` each cost about
177 us of CPU on one pinned core (a capacity limiter, a cancel scope, a future chained to a
future, an idle-thread reaper); through this queue about 96 us (70 us for a call its caller
may abandon): a turn 16.0 -> 15.3 ms of CPU in process. On a faster machine (2026-11-26
night) a call costs 36 us pinned to one core, and about 110 us when the thread wakes on the
other core. The threads start at the first call, `limit` of them, and live as long as the
process: nothing is started at import, and their number is bounded.
"""

from __future__ import annotations

import asyncio
import contextlib
import queue
import threading
from collections.abc import Callable
from typing import Any, TypeVar

import anyio

T = TypeVar("T")

_Job = tuple[asyncio.AbstractEventLoop, "asyncio.Future[Any]", Callable[[], Any]]


class Threads:
    """Runs `fn()` in one of up to `limit` threads and returns (or raises) its result.

    As `anyio.to_thread.run_sync`: the caller's cancellation waits for the call to end (a
    write it started still lands), unless `abandon_on_cancel`: then the caller returns at once
    and the call ends in its thread, its result dropped (for work whose result alone counts)."""

    def __init__(self, name: str, limit: int):
        self.name = name
        self.limit = limit
        self._jobs: queue.SimpleQueue[_Job] = queue.SimpleQueue()
        self._started = False
        self._start_lock = threading.Lock()

    async def run(self, fn: Callable[[], T], *, abandon_on_cancel: bool = False) -> T:
        if not self._started:
            self._start()
        loop = asyncio.get_running_loop()
        future: asyncio.Future[T] = loop.create_future()
        self._jobs.put((loop, future, fn))
        if abandon_on_cancel:
            return await future
        with anyio.CancelScope(shield=True):
            result = await future
        return result

    def _start(self) -> None:
        """All the threads at the first call: an idle one waits on the queue, costing nothing."""
        with self._start_lock:
            if self._started:
                return
            for number in range(1, self.limit + 1):
                name = f"{self.name}-{number}"
                threading.Thread(target=self._work, name=name, daemon=True).start()
            self._started = True

    def _work(self) -> None:
        while True:
            job = self._jobs.get()
            _call(*job)
            del job  # nothing of a finished call is kept alive while the thread waits


def _call(
    loop: asyncio.AbstractEventLoop, future: asyncio.Future[Any], fn: Callable[[], Any]
) -> None:
    try:
        result = fn()
    except BaseException as exc:  # handed to the caller, whatever it is
        _hand_back(loop, _fail, future, exc)
    else:
        _hand_back(loop, _resolve, future, result)


def _hand_back(loop: asyncio.AbstractEventLoop, set_it: Callable[..., None], *args: Any) -> None:
    # RuntimeError: the loop closed meanwhile, and nobody waits for this result.
    with contextlib.suppress(RuntimeError):
        loop.call_soon_threadsafe(set_it, *args)


def _resolve(future: asyncio.Future[Any], result: Any) -> None:
    if not future.done():
        future.set_result(result)


def _fail(future: asyncio.Future[Any], exc: BaseException) -> None:
    if not future.done():
        future.set_exception(exc)
