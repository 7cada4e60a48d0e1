"""SQLite store of the quiz's per-user review records (`quiz.ports.ReviewStore`): one row per
user and question; the indexes serve the reads (a user's records, a user's due questions)."""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from aircoach.quiz.models import ReviewRecord
from aircoach.quiz.ports import QuestionKey
from aircoach.store.sqlite import BUSY_TIMEOUT_S, _Sqlite

_SCHEMA = """
CREATE TABLE IF NOT EXISTS quiz_reviews (
    userId TEXT NOT NULL,
    capitolo INTEGER NOT NULL,
    numero INTEGER NOT NULL,
    asked_at TEXT,
    card TEXT,
    due TEXT,
    reviewed_at TEXT,
    reviews INTEGER NOT NULL DEFAULT 0,
    last_right INTEGER,
    PRIMARY KEY (userId, capitolo, numero)
) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS quiz_reviews_user_due ON quiz_reviews (userId, due)
    WHERE due IS NOT NULL;
"""


def _record(row: sqlite3.Row) -> ReviewRecord:
    doc: dict[str, Any] = dict(row)
    doc["card"] = json.loads(doc["card"]) if doc["card"] else None
    doc["last_right"] = None if doc["last_right"] is None else bool(doc["last_right"])
    return ReviewRecord.model_validate(doc)


class SqliteReviewStore:
    def __init__(self, path: Path, *, timeout_s: float = BUSY_TIMEOUT_S):
        self._db = _Sqlite(path, schema=_SCHEMA, timeout_s=timeout_s)

    async def get(self, user_id: str, key: QuestionKey) -> ReviewRecord | None:
        row = await self._db.run(
            lambda c: c.execute(
                "SELECT * FROM quiz_reviews WHERE userId = ? AND capitolo = ? AND numero = ?",
                (user_id, *key),
            ).fetchone()
        )
        return None if row is None else _record(row)

    async def save_schedule(self, record: ReviewRecord) -> None:
        row = record.model_dump()
        row["card"] = json.dumps(row["card"]) if row["card"] is not None else None
        await self._db.run(
            lambda c: c.execute(
                "INSERT INTO quiz_reviews "
                "(userId, capitolo, numero, card, due, reviewed_at, reviews, last_right) "
                "VALUES (:userId, :capitolo, :numero, :card, :due, :reviewed_at, :reviews, "
                ":last_right) ON CONFLICT (userId, capitolo, numero) DO UPDATE SET "
                "card = excluded.card, due = excluded.due, reviewed_at = excluded.reviewed_at, "
                "reviews = excluded.reviews, last_right = excluded.last_right",
                row,
            )
        )

    async def mark_asked(self, user_id: str, keys: Sequence[QuestionKey], at: str) -> None:
        rows = [(user_id, int(c), int(n), at) for c, n in dict.fromkeys(keys)]
        if not rows:
            return
        await self._db.run(
            lambda c: c.executemany(
                "INSERT INTO quiz_reviews (userId, capitolo, numero, asked_at) "
                "VALUES (?, ?, ?, ?) ON CONFLICT (userId, capitolo, numero) DO UPDATE SET "
                "asked_at = excluded.asked_at",
                rows,
            )
        )

    async def due(self, user_id: str, now: str, limit: int) -> list[ReviewRecord]:
        rows = await self._db.run(
            lambda c: c.execute(
                "SELECT * FROM quiz_reviews WHERE userId = ? AND due IS NOT NULL AND due <= ? "
                "ORDER BY due, capitolo, numero LIMIT ?",
                (user_id, now, limit),
            ).fetchall()
        )
        return [_record(r) for r in rows]

    async def records(self, user_id: str, *, capitolo: int | None = None) -> list[ReviewRecord]:
        sql = "SELECT * FROM quiz_reviews WHERE userId = ?"
        params: tuple[Any, ...] = (user_id,)
        if capitolo is not None:
            sql += " AND capitolo = ?"
            params += (capitolo,)
        rows = await self._db.run(
            lambda c: c.execute(sql + " ORDER BY capitolo, numero", params).fetchall()
        )
        return [_record(r) for r in rows]
