"""SQLite long-term memory (`aircoach.memory.ports.MemoryStore`): one table beside the chats,
each operation one transaction, so instances sharing the file keep each user's bound."""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence
from pathlib import Path

from aircoach.memory.ports import SINGLE_KINDS, MemoryItem, NewItem, new_item_id
from aircoach.store.sqlite import BUSY_TIMEOUT_S, _Sqlite

_SCHEMA = """
CREATE TABLE IF NOT EXISTS memory (
    id TEXT PRIMARY KEY,
    userId TEXT NOT NULL,
    conversation_id TEXT NOT NULL,
    kind TEXT NOT NULL,
    text TEXT NOT NULL,
    created_at TEXT NOT NULL,
    turn_id TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS memory_user ON memory (userId, id);
CREATE INDEX IF NOT EXISTS memory_conversation ON memory (userId, conversation_id);
"""
_FIELDS = "id, conversation_id, kind, text, created_at, turn_id"


class SqliteMemoryStore:
    def __init__(self, path: Path, *, timeout_s: float = BUSY_TIMEOUT_S):
        self._db = _Sqlite(path, schema=_SCHEMA, timeout_s=timeout_s)

    async def add(self, user_id: str, items: Sequence[NewItem], *, keep: int) -> None:
        def op(c: sqlite3.Connection) -> None:
            for item in reversed(items):  # the first is the newest
                if item.kind in SINGLE_KINDS:
                    c.execute(
                        "DELETE FROM memory WHERE userId = ? AND kind = ?", (user_id, item.kind)
                    )
                else:
                    c.execute(
                        "DELETE FROM memory WHERE userId = ? AND text = ?", (user_id, item.text)
                    )
                c.execute(
                    "INSERT INTO memory VALUES (?, ?, ?, ?, ?, ?, ?)",
                    (
                        new_item_id(),
                        user_id,
                        item.conversation_id,
                        item.kind,
                        item.text,
                        item.created_at,
                        item.turn_id,
                    ),
                )
            c.execute(
                "DELETE FROM memory WHERE userId = ? AND id NOT IN "
                "(SELECT id FROM memory WHERE userId = ? ORDER BY id DESC LIMIT ?)",
                (user_id, user_id, keep),
            )

        if items:
            await self._db.run(op)

    async def items(self, user_id: str, *, limit: int) -> list[MemoryItem]:
        rows = await self._db.run(
            lambda c: c.execute(
                f"SELECT {_FIELDS} FROM memory WHERE userId = ? ORDER BY id DESC LIMIT ?",
                (user_id, limit),
            ).fetchall()
        )
        return [MemoryItem(**dict(row)) for row in rows]

    async def delete(self, user_id: str, item_id: str) -> bool:
        cursor = await self._db.run(
            lambda c: c.execute(
                "DELETE FROM memory WHERE userId = ? AND id = ?", (user_id, item_id)
            )
        )
        return bool(cursor.rowcount == 1)

    async def clear(self, user_id: str) -> int:
        cursor = await self._db.run(
            lambda c: c.execute("DELETE FROM memory WHERE userId = ?", (user_id,))
        )
        return int(cursor.rowcount)

    async def forget_conversation(self, user_id: str, conversation_id: str) -> int:
        cursor = await self._db.run(
            lambda c: c.execute(
                "DELETE FROM memory WHERE userId = ? AND conversation_id = ?",
                (user_id, conversation_id),
            )
        )
        return int(cursor.rowcount)
