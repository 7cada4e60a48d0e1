"""SQLite store of mock exams (`quiz.ports.ExamStore`): one row per exam, read per user."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path
from typing import Any

from aircoach.quiz.exam_models import ExamRecord
from aircoach.store.sqlite import BUSY_TIMEOUT_S, _Sqlite

_SCHEMA = """
CREATE TABLE IF NOT EXISTS quiz_exams (
    id TEXT PRIMARY KEY,
    userId TEXT NOT NULL,
    creato TEXT NOT NULL,
    consegnato TEXT,
    doc TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS quiz_exams_user_time ON quiz_exams (userId, creato);
"""


def _record(row: sqlite3.Row) -> ExamRecord:
    doc = json.loads(row["doc"])
    doc["consegnato"] = row["consegnato"]
    return ExamRecord.model_validate(doc)


class SqliteExamStore:
    def __init__(self, path: Path, *, timeout_s: float = BUSY_TIMEOUT_S):
        self._db = _Sqlite(path, schema=_SCHEMA, timeout_s=timeout_s)

    async def create(self, exam: ExamRecord) -> None:
        doc = json.dumps(exam.model_dump(), ensure_ascii=False)
        await self._db.run(
            lambda c: c.execute(
                "INSERT INTO quiz_exams (id, userId, creato, consegnato, doc) "
                "VALUES (?, ?, ?, ?, ?)",
                (exam.id, exam.userId, exam.creato, exam.consegnato, doc),
            )
        )

    async def get(self, user_id: str, exam_id: str) -> ExamRecord | None:
        row = await self._db.run(
            lambda c: c.execute(
                "SELECT doc, consegnato FROM quiz_exams WHERE id = ? AND userId = ?",
                (exam_id, user_id),
            ).fetchone()
        )
        return None if row is None else _record(row)

    async def list_for(
        self, user_id: str, limit: int, *, before: tuple[str, str] | None = None
    ) -> list[ExamRecord]:
        where, params = "userId = ?", [user_id]
        if before is not None:
            where += " AND (creato < ? OR (creato = ? AND id < ?))"
            params += [before[0], *before]
        rows = await self._db.run(
            lambda c: c.execute(
                f"SELECT doc, consegnato FROM quiz_exams WHERE {where} "
                "ORDER BY creato DESC, id DESC LIMIT ?",
                (*params, limit),
            ).fetchall()
        )
        return [_record(r) for r in rows]

    async def claim(
        self, user_id: str, exam_id: str, at: str, *, previous: str | None = None
    ) -> bool:
        cursor = await self._db.run(
            lambda c: c.execute(
                "UPDATE quiz_exams SET consegnato = ? "
                "WHERE id = ? AND userId = ? AND consegnato IS ?",
                (at, exam_id, user_id, previous),
            )
        )
        return cursor.rowcount == 1

    async def finish(self, user_id: str, exam_id: str, esito: dict[str, Any]) -> None:
        def write(c: sqlite3.Connection) -> None:
            row = c.execute(
                "SELECT doc FROM quiz_exams WHERE id = ? AND userId = ?", (exam_id, user_id)
            ).fetchone()
            if row is None:
                return
            doc = {**json.loads(row["doc"]), "esito": esito}
            c.execute(
                "UPDATE quiz_exams SET doc = ? WHERE id = ?",
                (json.dumps(doc, ensure_ascii=False), exam_id),
            )

        await self._db.run(write)
