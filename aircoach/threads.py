"""Short blocking calls off the event loop: a few long-lived threads fed by one queue.

A turn makes seven or eight such calls (seven SQLite operations, in four hops since
`together()`; the citation check of an answer that cites something or is long). Through `anyio.to_thread.run_sync` each cost about
177 us of CPU on one pinned core (a capacity limiter, a cancel scope, a future chained to a
future, an idle-thread reaper); through this queue about 96 us (70 us for a call its caller
may abandon): a turn 16.0 -> 15.3 ms of CPU in process. On a faster machine (2026-11-26
night) a call costs 36 us pinned to one core, and about 110 us when the thread wakes on the
other core. The threads start at the first call, `limit` of them, and live as long as the
process: nothing is started at import, and their number is bounded.

Most of a call's cost is the hop itself: the thread wakes, the loop wakes, and the two take
the GIL from each other (context switches, each with its CPU). Calls that tasks start side
by side under `together()` go to a thread as one job, one hop for all of them (the reads at
the start of a turn).
"""

from __future__ import annotations

import asyncio
import contextlib
import queue
import threading
from collections.abc import Callable, Iterator
from contextvars import ContextVar
from typing import Any, TypeVar

import anyio

T = TypeVar("T")

_Call = tuple["asyncio.Future[Any]", Callable[[], Any]]
_Job = tuple[asyncio.AbstractEventLoop, list[_Call]]


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
        gathering = _gathering.get()
        if gathering is not None and gathering.open:
            gathering.add(loop, self, (future, fn))
        else:
            self._jobs.put((loop, [(future, fn)]))
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
            loop, calls = self._jobs.get()
            outcomes = [_outcome(fn) for _future, fn in calls]
            # RuntimeError: the loop closed meanwhile, and nobody waits for these results.
            with contextlib.suppress(RuntimeError):
                loop.call_soon_threadsafe(_settle, calls, outcomes)
            del calls, outcomes  # nothing of a finished job is kept alive while the thread waits


@contextlib.contextmanager
def together() -> Iterator[None]:
    """Calls to `Threads.run` that tasks started in this block make in the same turn of the
    event loop run as one job per `Threads`, in the order made, in one thread: one hop for
    all of them instead of one each. A call made later (a task that awaited something first,
    or a second call) goes on its own, as outside the block. For short calls that do not
    wait on each other: each still gets its own result or error, but a slow one delays the
    others of its job."""
    token = _gathering.set(_Gathering())
    try:
        yield
    finally:
        _gathering.reset(token)


class _Gathering:
    """The calls made under one `together()` block that have not gone to a thread yet."""

    __slots__ = ("jobs", "open")

    def __init__(self) -> None:
        self.jobs: dict[Threads, _Job] = {}
        self.open = True

    def add(self, loop: asyncio.AbstractEventLoop, threads: Threads, call: _Call) -> None:
        if not self.jobs:
            loop.call_soon(self._hand_over)  # after the calls made in this turn of the loop
        self.jobs.setdefault(threads, (loop, []))[1].append(call)

    def _hand_over(self) -> None:
        self.open = False
        for threads, job in self.jobs.items():
            threads._jobs.put(job)
        self.jobs.clear()


_gathering: ContextVar[_Gathering | None] = ContextVar("aircoach_threads_gathering", default=None)


def _outcome(fn: Callable[[], Any]) -> tuple[bool, Any]:
    try:
        return True, fn()
    except BaseException as exc:  # handed to the caller, whatever it is
        return False, exc


def _settle(calls: list[_Call], outcomes: list[tuple[bool, Any]]) -> None:
    for (future, _fn), (ok, value) in zip(calls, outcomes, strict=True):
        if future.done():  # its caller abandoned it
            continue
        if ok:
            future.set_result(value)
        else:
            future.set_exception(value)
