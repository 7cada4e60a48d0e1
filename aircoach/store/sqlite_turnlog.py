"""SQLite turn log and running-turn claims (see `aircoach.turn.log`): each operation is one
transaction, so instances sharing the file never both hold a thread."""

from __future__ import annotations

import json
import sqlite3
import threading
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TypeVar

from aircoach.store.sqlite import BUSY_TIMEOUT_S, _Sqlite
from aircoach.turn.log import LoggedEvent, RunningTurn

_SCHEMA = """
CREATE TABLE IF NOT EXISTS turn_events (
    turn_id TEXT NOT NULL,
    seq INTEGER NOT NULL,
    userId TEXT NOT NULL,
    type TEXT NOT NULL,
    data TEXT NOT NULL,
    expires_at REAL NOT NULL,
    PRIMARY KEY (turn_id, seq)
) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS turn_events_expiry ON turn_events (expires_at);
CREATE TABLE IF NOT EXISTS running_turns (
    userId TEXT NOT NULL,
    thread TEXT NOT NULL,
    turn_id TEXT NOT NULL,
    expires_at REAL NOT NULL,
    PRIMARY KEY (userId, thread)
);
CREATE INDEX IF NOT EXISTS running_turns_turn ON running_turns (turn_id);
CREATE TABLE IF NOT EXISTS turn_cancels (
    turn_id TEXT PRIMARY KEY,
    expires_at REAL NOT NULL
);
"""
T = TypeVar("T")
_PURGE_BATCH = 500  # expired entries dropped per claim: the log never grows without bound


_CLAIM = (
    "SELECT r.turn_id, r.thread, r.expires_at, c.turn_id IS NOT NULL AS cancel "
    "FROM running_turns r LEFT JOIN turn_cancels c ON c.turn_id = r.turn_id "
)


# One writer at a time per file in this process. SQLite's busy handler is not fair: with many
# threads of one process waiting for the write lock (every running turn writes its log), an
# unlucky one backed off past the busy timeout (503s under a 32-turn load). Waiting here is in
# order; only other processes still meet the busy handler.
_writers: dict[Path, threading.Lock] = {}
_writers_lock = threading.Lock()


def _writer_lock(path: Path) -> threading.Lock:
    with _writers_lock:
        return _writers.setdefault(path.absolute(), threading.Lock())


def _write(c: sqlite3.Connection) -> sqlite3.Connection:
    """Take the write lock first: a deferred transaction that reads before it writes may be
    refused at once ("database is locked") when another connection wrote in between, while
    BEGIN IMMEDIATE waits its turn like any writer (the connection's busy timeout)."""
    if not c.in_transaction:
        c.execute("BEGIN IMMEDIATE")
    return c


def _insert(
    c: sqlite3.Connection,
    user_id: str,
    turn_id: str,
    events: Sequence[LoggedEvent],
    expires_at: float,
) -> None:
    c.executemany(
        "INSERT INTO turn_events VALUES (?, ?, ?, ?, ?, ?) ON CONFLICT (turn_id, seq) DO NOTHING",
        [(turn_id, e.seq, user_id, e.type, e.text, expires_at) for e in events],
    )


def _claim_of(row: sqlite3.Row) -> RunningTurn:
    return RunningTurn(row["turn_id"], row["thread"], row["expires_at"], bool(row["cancel"]))


def _ask_to_stop(c: sqlite3.Connection, turn_id: str, expires_at: float) -> None:
    c.execute(
        "INSERT INTO turn_cancels VALUES (?, ?) ON CONFLICT (turn_id) DO NOTHING",
        (turn_id, expires_at),
    )


class SqliteTurnLog:
    def __init__(self, path: Path, *, timeout_s: float = BUSY_TIMEOUT_S):
        self._db = _Sqlite(path, schema=_SCHEMA, timeout_s=timeout_s)
        self._lock = _writer_lock(path)

    async def _writing(self, op: Callable[[sqlite3.Connection], T]) -> T:
        """`op` (a write) in a worker thread, one writer of this file at a time."""

        def locked(c: sqlite3.Connection) -> T:
            with self._lock, c:  # committed before the next writer goes
                return op(_write(c))

        return await self._db.run(locked)

    async def append(
        self, user_id: str, turn_id: str, events: Sequence[LoggedEvent], *, expires_at: float
    ) -> None:
        await self._writing(lambda c: _insert(c, user_id, turn_id, events, expires_at))

    async def finish(
        self, user_id: str, turn_id: str, events: Sequence[LoggedEvent], *, expires_at: float
    ) -> None:
        def op(c: sqlite3.Connection) -> None:
            _insert(c, user_id, turn_id, events, expires_at)
            c.execute(
                "DELETE FROM running_turns WHERE userId = ? AND turn_id = ?", (user_id, turn_id)
            )

        await self._writing(op)

    async def read(
        self, user_id: str, turn_id: str, *, after: int = 0, limit: int = 500
    ) -> list[LoggedEvent]:
        rows = await self._db.run(
            lambda c: c.execute(
                "SELECT seq, data FROM turn_events WHERE turn_id = ? AND seq > ? AND userId = ? "
                "ORDER BY seq LIMIT ?",
                (turn_id, after, user_id, limit),
            ).fetchall(),
            read=True,
        )
        return [LoggedEvent(row["seq"], json.loads(row["data"])) for row in rows]

    async def claim(
        self, user_id: str, thread: str, turn_id: str, *, now: float, expires_at: float
    ) -> RunningTurn | None:
        def op(c: sqlite3.Connection) -> RunningTurn | None:
            c.execute(
                "DELETE FROM turn_events WHERE (turn_id, seq) IN (SELECT turn_id, seq FROM "
                "turn_events WHERE expires_at < ? LIMIT ?)",
                (now, _PURGE_BATCH),
            )
            c.execute("DELETE FROM turn_cancels WHERE expires_at < ?", (now,))
            # An expired claim is replaced in the statement that would insert.
            c.execute(
                "INSERT INTO running_turns VALUES (?, ?, ?, ?) ON CONFLICT (userId, thread) "
                "DO UPDATE SET turn_id = excluded.turn_id, expires_at = excluded.expires_at "
                "WHERE running_turns.expires_at <= ?",
                (user_id, thread, turn_id, expires_at, now),
            )
            row = c.execute(
                _CLAIM + "WHERE r.userId = ? AND r.thread = ?", (user_id, thread)
            ).fetchone()
            return None if row["turn_id"] == turn_id else _claim_of(row)

        return await self._writing(op)

    async def take_over(
        self,
        user_id: str,
        thread: str,
        *,
        held_by: str,
        turn_id: str,
        now: float,
        expires_at: float,
    ) -> bool:
        def op(c: sqlite3.Connection) -> bool:
            moved = c.execute(
                "UPDATE running_turns SET turn_id = ?, expires_at = ? "
                "WHERE userId = ? AND thread = ? AND turn_id = ?",
                (turn_id, expires_at, user_id, thread, held_by),
            ).rowcount
            if moved:
                _ask_to_stop(c, held_by, expires_at)
            return moved == 1

        return await self._writing(op)

    async def release(self, user_id: str, thread: str, turn_id: str) -> None:
        await self._writing(
            lambda c: c.execute(
                "DELETE FROM running_turns WHERE userId = ? AND thread = ? AND turn_id = ?",
                (user_id, thread, turn_id),
            )
        )

    async def renew(self, user_id: str, turn_id: str, *, expires_at: float) -> None:
        await self._writing(
            lambda c: c.execute(
                "UPDATE running_turns SET expires_at = ? WHERE userId = ? AND turn_id = ?",
                (expires_at, user_id, turn_id),
            )
        )

    async def running(self, user_id: str, turn_id: str, *, now: float) -> RunningTurn | None:
        row = await self._db.run(
            lambda c: c.execute(
                _CLAIM + "WHERE r.turn_id = ? AND r.userId = ? AND r.expires_at > ? LIMIT 1",
                (turn_id, user_id, now),
            ).fetchone()
        )
        return _claim_of(row) if row else None

    async def request_cancel(self, user_id: str, turn_id: str, *, now: float) -> bool:
        def op(c: sqlite3.Connection) -> bool:
            row = c.execute(
                "SELECT expires_at FROM running_turns WHERE turn_id = ? AND userId = ? "
                "AND expires_at > ?",
                (turn_id, user_id, now),
            ).fetchone()
            if row is None:
                return False
            _ask_to_stop(c, turn_id, row["expires_at"])
            return True

        return await self._writing(op)

    async def holder(self, user_id: str, thread: str, *, now: float) -> RunningTurn | None:
        row = await self._db.run(
            lambda c: c.execute(
                _CLAIM + "WHERE r.userId = ? AND r.thread = ? AND r.expires_at > ?",
                (user_id, thread, now),
            ).fetchone()
        )
        return _claim_of(row) if row else None

    async def forget(self, user_id: str, turn_ids: Sequence[str]) -> None:
        rows = [(turn_id, user_id) for turn_id in turn_ids]
        await self._writing(
            lambda c: c.executemany(
                "DELETE FROM turn_events WHERE turn_id = ? AND userId = ?", rows
            )
        )

    async def cancel_requested(self, turn_id: str) -> bool:
        row = await self._db.run(
            lambda c: c.execute(
                "SELECT 1 FROM turn_cancels WHERE turn_id = ?", (turn_id,)
            ).fetchone()
        )
        return row is not None
