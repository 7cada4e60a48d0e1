"""SQLite stores of the task engine: runs, the review queue, contacts (same file as the chats,
tables of their own). Documents are stored as JSON; the columns are what is queried."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

from aircoach.store.sqlite import _Sqlite
from aircoach.tasks.records import Contact, ReviewItem, ReviewStatus, TaskRun

_SCHEMA = """
CREATE TABLE IF NOT EXISTS task_runs (
    run_id TEXT PRIMARY KEY,
    task TEXT NOT NULL,
    status TEXT NOT NULL,
    created_at TEXT NOT NULL,
    doc TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS task_review_queue (
    review_id TEXT PRIMARY KEY,
    task TEXT NOT NULL,
    status TEXT NOT NULL,
    resolved_by TEXT,
    resolved_at TEXT,
    resolution_run_id TEXT,
    doc TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS review_status_id ON task_review_queue (status, review_id);
CREATE INDEX IF NOT EXISTS review_status_task_id ON task_review_queue (status, task, review_id);
CREATE TABLE IF NOT EXISTS contacts (
    key TEXT PRIMARY KEY,
    doc TEXT NOT NULL
);
"""

_RESOLUTION = ("status", "resolved_by", "resolved_at", "resolution_run_id")


def _json(model: TaskRun | ReviewItem | Contact, *, exclude: tuple[str, ...] = ()) -> str:
    return json.dumps(model.model_dump(mode="json", exclude=set(exclude)), ensure_ascii=False)


class SqliteTaskRunStore:
    def __init__(self, path: Path):
        self._db = _Sqlite(path, schema=_SCHEMA)

    async def insert_run(self, run: TaskRun) -> None:
        row = (run.run_id, run.task, run.status, run.created_at, _json(run))
        await self._db.run(lambda c: c.execute("INSERT INTO task_runs VALUES (?, ?, ?, ?, ?)", row))

    async def get_run(self, run_id: str) -> TaskRun | None:
        row = await self._db.run(
            lambda c: c.execute("SELECT doc FROM task_runs WHERE run_id = ?", (run_id,)).fetchone()
        )
        return TaskRun.model_validate_json(row["doc"]) if row else None


def _item(row: sqlite3.Row) -> ReviewItem:
    doc = json.loads(row["doc"])
    doc.update({name: row[name] for name in _RESOLUTION})
    return ReviewItem.model_validate(doc)


class SqliteReviewQueue:
    def __init__(self, path: Path):
        self._db = _Sqlite(path, schema=_SCHEMA)

    async def enqueue(self, item: ReviewItem) -> None:
        row = (item.review_id, item.task, item.status, _json(item, exclude=_RESOLUTION))
        await self._db.run(
            lambda c: c.execute(
                "INSERT INTO task_review_queue (review_id, task, status, doc) VALUES (?, ?, ?, ?)",
                row,
            )
        )

    async def get_item(self, review_id: str) -> ReviewItem | None:
        row = await self._db.run(
            lambda c: c.execute(
                "SELECT * FROM task_review_queue WHERE review_id = ?", (review_id,)
            ).fetchone()
        )
        return _item(row) if row else None

    async def list_items(
        self, *, status: ReviewStatus, task: str | None, limit: int, after: str | None
    ) -> list[ReviewItem]:
        sql = "SELECT * FROM task_review_queue WHERE status = ?"
        params: list[object] = [status]
        if task is not None:
            sql += " AND task = ?"
            params.append(task)
        if after:
            sql += " AND review_id > ?"
            params.append(after)
        sql += " ORDER BY review_id LIMIT ?"
        params.append(limit)
        rows = await self._db.run(lambda c: c.execute(sql, params).fetchall())
        return [_item(r) for r in rows]

    async def resolve(self, review_id: str, *, run_id: str, by: str, at: str) -> bool:
        def update(c: sqlite3.Connection) -> bool:
            cursor = c.execute(
                "UPDATE task_review_queue SET status = 'resolved', resolved_by = ?, "
                "resolved_at = ?, resolution_run_id = ? WHERE review_id = ? AND status = 'open'",
                (by, at, run_id, review_id),
            )
            return cursor.rowcount == 1

        return await self._db.run(update)

    async def reopen(self, review_id: str) -> None:
        await self._db.run(
            lambda c: c.execute(
                "UPDATE task_review_queue SET status = 'open', resolved_by = NULL, "
                "resolved_at = NULL, resolution_run_id = NULL WHERE review_id = ?",
                (review_id,),
            )
        )


class SqliteContactStore:
    def __init__(self, path: Path):
        self._db = _Sqlite(path, schema=_SCHEMA)

    async def upsert_contacts(self, contacts: list[Contact]) -> int:
        rows = [(contact.key, _json(contact)) for contact in contacts]
        await self._db.run(
            lambda c: c.executemany("INSERT OR REPLACE INTO contacts VALUES (?, ?)", rows)
        )
        return len(rows)

    async def find_contact(self, key: str) -> Contact | None:
        row = await self._db.run(
            lambda c: c.execute("SELECT doc FROM contacts WHERE key = ?", (key,)).fetchone()
        )
        return Contact.model_validate_json(row["doc"]) if row else None
