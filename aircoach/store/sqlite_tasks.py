"""SQLite stores of the task engine: runs, the review queue, contacts (same file as the chats,
tables of their own). Documents are stored as JSON; the columns are what is queried."""

from __future__ import annotations

import json
import math
import sqlite3
from pathlib import Path
from typing import Any

from aircoach.store.sqlite import BUSY_TIMEOUT_S, _Sqlite
from aircoach.tasks.ports import Claim, QueueStats, RunFilter, RunStats
from aircoach.tasks.records import (
    Contact,
    ReviewItem,
    ReviewStatus,
    TaskRun,
    Verdict,
    http_sources,
    run_facts,
)

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
CREATE TABLE IF NOT EXISTS task_run_keys (
    key TEXT PRIMARY KEY,
    input_hash TEXT NOT NULL,
    run_id TEXT,
    claimed_at REAL NOT NULL
);
"""

# Columns a file of an earlier version lacks: added on first use, then indexed.
_RUN_COLUMNS = {
    "source": "TEXT",
    "origin": "TEXT",
    "latency_ms": "REAL",
    "attempts": "INTEGER NOT NULL DEFAULT 0",
    "shrunk": "INTEGER NOT NULL DEFAULT 0",
    "fallback": "INTEGER NOT NULL DEFAULT 0",
    "truncated": "INTEGER NOT NULL DEFAULT 0",
    "input_tokens": "INTEGER NOT NULL DEFAULT 0",
    "output_tokens": "INTEGER NOT NULL DEFAULT 0",
    "verdict": "TEXT",
}
_RUN_INDEXES = """
CREATE INDEX IF NOT EXISTS runs_task_id ON task_runs (task, run_id);
CREATE INDEX IF NOT EXISTS runs_task_latency ON task_runs (task, latency_ms);
CREATE INDEX IF NOT EXISTS runs_origin ON task_runs (origin);
"""


def _migrate(conn: sqlite3.Connection) -> None:
    have = {row[1] for row in conn.execute("PRAGMA table_info(task_runs)")}
    for name, kind in _RUN_COLUMNS.items():
        if name not in have:
            conn.execute(f"ALTER TABLE task_runs ADD COLUMN {name} {kind}")
    conn.executescript(_RUN_INDEXES)


_RESOLUTION = ("status", "resolved_by", "resolved_at", "resolution_run_id")


def _json(model: TaskRun | ReviewItem | Contact, *, exclude: tuple[str, ...] = ()) -> str:
    return json.dumps(model.model_dump(mode="json", exclude=set(exclude)), ensure_ascii=False)


class SqliteTaskRunStore:
    def __init__(self, path: Path, *, timeout_s: float = BUSY_TIMEOUT_S):
        self._db = _Sqlite(path, schema=_SCHEMA, migrate=_migrate, timeout_s=timeout_s)

    async def insert_run(self, run: TaskRun) -> None:
        facts = run_facts(run)
        row = {
            "run_id": run.run_id,
            "task": run.task,
            "status": run.status,
            "created_at": run.created_at,
            "doc": _json(run),
            "source": run.source,
            "origin": run.origin,
            "latency_ms": run.latency_ms,
            "verdict": run.verdict,
            **facts,
        }
        names = ", ".join(row)
        marks = ", ".join(f":{name}" for name in row)
        await self._db.run(
            lambda c: c.execute(f"INSERT INTO task_runs ({names}) VALUES ({marks})", row)
        )

    async def list_runs(self, where: RunFilter, *, limit: int, before: str | None) -> list[TaskRun]:
        sql, params = _run_filter(where)
        if before:
            sql += " AND run_id < ?"
            params.append(before)
        sql = f"SELECT doc FROM task_runs WHERE {sql} ORDER BY run_id DESC LIMIT ?"
        params.append(limit)
        rows = await self._db.run(lambda c: c.execute(sql, params).fetchall())
        return [TaskRun.model_validate_json(r["doc"]) for r in rows]

    async def record_verdict(
        self, run_id: str, *, verdict: Verdict, output: dict[str, Any]
    ) -> None:
        encoded = json.dumps(output, ensure_ascii=False)
        await self._db.run(
            lambda c: c.execute(
                "UPDATE task_runs SET verdict = ?, doc = json_set(doc, '$.verdict', ?, "
                "'$.reviewed_output', json(?)) WHERE run_id = ?",
                (verdict, verdict, encoded, run_id),
            )
        )

    async def stats(self, task: str | None, since: str | None) -> list[RunStats]:
        return await self._db.run(lambda c: _stats(c, task, since))

    async def claim(self, key: str, input_hash: str, *, now: float, lease_s: float) -> Claim:
        # One transaction (`_Sqlite.run`), whose first statement takes the write lock.
        return await self._db.run(lambda c: _claim(c, key, input_hash, now, lease_s))

    async def complete(self, key: str, run_id: str) -> None:
        await self._db.run(
            lambda c: c.execute("UPDATE task_run_keys SET run_id = ? WHERE key = ?", (run_id, key))
        )

    async def release(self, key: str) -> None:
        await self._db.run(
            lambda c: c.execute(
                "DELETE FROM task_run_keys WHERE key = ? AND run_id IS NULL", (key,)
            )
        )

    async def get_run(self, run_id: str) -> TaskRun | None:
        row = await self._db.run(
            lambda c: c.execute("SELECT doc FROM task_runs WHERE run_id = ?", (run_id,)).fetchone()
        )
        return TaskRun.model_validate_json(row["doc"]) if row else None

    async def stored(self, run_ids: list[str]) -> set[str]:
        if not run_ids:
            return set()
        marks = ", ".join("?" * len(run_ids))
        sql = f"SELECT run_id FROM task_runs WHERE run_id IN ({marks})"
        rows = await self._db.run(lambda c: c.execute(sql, run_ids).fetchall())
        return {r["run_id"] for r in rows}


def _claim(c: sqlite3.Connection, key: str, input_hash: str, now: float, lease_s: float) -> Claim:
    inserted = c.execute(
        "INSERT OR IGNORE INTO task_run_keys (key, input_hash, claimed_at) VALUES (?, ?, ?)",
        (key, input_hash, now),
    )
    if inserted.rowcount == 1:
        return Claim("new")
    row = c.execute("SELECT * FROM task_run_keys WHERE key = ?", (key,)).fetchone()
    if row["input_hash"] != input_hash:
        return Claim("mismatch", row["run_id"])
    if row["run_id"] is not None:
        return Claim("done", row["run_id"])
    if row["claimed_at"] > now - lease_s:
        return Claim("busy")
    c.execute("UPDATE task_run_keys SET claimed_at = ? WHERE key = ?", (now, key))
    return Claim("new")


def _run_filter(where: RunFilter) -> tuple[str, list[object]]:
    clauses: list[str] = ["1 = 1"]
    params: list[object] = []
    if where.task is not None:
        clauses.append("task = ?")
        params.append(where.task)
    if where.source is not None:
        if where.source == "http":
            clauses.append("source IN (?, ?)")
            params.extend(http_sources())
        elif ":" in where.source:
            clauses.append("origin = ?")
            params.append(where.source)
        else:
            clauses.append("source = ?")
            params.append(where.source)
    if where.since is not None:
        clauses.append("created_at >= ?")
        params.append(where.since)
    if where.reviewed:
        clauses.append("verdict IS NOT NULL")
    return " AND ".join(clauses), params


def _stats(c: sqlite3.Connection, task: str | None, since: str | None) -> list[RunStats]:
    where, params = _run_filter(RunFilter(task=task, since=since))
    totals = c.execute(
        f"SELECT task, COUNT(*) AS n, SUM(attempts) AS attempts, SUM(shrunk) AS shrunk, "
        f"SUM(fallback) AS fallback, SUM(truncated) AS truncated, "
        f"SUM(input_tokens) AS input_tokens, SUM(output_tokens) AS output_tokens "
        f"FROM task_runs WHERE {where} AND source != 'review' GROUP BY task ORDER BY task",
        params,
    ).fetchall()
    statuses: dict[str, dict[str, int]] = {}
    for row in c.execute(
        f"SELECT task, status, COUNT(*) AS n FROM task_runs WHERE {where} "
        f"AND source != 'review' GROUP BY task, status",
        params,
    ):
        statuses.setdefault(row["task"], {})[row["status"]] = row["n"]
    stats = []
    for row in totals:
        scoped = f"{where} AND source != 'review' AND task = ? AND latency_ms IS NOT NULL"

        def quantile(
            q: float, n: int = row["n"], name: str = row["task"], scoped: str = scoped
        ) -> float | None:
            found = c.execute(
                f"SELECT latency_ms FROM task_runs WHERE {scoped} "
                "ORDER BY latency_ms LIMIT 1 OFFSET ?",
                [*params, name, nearest_rank(q, n)],
            ).fetchone()
            return found["latency_ms"] if found else None

        stats.append(
            RunStats(
                task=row["task"],
                runs=statuses.get(row["task"], {}),
                attempts=row["attempts"] or 0,
                shrunk=row["shrunk"] or 0,
                fallback=row["fallback"] or 0,
                truncated=row["truncated"] or 0,
                latency_p50_ms=quantile(0.5),
                latency_p95_ms=quantile(0.95),
                input_tokens=row["input_tokens"] or 0,
                output_tokens=row["output_tokens"] or 0,
            )
        )
    return stats


def nearest_rank(q: float, n: int) -> int:
    """The 0-based offset of the `q` quantile among `n` sorted values (nearest rank)."""
    return max(0, min(n - 1, math.ceil(q * n) - 1))


def _item(row: sqlite3.Row) -> ReviewItem:
    doc = json.loads(row["doc"])
    doc.update({name: row[name] for name in _RESOLUTION})
    return ReviewItem.model_validate(doc)


class SqliteReviewQueue:
    def __init__(self, path: Path, *, timeout_s: float = BUSY_TIMEOUT_S):
        self._db = _Sqlite(path, schema=_SCHEMA, migrate=_migrate, timeout_s=timeout_s)

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

    async def resolve(
        self, review_id: str, *, run_id: str, by: str, at: str, verdict: Verdict = "corrected"
    ) -> bool:
        def update(c: sqlite3.Connection) -> bool:
            cursor = c.execute(
                "UPDATE task_review_queue SET status = 'resolved', resolved_by = ?, "
                "resolved_at = ?, resolution_run_id = ?, doc = json_set(doc, '$.verdict', ?) "
                "WHERE review_id = ? AND status = 'open'",
                (by, at, run_id, verdict, review_id),
            )
            return cursor.rowcount == 1

        return await self._db.run(update)

    async def dismiss(self, review_id: str, *, by: str, at: str, note: str) -> bool:
        def update(c: sqlite3.Connection) -> bool:
            cursor = c.execute(
                "UPDATE task_review_queue SET status = 'dismissed', resolved_by = ?, "
                "resolved_at = ?, doc = json_set(doc, '$.dismissal_note', ?) "
                "WHERE review_id = ? AND status = 'open'",
                (by, at, note, review_id),
            )
            return cursor.rowcount == 1

        return await self._db.run(update)

    async def queue_stats(self, task: str | None) -> list[QueueStats]:
        sql = (
            "SELECT task, COUNT(*) AS n, MIN(review_id) AS oldest FROM task_review_queue "
            "WHERE status = 'open'"
        )
        params: list[object] = []
        if task is not None:
            sql += " AND task = ?"
            params.append(task)
        sql += " GROUP BY task ORDER BY task"

        def read(c: sqlite3.Connection) -> list[QueueStats]:
            found = []
            for row in c.execute(sql, params).fetchall():
                doc = c.execute(
                    "SELECT json_extract(doc, '$.created_at') AS at FROM task_review_queue "
                    "WHERE review_id = ?",
                    (row["oldest"],),
                ).fetchone()
                found.append(QueueStats(row["task"], row["n"], doc["at"] if doc else None))
            return found

        return await self._db.run(read)

    async def reopen(self, review_id: str) -> None:
        await self._db.run(
            lambda c: c.execute(
                "UPDATE task_review_queue SET status = 'open', resolved_by = NULL, "
                "resolved_at = NULL, resolution_run_id = NULL, "
                "doc = json_remove(doc, '$.verdict') WHERE review_id = ?",
                (review_id,),
            )
        )


class SqliteContactStore:
    def __init__(self, path: Path, *, timeout_s: float = BUSY_TIMEOUT_S):
        self._db = _Sqlite(path, schema=_SCHEMA, migrate=_migrate, timeout_s=timeout_s)

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
