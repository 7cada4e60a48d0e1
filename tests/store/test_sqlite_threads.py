"""What an SQLite operation hands back to the event loop must not hold its thread's connection.
A cursor did (a statement of the connection): dropped on the loop's thread, it was reset there
while the operation's thread ran the same cached statement again, and the next write failed
with "bad parameter or other API misuse" (`tests/quiz/test_tools.py`, 3 runs in 12)."""

from __future__ import annotations

import asyncio
import sqlite3
from pathlib import Path

import pytest

from aircoach.store.sqlite import _Sqlite

SCHEMA = "CREATE TABLE IF NOT EXISTS t (k INTEGER PRIMARY KEY, v TEXT);"


async def test_a_cursor_comes_back_closed_with_its_row_count(tmp_path: Path):
    db = _Sqlite(tmp_path / "db.sqlite3", schema=SCHEMA)
    cursor = await db.run(lambda c: c.executemany("INSERT INTO t VALUES (?, 'a')", [(1,), (2,)]))
    assert cursor.rowcount == 2
    with pytest.raises(sqlite3.ProgrammingError, match="closed cursor"):
        cursor.fetchall()
    updated = await db.run(lambda c: c.execute("UPDATE t SET v = 'b' WHERE k = 1"))
    assert updated.rowcount == 1


async def test_concurrent_writes_whose_cursors_are_dropped_on_the_loop_all_land(tmp_path: Path):
    db = _Sqlite(tmp_path / "db.sqlite3", schema=SCHEMA)

    async def write(k: int) -> None:
        # The result is dropped at once, on the loop's thread, as the stores' callers do.
        await db.run(lambda c: c.executemany("INSERT INTO t VALUES (?, ?)", [(k, "x")]))

    for rounds in range(20):
        await asyncio.gather(*(write(rounds * 50 + k) for k in range(50)))
    count = await db.run(lambda c: c.execute("SELECT COUNT(*) FROM t").fetchone()[0])
    assert count == 1000
