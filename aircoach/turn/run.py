"""A turn that outlives its connection: `TurnRun` drives a turn's events to their end whatever
happens to the client that started it, numbers them, writes them to the turn log in batches,
hands them to the live connection, and stops the turn when someone cancels it from any
instance.

The HTTP layer runs `produce()` in the request's own task group (never in the background: on
serverless nothing may run once the request returns) and reads `live()` to send the events; a
client that leaves stops reading, and the turn goes on until it ends or its deadline passes.

Writes: a ticker writes the pending events every `TICK_S`, and at once when `FLUSH_EVENTS`
are waiting; the turn itself waits only for the last write, the one with `done` (the turn
yields `done` only after the turn document is stored). So a log that is slow or down never
holds the answer back or eats its deadline (`TURN_TIMEOUT_S`): during a store outage every
write waits `STORE_TIMEOUT_S`. Flushes are serialized, so no follower can see `done` before
an earlier event. The ticker also reads the cancel flag: a cancel reaches the turn within
about `TICK_S` plus one store read. A cancel made on the instance that runs the turn reaches it
at once (`RunningTurns`), and whoever waits for the turn to let go of its thread (a delete of
its conversation) can wait for its end (`ended`) instead of polling its claim.
"""

from __future__ import annotations

import logging
import time
from collections.abc import AsyncGenerator, AsyncIterator, Callable
from contextlib import aclosing
from typing import Any, Protocol

import anyio

from aircoach.turn.log import (
    CLAIM_LEASE_S,
    CLAIM_RENEW_S,
    LOG_TTL_S,
    LoggedEvent,
    TurnLogStore,
)

log = logging.getLogger(__name__)

TICK_S = 0.5
FLUSH_EVENTS = 64
EARLY_STOPS = 256  # stops kept of turns that do not run here (yet)


class _Event(Protocol):
    """An event of the turn: a pydantic model with a `type` field."""

    def model_dump(self, *, mode: str) -> dict[str, Any]: ...


class RunningTurns:
    """The turns this process runs, by id, while they run: a cancel made here stops its turn
    now instead of at the turn's next read of its cancel flag. The store's flag stays the
    record a turn on another instance reads; this is only the short way to a local one."""

    def __init__(self) -> None:
        self._runs: dict[str, TurnRun] = {}
        # Stops of turns that do not run here: one that starts here afterwards (interrupted
        # while it was being prepared, between its claim and its first event) stops as it
        # starts, before it calls the model. Most are other instances' turns: the newest
        # `EARLY_STOPS` are kept.
        self._stopped: dict[str, bool] = {}
        # Turns this process admitted that never ran (their claim failed with the store):
        # a claim the store took although it answered with an error names one of them, and
        # holds nothing (`aircoach.turn.admission`). The newest `EARLY_STOPS` are kept.
        self._never_ran: dict[str, bool] = {}

    def __len__(self) -> int:
        return len(self._runs)

    def get(self, turn_id: str) -> TurnRun | None:
        return self._runs.get(turn_id)

    def stop(self, turn_id: str) -> None:
        """Cancel the turn if it runs here. Call it once the store has taken the cancel (and
        has checked whose turn it is)."""
        if (run := self._runs.get(turn_id)) is not None:
            run.cancel()
            return
        self._stopped.pop(turn_id, None)
        self._stopped[turn_id] = True  # the newest last
        if len(self._stopped) > EARLY_STOPS:
            del self._stopped[next(iter(self._stopped))]

    def gave_up(self, turn_id: str) -> None:
        """The turn will not run (its claim failed): a claim of it holds nothing."""
        self._never_ran[turn_id] = True
        if len(self._never_ran) > EARLY_STOPS:
            del self._never_ran[next(iter(self._never_ran))]

    def never_ran(self, turn_id: str) -> bool:
        return turn_id in self._never_ran

    def add(self, run: TurnRun) -> None:
        self._runs[run.turn_id] = run
        if self._stopped.pop(run.turn_id, False):
            run.cancel()

    def discard(self, run: TurnRun) -> None:
        if self._runs.get(run.turn_id) is run:
            del self._runs[run.turn_id]


class TurnRun:
    """One turn's events, numbered from 1, on their way to the log and to the connection."""

    def __init__(
        self,
        log_store: TurnLogStore,
        *,
        user_id: str,
        turn_id: str,
        tick_s: float = TICK_S,
        flush_events: int = FLUSH_EVENTS,
        on_cancel: Callable[[], None] | None = None,
        clock: Callable[[], float] = time.time,
        running: RunningTurns | None = None,
    ):
        """`on_cancel` is called once when someone cancels the turn (the turn's `cancel`);
        `running`: the process's running turns, which this one joins while it runs."""
        self.store = log_store
        self.on_cancel = on_cancel
        self.running = running
        self.user_id = user_id
        self.turn_id = turn_id
        self.tick_s = tick_s
        self.flush_events = flush_events
        self.clock = clock
        self.stop = anyio.Event()  # set when someone cancels the turn; the turn watches it
        self.events: list[LoggedEvent] = []  # every event so far, for the live connection
        self.finished = False
        self.ended = anyio.Event()  # set once the last write is done (or failed)
        self.writes = 0  # store writes of the log (a benchmark reads it)
        self._written = 0  # events already in the store
        self._flush_lock = anyio.Lock()
        self._changed = anyio.Event()  # set at the next event or the end, then replaced
        self._watched = False  # a reader waits on `_changed`
        self._backlog = anyio.Event()  # FLUSH_EVENTS are waiting: the ticker goes at once
        self._log_failed = False
        self._freed = False  # the last write went through: the thread is free

    async def produce(self, events: AsyncGenerator[_Event, None]) -> None:
        """Run `events` to their end: number each, keep it, write the log, wake the reader.
        The last write also frees the turn's thread: with `done`, before the reader sees it
        (a client that read `done` may send its next message at once), or when the events
        end any other way."""
        if self.running is not None:
            self.running.add(self)
        try:
            async with anyio.create_task_group() as tg:
                tg.start_soon(self._tick)
                async with aclosing(events):
                    async for event in events:
                        logged = LoggedEvent(len(self.events) + 1, event.model_dump(mode="json"))
                        if logged.type == "done":
                            await self._flush(last=True, ending=logged)
                            continue
                        self.events.append(logged)
                        self._wake()
                        if self._pending() >= self.flush_events:
                            self._backlog.set()  # the ticker writes them now
                tg.cancel_scope.cancel()  # the ticker
        finally:
            with anyio.CancelScope(shield=True):
                await self._flush(last=True)  # after `done`'s, only if that one failed
            if self.running is not None:
                self.running.discard(self)
            self.finished = True
            self.ended.set()
            self._wake()

    def cancel(self) -> None:
        """Stop the turn (once): someone asked, on this instance or through the store."""
        if self.stop.is_set():
            return
        log.info("turn %s: cancel requested", self.turn_id)
        self.stop.set()
        if self.on_cancel is not None:
            self.on_cancel()

    async def live(self, after: int = 0) -> AsyncIterator[LoggedEvent]:
        """The events after number `after`, as they come, until the last one."""
        sent = after
        while True:
            while sent < len(self.events):
                sent += 1
                yield self.events[sent - 1]
            if self.finished:
                return
            # No await since the check above: the producer cannot add an event unseen.
            await self.changed()

    async def changed(self) -> None:
        """Wait for the next event or the end. Call it with no await since reading `events`
        and `finished` (else an event may come unseen); any number of readers (the live
        connection, and clients that rejoin the turn on this instance)."""
        self._watched = True
        await self._changed.wait()

    def _wake(self) -> None:
        if self._watched:
            self._changed.set()
            self._changed = anyio.Event()
            self._watched = False

    def _pending(self) -> int:
        return len(self.events) - self._written

    async def _tick(self) -> None:
        renewed = self.clock()
        while True:
            with anyio.move_on_after(self.tick_s):
                await self._backlog.wait()
            self._backlog = anyio.Event()
            if self._pending():
                await self._flush()
            if self.clock() - renewed >= CLAIM_RENEW_S:
                renewed = self.clock()
                await self._renew(renewed + CLAIM_LEASE_S)
            if not self.stop.is_set() and await self._cancel_requested():
                self.cancel()

    async def _renew(self, expires_at: float) -> None:
        """Keep the thread's claim while the turn runs (a failure is logged: the claim then
        lapses and a second message may start beside this turn)."""
        try:
            with anyio.CancelScope(shield=True):
                await self.store.renew(self.user_id, self.turn_id, expires_at=expires_at)
        except Exception:
            log.warning("turn %s: its thread claim was not renewed", self.turn_id, exc_info=True)

    async def _cancel_requested(self) -> bool:
        try:
            return await self.store.cancel_requested(self.turn_id)
        except Exception:
            log.warning("turn %s: cancel flag unreadable", self.turn_id, exc_info=True)
            return False

    async def _flush(self, *, last: bool = False, ending: LoggedEvent | None = None) -> None:
        """Write what is pending; `last`: the turn's last write, which frees its thread too
        (once); `ending` (`done`) is written with it and only then added to the events, so
        that a client that reads `done` finds its thread free. A log that fails does not fail
        the turn (the turn itself is stored apart): followers then see fewer events, the
        failure is logged once, and a thread left held frees itself when its claim lapses
        (`CLAIM_LEASE_S`)."""
        async with self._flush_lock:
            batch = self.events[self._written :]
            if ending is not None:
                batch.append(ending)
            last = last and not self._freed
            if not batch and not last:
                return
            expires_at = self.clock() + LOG_TTL_S
            try:
                with anyio.CancelScope(shield=True):
                    if last:
                        await self.store.finish(
                            self.user_id, self.turn_id, batch, expires_at=expires_at
                        )
                    else:
                        await self.store.append(
                            self.user_id, self.turn_id, batch, expires_at=expires_at
                        )
            except Exception:
                if last:  # at most twice: with `done`, and once more as the run ends
                    log.warning(
                        "turn %s: the turn log's last write failed; its thread stays claimed "
                        "until the claim lapses (CLAIM_LEASE_S=%gs)",
                        self.turn_id,
                        CLAIM_LEASE_S,
                        exc_info=not self._log_failed,
                    )
                elif not self._log_failed:
                    log.warning("turn %s: turn log write failed", self.turn_id, exc_info=True)
                self._log_failed = True
            else:
                self._written += len(batch)
                self._freed = self._freed or last
                self.writes += 1
            finally:
                if ending is not None:
                    self.events.append(ending)
                    self._wake()
