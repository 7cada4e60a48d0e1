"""SQLite stores (the embedded default). sqlite3 runs in worker threads, never on the loop."""

from __future__ import annotations

import json
import logging
import os
import sqlite3
import threading
from collections.abc import Callable
from contextlib import closing
from pathlib import Path
from typing import Any, TypeVar

import anyio

from aircoach.errors import StoreUnavailable
from aircoach.models import ToolRecord, Turn
from aircoach.store.base import QUESTION_FIELDS, Question

T = TypeVar("T")

log = logging.getLogger(__name__)

_SCHEMA = """
CREATE TABLE IF NOT EXISTS chats (
    turn_id TEXT PRIMARY KEY,
    userId TEXT NOT NULL,
    human TEXT NOT NULL,
    system TEXT NOT NULL,
    tool TEXT,
    timestamp TEXT NOT NULL,
    prompt_version TEXT NOT NULL,
    model TEXT NOT NULL,
    thread_id TEXT NOT NULL,
    status TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS chats_user_time ON chats (userId, timestamp);
CREATE INDEX IF NOT EXISTS chats_user_turn ON chats (userId, turn_id);
CREATE TABLE IF NOT EXISTS quiz (
    capitolo INTEGER NOT NULL,
    numero INTEGER NOT NULL,
    argomento TEXT,
    difficolta TEXT,
    corretta TEXT,
    testo TEXT NOT NULL,
    doc TEXT NOT NULL,
    PRIMARY KEY (capitolo, numero)
);
"""


class _Sqlite:
    """One short-lived connection per operation, in a worker thread; WAL lets several
    processes (or app instances) share the file."""

    def __init__(self, path: Path, schema: str = _SCHEMA):
        self.path = path
        self.schema = schema
        self._ready = False
        self._lock = threading.Lock()
        self._anchor: sqlite3.Connection | None = None

    def _connect(self) -> sqlite3.Connection:
        conn = sqlite3.connect(self.path, timeout=5.0)
        conn.row_factory = sqlite3.Row
        # With WAL, NORMAL never corrupts the file and skips an fsync per commit; a power cut
        # may lose the last commits. This is the embedded default, not the production store.
        conn.execute("PRAGMA synchronous=NORMAL")
        return conn

    def _ensure_schema(self) -> None:
        with self._lock:
            if self._ready:
                return
            _create_private(self.path)
            conn = sqlite3.connect(self.path, timeout=5.0, check_same_thread=False)
            conn.execute("PRAGMA journal_mode=WAL")
            conn.executescript(self.schema)
            # Kept open, never queried again: when the last connection to a WAL file closes,
            # SQLite checkpoints and fsyncs, which would cost ~10 ms on every operation.
            self._anchor = conn
            self._ready = True

    async def run(self, op: Callable[[sqlite3.Connection], T]) -> T:
        def work() -> T:
            self._ensure_schema()
            with closing(self._connect()) as conn, conn:
                return op(conn)

        try:
            return await anyio.to_thread.run_sync(work)
        except (sqlite3.Error, OSError) as exc:
            raise StoreUnavailable() from exc


def _create_private(path: Path) -> None:
    """The database holds everyone's conversations: its folder is created 0700 and the file
    0600 (SQLite gives its -wal and -shm files the file's mode). A file this process owns that
    others may read (created before this rule) is tightened."""
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    os.close(os.open(path, os.O_CREAT | os.O_RDWR, 0o600))
    info = path.stat()
    if info.st_mode & 0o077 and hasattr(os, "getuid") and info.st_uid == os.getuid():
        for file in (path, *(path.with_name(path.name + end) for end in ("-wal", "-shm"))):
            if file.exists():
                file.chmod(0o600)
        log.info("%s was readable by others: now 0600", path)


def _turn_from_row(row: sqlite3.Row) -> Turn:
    data = dict(row)
    tool = data.pop("tool")
    return Turn(**data, tool=ToolRecord(**json.loads(tool)) if tool else None)


class SqliteChatStore:
    def __init__(self, path: Path):
        self._db = _Sqlite(path)

    async def append_turn(self, turn: Turn) -> None:
        row = turn.model_dump()
        row["tool"] = json.dumps(row["tool"], ensure_ascii=False) if row["tool"] else None
        columns = ", ".join(row)
        marks = ", ".join(f":{name}" for name in row)
        await self._db.run(
            lambda c: c.execute(
                f"INSERT INTO chats ({columns}) VALUES ({marks}) ON CONFLICT(turn_id) DO NOTHING",
                row,
            )
        )

    async def recent_turns(self, user_id: str, limit: int) -> list[Turn]:
        if limit <= 0:
            return []
        rows = await self._db.run(
            lambda c: c.execute(
                "SELECT * FROM chats WHERE userId = ? ORDER BY turn_id DESC LIMIT ?",
                (user_id, limit),
            ).fetchall()
        )
        return [_turn_from_row(r) for r in reversed(rows)]

    async def latest_turn_ids(self, user_id: str, limit: int = 2) -> list[str]:
        rows = await self._db.run(
            lambda c: c.execute(
                "SELECT turn_id FROM chats WHERE userId = ? ORDER BY turn_id DESC LIMIT ?",
                (user_id, limit),
            ).fetchall()
        )
        return [row["turn_id"] for row in rows]

    async def history(self, user_id: str, *, limit: int, before: str | None) -> list[Turn]:
        sql = "SELECT * FROM chats WHERE userId = ?"
        params: list[Any] = [user_id]
        if before:
            sql += " AND timestamp < ?"
            params.append(before)
        sql += " ORDER BY timestamp DESC, turn_id DESC LIMIT ?"
        params.append(limit)
        rows = await self._db.run(lambda c: c.execute(sql, params).fetchall())
        return [_turn_from_row(r) for r in rows]


class SqliteQuizStore:
    def __init__(self, path: Path):
        self._db = _Sqlite(path)

    async def count(self) -> int:
        return await self._db.run(lambda c: c.execute("SELECT COUNT(*) FROM quiz").fetchone()[0])

    async def upsert_questions(self, questions: list[Question]) -> int:
        rows = [
            {
                "capitolo": int(q["capitolo"]),
                "numero": int(q["numero"]),
                "argomento": q.get("argomento"),
                "difficolta": q.get("difficolta"),
                "corretta": q.get("corretta"),
                "testo": q["testo"],
                "doc": json.dumps(q, ensure_ascii=False),
            }
            for q in questions
        ]

        def write(c: sqlite3.Connection) -> int:
            c.executemany(
                "INSERT OR REPLACE INTO quiz VALUES "
                "(:capitolo, :numero, :argomento, :difficolta, :corretta, :testo, :doc)",
                rows,
            )
            return len(rows)

        return await self._db.run(write)

    async def _one(
        self, where: str, params: tuple[Any, ...], order: str = "RANDOM()"
    ) -> Question | None:
        row = await self._db.run(
            lambda c: c.execute(
                f"SELECT doc FROM quiz {where} ORDER BY {order} LIMIT 1", params
            ).fetchone()
        )
        return json.loads(row["doc"]) if row else None

    async def random_question(self) -> Question | None:
        return await self._one("", ())

    async def random_by_field(self, field: str, value: Any) -> Question | None:
        if field not in QUESTION_FIELDS:
            raise ValueError(f"unknown question field {field!r}; valid: {list(QUESTION_FIELDS)}")
        if field in ("capitolo", "numero"):
            return await self._one(f"WHERE {field} = ?", (int(value),))
        return await self._one(f"WHERE lower({field}) = lower(?)", (str(value),))

    async def by_chapter_and_number(self, capitolo: int, numero: int) -> Question | None:
        return await self._one("WHERE capitolo = ? AND numero = ?", (capitolo, numero), "capitolo")

    async def search_text(self, text: str, limit: int = 5) -> list[Question]:
        needle = text.casefold()

        def search(c: sqlite3.Connection) -> list[Question]:
            # casefold in Python: SQLite's lower() only folds ASCII, and Italian has accents.
            found = []
            for row in c.execute("SELECT testo, doc FROM quiz ORDER BY capitolo, numero"):
                if needle in row["testo"].casefold():
                    found.append(json.loads(row["doc"]))
                    if len(found) >= limit:
                        break
            return found

        return await self._db.run(search)
