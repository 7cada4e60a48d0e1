"""SQLite reservations and quota counters (see `aircoach.turn.guards`): each operation is
one transaction, so instances sharing the file never count past a limit. Each write that adds
a row first drops up to `_PURGE_BATCH` rows that expired by the caller's `now` (what MongoDB's
TTL indexes do), so the file never grows without bound and no request pays for a backlog."""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence
from pathlib import Path

from aircoach.store.sqlite import BUSY_TIMEOUT_S, _Sqlite
from aircoach.turn.guards import Reservation

_SCHEMA = """
CREATE TABLE IF NOT EXISTS idempotency (
    userId TEXT NOT NULL,
    key TEXT NOT NULL,
    turn_id TEXT NOT NULL,
    created_at REAL NOT NULL,
    expires_at REAL NOT NULL,
    fingerprint TEXT NOT NULL DEFAULT '',
    PRIMARY KEY (userId, key)
);
CREATE TABLE IF NOT EXISTS quotas (
    userId TEXT NOT NULL,
    window TEXT NOT NULL,
    n INTEGER NOT NULL,
    expires_at REAL NOT NULL,
    PRIMARY KEY (userId, window)
);
CREATE INDEX IF NOT EXISTS idempotency_expiry ON idempotency (expires_at);
CREATE INDEX IF NOT EXISTS quotas_expiry ON quotas (expires_at);
"""
_PURGE_BATCH = 200  # expired rows dropped per write: each write adds at most one


def _purge(c: sqlite3.Connection, table: str, now: float) -> None:
    """Drop up to `_PURGE_BATCH` rows of `table` that expired by `now` (through its
    `expires_at` index)."""
    c.execute(
        f"DELETE FROM {table} WHERE rowid IN "
        f"(SELECT rowid FROM {table} WHERE expires_at <= ? LIMIT ?)",
        (now, _PURGE_BATCH),
    )


def _migrate(conn: sqlite3.Connection) -> None:
    """A file made before reservations kept their question's digest gets the column (its
    rows keep "": they match any question)."""
    conn.isolation_level = None  # explicit transaction: BEGIN IMMEDIATE serialises writers
    conn.execute("BEGIN IMMEDIATE")
    try:
        columns = {row["name"] for row in conn.execute("PRAGMA table_info(idempotency)")}
        if "fingerprint" not in columns:
            conn.execute("ALTER TABLE idempotency ADD COLUMN fingerprint TEXT NOT NULL DEFAULT ''")
        conn.execute("COMMIT")
    except BaseException:
        conn.execute("ROLLBACK")
        raise


class SqliteReservationStore:
    def __init__(self, path: Path, *, timeout_s: float = BUSY_TIMEOUT_S):
        self._db = _Sqlite(path, schema=_SCHEMA, migrate=_migrate, timeout_s=timeout_s)

    async def reserve(
        self,
        user_id: str,
        key: str,
        turn_id: str,
        *,
        now: float,
        ttl_s: float,
        fingerprint: str = "",
    ) -> Reservation | None:
        def op(c: sqlite3.Connection) -> Reservation | None:
            _purge(c, "idempotency", now)
            # An expired reservation is replaced in the same statement that would insert.
            c.execute(
                "INSERT INTO idempotency (userId, key, turn_id, created_at, expires_at, "
                "fingerprint) VALUES (?, ?, ?, ?, ?, ?) ON CONFLICT (userId, key) DO "
                "UPDATE SET turn_id = excluded.turn_id, created_at = excluded.created_at, "
                "expires_at = excluded.expires_at, fingerprint = excluded.fingerprint "
                "WHERE idempotency.expires_at <= ?",
                (user_id, key, turn_id, now, now + ttl_s, fingerprint, now),
            )
            row = c.execute(
                "SELECT turn_id, created_at, fingerprint FROM idempotency "
                "WHERE userId = ? AND key = ?",
                (user_id, key),
            ).fetchone()
            if row["turn_id"] == turn_id:
                return None
            return Reservation(row["turn_id"], row["created_at"], row["fingerprint"])

        return await self._db.run(op)

    async def take_over(
        self, user_id: str, key: str, *, held_by: str, turn_id: str, now: float, ttl_s: float
    ) -> bool:
        cursor = await self._db.run(
            lambda c: c.execute(
                "UPDATE idempotency SET turn_id = ?, created_at = ?, expires_at = ? "
                "WHERE userId = ? AND key = ? AND turn_id = ?",
                (turn_id, now, now + ttl_s, user_id, key, held_by),
            )
        )
        return cursor.rowcount == 1

    async def release(self, user_id: str, key: str, turn_id: str) -> None:
        await self._db.run(
            lambda c: c.execute(
                "DELETE FROM idempotency WHERE userId = ? AND key = ? AND turn_id = ?",
                (user_id, key, turn_id),
            )
        )

    async def forget_turns(self, user_id: str, turn_ids: Sequence[str]) -> None:
        rows = [(user_id, turn_id) for turn_id in turn_ids]
        await self._db.run(
            lambda c: c.executemany(
                "DELETE FROM idempotency WHERE userId = ? AND turn_id = ?", rows
            )
        )


class SqliteQuotaStore:
    def __init__(self, path: Path, *, timeout_s: float = BUSY_TIMEOUT_S):
        self._db = _Sqlite(path, schema=_SCHEMA, timeout_s=timeout_s)

    async def hit(
        self, user_id: str, window: str, *, limit: int, now: float, expires_at: float
    ) -> bool:
        def op(c: sqlite3.Connection) -> bool:
            _purge(c, "quotas", now)
            # One statement: the increment happens only below the limit, whoever runs it.
            row = c.execute(
                "INSERT INTO quotas VALUES (?, ?, 1, ?) ON CONFLICT (userId, window) DO "
                "UPDATE SET n = n + 1 WHERE quotas.n < ? RETURNING n",
                (user_id, window, expires_at, limit),
            ).fetchone()
            return row is not None and row["n"] <= limit

        return await self._db.run(op)

    async def refund(self, user_id: str, window: str) -> None:
        await self._db.run(
            lambda c: c.execute(
                "UPDATE quotas SET n = n - 1 WHERE userId = ? AND window = ? AND n > 0",
                (user_id, window),
            )
        )
