"""SQLite stores (the embedded default). sqlite3 runs in worker threads, never on the loop."""

from __future__ import annotations

import contextlib
import json
import logging
import os
import sqlite3
import threading
import time
import weakref
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, TypeVar

from aircoach.errors import StoreUnavailable
from aircoach.grounding.feedback import Feedback, Voto
from aircoach.quiz.models import Attempt, ChapterStats, DayStats
from aircoach.quiz.ports import QUESTION_FIELDS, Question, QuestionKey, index_terms
from aircoach.text import TERMS_VERSION
from aircoach.text import plan as search_plan
from aircoach.threads import Threads
from aircoach.turn.ports import RESERVED_CONVERSATION_ID, ConversationScope
from aircoach.turn.records import ConversationSummary, Turn

T = TypeVar("T")

log = logging.getLogger(__name__)

_SETUP_WAIT_S = 30.0  # how long a new file's set-up waits for the others setting it up

# How long an operation waits for another connection's write lock before it fails
# (StoreUnavailable): STORE_TIMEOUT_S, whose default this is.
BUSY_TIMEOUT_S = 5.0

# Every SQLite operation of the process runs in one of these. SQLite has one writer at a time,
# and two cores have little use for more readers; each thread keeps a connection per file.
_threads = Threads("sqlite", limit=4)

_SCHEMA = """
CREATE TABLE IF NOT EXISTS chats (
    turn_id TEXT PRIMARY KEY,
    userId TEXT NOT NULL,
    human TEXT NOT NULL,
    system TEXT NOT NULL,
    tool TEXT,
    tools TEXT,
    grounding TEXT,
    retrieved TEXT,
    feedback TEXT,
    timestamp TEXT NOT NULL,
    prompt_version TEXT NOT NULL,
    model TEXT NOT NULL,
    thread_id TEXT NOT NULL,
    status TEXT NOT NULL,
    conversation_id TEXT,
    error_code TEXT
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
CREATE TABLE IF NOT EXISTS quiz_terms (
    term TEXT NOT NULL,
    capitolo INTEGER NOT NULL,
    numero INTEGER NOT NULL,
    PRIMARY KEY (term, capitolo, numero)
) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS quiz_terms_question ON quiz_terms (capitolo, numero);
CREATE TABLE IF NOT EXISTS quiz_attempts (
    userId TEXT NOT NULL,
    capitolo INTEGER NOT NULL,
    numero INTEGER NOT NULL,
    risposta TEXT NOT NULL,
    corretta INTEGER NOT NULL,
    timestamp TEXT NOT NULL,
    turn_id TEXT,
    exam_id TEXT
);
CREATE INDEX IF NOT EXISTS quiz_attempts_user_chapter
    ON quiz_attempts (userId, capitolo, corretta);
CREATE INDEX IF NOT EXISTS quiz_attempts_user_time ON quiz_attempts (userId, timestamp);
"""

# SQLite binds at most 999 parameters per statement before 3.32.
_MAX_PARAMS = 900


class _File:
    """One SQLite file of this process, for every store on it: a connection per worker thread
    (opening one and setting its pragmas cost more than most of our statements) and the
    anchor, a connection kept open from the set-up on. One per file, not per store: with a
    connection per store and thread, the eleven stores on the chats' file could hold 44
    connections and 11 anchors (two file descriptors and a page cache of up to 2 MB each),
    where these hold 5. WAL lets several processes (or app instances) share the file."""

    def __init__(self, path: Path, timeout_s: float):
        self.path = path
        self.timeout_s = timeout_s
        self._lock = threading.Lock()
        # Kept open, never queried after the set-up: when the last connection to a WAL file
        # closes, SQLite checkpoints and fsyncs, which would cost ~10 ms on every operation.
        self._anchor: sqlite3.Connection | None = None
        self._schemas: set[tuple[str, Callable[[sqlite3.Connection], None] | None]] = set()
        self._local = threading.local()  # this worker thread's connection

    def connection(self) -> sqlite3.Connection:
        """This thread's connection (opened at its first use)."""
        conn: sqlite3.Connection | None = getattr(self._local, "conn", None)
        if conn is None:
            conn = self._local.conn = sqlite3.connect(self.path, timeout=self.timeout_s)
            conn.row_factory = sqlite3.Row
            # With WAL, NORMAL never corrupts the file and skips an fsync per commit; a power
            # cut may lose the last commits. The embedded default, not the production store.
            conn.execute("PRAGMA synchronous=NORMAL")
        return conn

    def discard(self, conn: sqlite3.Connection) -> None:
        """Close this thread's connection, in an unknown state after an error: the next
        operation opens a clean one."""
        self._local.conn = None
        conn.close()

    def set_up(
        self, schema: str, migrate: Callable[[sqlite3.Connection], None] | None = None
    ) -> None:
        """`schema` (then `migrate`) on the anchor, once per process and schema. Several
        stores (and processes) may set up one new file at once: switching it to WAL needs the
        file to itself, and SQLite answers "database is locked" at once instead of waiting,
        so a locked set-up is tried again for a few seconds (in a worker thread)."""
        with self._lock:
            if (schema, migrate) in self._schemas:
                return
            _create_private(self.path)
            deadline = time.monotonic() + _SETUP_WAIT_S
            while True:
                try:
                    anchor = self._anchor or self._open_anchor()
                    # In one transaction: each statement of a script is its own commit
                    # otherwise.
                    anchor.executescript(f"BEGIN;\n{schema}\nCOMMIT;")
                    if migrate is not None:
                        migrate(anchor)
                    break
                except sqlite3.OperationalError as exc:
                    self._close_anchor()
                    if "locked" not in str(exc) or time.monotonic() > deadline:
                        raise
                    log.info(
                        "sqlite %s: set-up found the file locked, trying again", self.path.name
                    )
                    time.sleep(0.05)
                except BaseException:
                    self._close_anchor()
                    raise
            self._schemas.add((schema, migrate))

    def _open_anchor(self) -> sqlite3.Connection:
        conn = sqlite3.connect(self.path, timeout=self.timeout_s, check_same_thread=False)
        self._anchor = conn
        conn.row_factory = sqlite3.Row
        conn.execute("PRAGMA journal_mode=WAL")
        conn.execute("PRAGMA synchronous=NORMAL")
        return conn

    def _close_anchor(self) -> None:
        if self._anchor is not None:
            self._anchor.close()
            self._anchor = None


# The process's open files, by path and busy timeout; a file closes when no store holds it.
_files: weakref.WeakValueDictionary[tuple[Path, float], _File] = weakref.WeakValueDictionary()
_files_lock = threading.Lock()


def _file(path: Path, timeout_s: float) -> _File:
    key = (path.absolute(), timeout_s)
    with _files_lock:
        file = _files.get(key)
        if file is None:
            file = _files[key] = _File(path, timeout_s)
        return file


class _Sqlite:
    """A store's operations, each in one transaction in a worker thread, on its file's
    connections (`_File`); its schema is set up at the first one."""

    def __init__(
        self,
        path: Path,
        schema: str = _SCHEMA,
        migrate: Callable[[sqlite3.Connection], None] | None = None,
        *,
        timeout_s: float = BUSY_TIMEOUT_S,
    ):
        self.path = path
        self.schema = schema
        # Brings a file an earlier version made up to date (the chat and quiz schema's).
        self.migrate = migrate
        self._file = _file(path, timeout_s)
        self._ready = False

    def _ensure_schema(self) -> None:
        if not self._ready:
            self._file.set_up(self.schema, self.migrate)
            self._ready = True

    async def run(self, op: Callable[[sqlite3.Connection], T], *, read: bool = False) -> T:
        """`op` in one transaction, in a worker thread. The caller's cancellation waits for it
        to end (a write it started lands), unless `read`: then the caller returns at once and
        the thread finishes the read, its result dropped. A new file's set-up waits up to
        30 s for a file another process holds locked: what a read gives up on."""

        def work() -> T:
            self._ensure_schema()
            conn = self._file.connection()
            try:
                with conn:  # one transaction per operation
                    result = op(conn)
            except sqlite3.Error:
                self._file.discard(conn)
                raise
            if isinstance(result, sqlite3.Cursor):
                # A cursor holds a statement of this thread's connection: it is closed here,
                # by its thread (its `rowcount` stays readable). Left for the loop's thread to
                # drop, it was reset there while this thread ran the same cached statement
                # again: "bad parameter or other API misuse".
                result.close()
            return result

        try:
            return await _threads.run(work, abandon_on_cancel=read)
        except (sqlite3.Error, OSError) as exc:
            raise StoreUnavailable() from exc


# Paths this process has prepared (`_create_private`), and the lock that makes it once each.
_prepared: set[Path] = set()
_prepared_lock = threading.Lock()


def _create_private(path: Path) -> None:
    """The database holds everyone's conversations: its folder is created 0700 and the file
    0600 (SQLite gives its -wal and -shm files the file's mode); a file this process owns that
    others may read (created before this rule) is tightened. Once per process and file, before
    this process opens any connection to it.

    Never through a descriptor of a file that exists: SQLite's locks are POSIX advisory locks,
    and closing *any* descriptor of a file drops every lock the process holds on it. A store
    that did `os.close(os.open(path))` beside a live connection let another process believe it
    was the last one: that process checkpointed and deleted the WAL under the server, whose
    later commits went to a deleted file (issue 27). So the file is created with O_EXCL, which
    opens only a file that did not exist (no process can hold a lock on it), and its mode is
    changed by path."""
    key = path.absolute()
    with _prepared_lock:
        if key in _prepared:
            return
        path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        # A file that exists (made by another process or an earlier run) is never opened here.
        with contextlib.suppress(FileExistsError):
            os.close(os.open(path, os.O_CREAT | os.O_EXCL | os.O_RDWR, 0o600))
        info = path.stat()
        if info.st_mode & 0o077 and hasattr(os, "getuid") and info.st_uid == os.getuid():
            for file in (path, *(path.with_name(path.name + end) for end in ("-wal", "-shm"))):
                if file.exists():
                    file.chmod(0o600)
            log.info("%s was readable by others: now 0600", path)
        _prepared.add(key)


def _migrate(conn: sqlite3.Connection) -> None:
    """Bring a file made by an earlier version up to date, once, whichever process (or store
    object) gets there first: the columns a turn gained (`_JSON_COLUMNS`, `_ADDED_COLUMNS`),
    an attempt's `exam_id`, and the questions' search terms when they are missing or of an
    older `TERMS_VERSION`."""
    conn.isolation_level = None  # explicit transaction: BEGIN IMMEDIATE serialises writers
    conn.execute("BEGIN IMMEDIATE")
    try:
        columns = {row["name"] for row in conn.execute("PRAGMA table_info(chats)")}
        for column in (*_JSON_COLUMNS, *_ADDED_COLUMNS):
            if column not in columns:
                conn.execute(f"ALTER TABLE chats ADD COLUMN {column} TEXT")
        conn.execute(_CONVERSATION_INDEX)
        if "exam_id" not in {
            row["name"] for row in conn.execute("PRAGMA table_info(quiz_attempts)")
        }:
            conn.execute("ALTER TABLE quiz_attempts ADD COLUMN exam_id TEXT")
        conn.execute(_EXAM_ATTEMPT_INDEX)
        if conn.execute("PRAGMA user_version").fetchone()[0] != TERMS_VERSION:
            conn.execute("DELETE FROM quiz_terms")
            docs = conn.execute("SELECT doc FROM quiz").fetchall()
            _write_terms(conn, [json.loads(row["doc"]) for row in docs])
            conn.execute(f"PRAGMA user_version = {int(TERMS_VERSION)}")
        conn.execute("COMMIT")
    except BaseException:
        conn.execute("ROLLBACK")
        raise


def _quiz_row(question: Question) -> dict[str, Any]:
    return {
        "capitolo": int(question["capitolo"]),
        "numero": int(question["numero"]),
        "argomento": question.get("argomento"),
        "difficolta": question.get("difficolta"),
        "corretta": question.get("corretta"),
        "testo": question["testo"],
        "doc": json.dumps(question, ensure_ascii=False),
    }


def _write_terms(conn: sqlite3.Connection, questions: Sequence[Question]) -> None:
    """Replace the search terms of `questions`: two statements for the whole batch (seeding
    the demo bank was two per question, 746 of them). A question named twice gets the terms
    of its last version, as its row does (both versions' terms collided on the key)."""
    latest = {(int(q["capitolo"]), int(q["numero"])): q for q in questions}
    conn.executemany("DELETE FROM quiz_terms WHERE capitolo = ? AND numero = ?", list(latest))
    conn.executemany(
        "INSERT INTO quiz_terms (term, capitolo, numero) VALUES (?, ?, ?)",
        [(term, *key) for key, q in latest.items() for term in index_terms(q)],
    )


def _questions_by_keys(conn: sqlite3.Connection, keys: list[QuestionKey]) -> list[Question]:
    """The questions of `keys` that exist, in the order of `keys`."""
    found: dict[QuestionKey, Question] = {}
    for start in range(0, len(keys), _MAX_PARAMS // 2):
        chunk = keys[start : start + _MAX_PARAMS // 2]
        marks = ", ".join("(?, ?)" for _ in chunk)
        # Joined from the keys, so each is a primary-key lookup (`(capitolo, numero) IN
        # (VALUES ...)` scans the table).
        rows = conn.execute(
            f"SELECT quiz.capitolo, quiz.numero, quiz.doc FROM (VALUES {marks}) AS k "
            "CROSS JOIN quiz ON quiz.capitolo = k.column1 AND quiz.numero = k.column2",
            [value for key in chunk for value in key],
        )
        found.update({(r["capitolo"], r["numero"]): json.loads(r["doc"]) for r in rows})
    return [found[key] for key in keys if key in found]


# A turn's fields kept as JSON text (added by `_migrate` to a file made before them).
_JSON_COLUMNS = ("tool", "tools", "grounding", "retrieved", "feedback")
# A turn's plain text fields added after the first version (`_migrate` adds them too).
_ADDED_COLUMNS = ("conversation_id", "error_code")


# A conversation's turns in order (the default conversation's are those with NULL).
_CONVERSATION_INDEX = (
    "CREATE INDEX IF NOT EXISTS chats_user_conversation ON chats (userId, conversation_id, turn_id)"
)

# One attempt per mock exam and question (a resubmission replaces it instead of adding one).
_EXAM_ATTEMPT_INDEX = (
    "CREATE UNIQUE INDEX IF NOT EXISTS quiz_attempts_exam_question "
    "ON quiz_attempts (userId, exam_id, capitolo, numero) WHERE exam_id IS NOT NULL"
)


def _in_conversation(conversation: str | None) -> tuple[str, list[Any]]:
    if conversation is None:
        return "conversation_id IS NULL", []
    return "conversation_id = ?", [conversation]


def _turn_from_row(row: sqlite3.Row) -> Turn:
    data = dict(row)
    for column in _JSON_COLUMNS:
        value = data.pop(column)
        if value:
            data[column] = json.loads(value)
    return Turn.model_validate(data)


class SqliteChatStore:
    def __init__(self, path: Path, *, timeout_s: float = BUSY_TIMEOUT_S):
        self._db = _Sqlite(path, migrate=_migrate, timeout_s=timeout_s)

    async def append_turn(self, turn: Turn) -> None:
        row = turn.model_dump()
        for column in _JSON_COLUMNS:
            row[column] = json.dumps(row[column], ensure_ascii=False) if row[column] else None
        columns = ", ".join(row)
        marks = ", ".join(f":{name}" for name in row)
        await self._db.run(
            lambda c: c.execute(
                f"INSERT INTO chats ({columns}) VALUES ({marks}) ON CONFLICT(turn_id) DO NOTHING",
                row,
            )
        )

    async def recent_turns(
        self, user_id: str, limit: int, *, conversation: str | None = None
    ) -> list[Turn]:
        if limit <= 0:
            return []
        where, params = _in_conversation(conversation)
        rows = await self._db.run(
            lambda c: c.execute(
                f"SELECT * FROM chats WHERE userId = ? AND {where} ORDER BY turn_id DESC LIMIT ?",
                (user_id, *params, limit),
            ).fetchall()
        )
        return [_turn_from_row(r) for r in reversed(rows)]

    async def latest_turn_ids(
        self, user_id: str, limit: int = 2, *, conversation: str | None = None
    ) -> list[str]:
        where, params = _in_conversation(conversation)
        rows = await self._db.run(
            lambda c: c.execute(
                f"SELECT turn_id FROM chats WHERE userId = ? AND {where} "
                "ORDER BY turn_id DESC LIMIT ?",
                (user_id, *params, limit),
            ).fetchall(),
            read=True,
        )
        return [row["turn_id"] for row in rows]

    async def conversations(
        self, user_id: str, *, limit: int, before_turn: str | None = None
    ) -> list[ConversationSummary]:
        having = "HAVING newest < ? " if before_turn else ""
        rows = await self._db.run(
            lambda c: c.execute(
                "SELECT conversation_id, COUNT(*) AS turns, MAX(turn_id) AS newest, "
                "(SELECT human FROM chats f WHERE f.userId = chats.userId AND "
                "f.conversation_id = chats.conversation_id ORDER BY f.turn_id LIMIT 1) AS first, "
                "(SELECT timestamp FROM chats l WHERE l.userId = chats.userId AND "
                "l.conversation_id = chats.conversation_id ORDER BY l.turn_id DESC LIMIT 1) "
                "AS last FROM chats WHERE userId = ? AND conversation_id IS NOT NULL "
                f"GROUP BY conversation_id {having}ORDER BY newest DESC LIMIT ?",
                (user_id, *([before_turn] if before_turn else []), limit),
            ).fetchall()
        )
        return [
            ConversationSummary(
                conversation_id=row["conversation_id"],
                first_question=row["first"],
                last_activity=row["last"],
                last_turn_id=row["newest"],
                turns=row["turns"],
            )
            for row in rows
        ]

    async def delete_turn(self, user_id: str, turn_id: str) -> bool:
        cursor = await self._db.run(
            lambda c: c.execute(
                "DELETE FROM chats WHERE userId = ? AND turn_id = ?", (user_id, turn_id)
            )
        )
        return bool(cursor.rowcount == 1)

    async def conversation_turn_ids(self, user_id: str, conversation: str) -> list[str]:
        rows = await self._db.run(
            lambda c: c.execute(
                "SELECT turn_id FROM chats WHERE userId = ? AND conversation_id = ?",
                (user_id, conversation),
            ).fetchall()
        )
        return [row["turn_id"] for row in rows]

    async def delete_conversation(self, user_id: str, conversation: str) -> list[str]:
        def delete(c: sqlite3.Connection) -> list[str]:
            rows = c.execute(
                "DELETE FROM chats WHERE userId = ? AND conversation_id = ? RETURNING turn_id",
                (user_id, conversation),
            ).fetchall()
            return [row["turn_id"] for row in rows]

        return await self._db.run(delete)

    async def get_turn(self, user_id: str, turn_id: str) -> Turn | None:
        row = await self._db.run(
            lambda c: c.execute(
                "SELECT * FROM chats WHERE turn_id = ? AND userId = ?", (turn_id, user_id)
            ).fetchone()
        )
        return _turn_from_row(row) if row is not None else None

    async def history(
        self,
        user_id: str,
        *,
        limit: int,
        before: str | None = None,
        before_turn: str | None = None,
        conversation: str | ConversationScope = ConversationScope.EVERY,
    ) -> list[Turn]:
        sql = "SELECT * FROM chats WHERE userId = ?"
        params: list[Any] = [user_id]
        if conversation is ConversationScope.DEFAULT:
            # No index serves the OR: SQLite reads (userId, turn_id) newest first and stops at
            # the end of the page.
            sql += " AND (conversation_id IS NULL OR conversation_id = ?)"
            params.append(RESERVED_CONVERSATION_ID)
        elif isinstance(conversation, str):
            sql += " AND conversation_id = ?"
            params.append(conversation)
        if before:
            sql += " AND timestamp < ?"
            params.append(before)
        if before_turn:
            sql += " AND turn_id < ?"
            params.append(before_turn)
        sql += " ORDER BY turn_id DESC LIMIT ?"
        params.append(limit)
        rows = await self._db.run(lambda c: c.execute(sql, params).fetchall())
        return [_turn_from_row(r) for r in rows]

    async def set_feedback(self, user_id: str, turn_id: str, feedback: Feedback) -> bool:
        value = feedback.model_dump_json()
        updated = await self._db.run(
            lambda c: (
                c.execute(
                    "UPDATE chats SET feedback = ? WHERE turn_id = ? AND userId = ?",
                    (value, turn_id, user_id),
                ).rowcount
            )
        )
        return bool(updated)

    async def feedback(self, *, voto: Voto | None, limit: int, before: str | None) -> list[Turn]:
        # An admin's occasional read: a scan of the turns with a feedback is fine here.
        sql = "SELECT * FROM chats WHERE feedback IS NOT NULL"
        params: list[Any] = []
        if voto:
            sql += " AND json_extract(feedback, '$.voto') = ?"
            params.append(voto)
        if before:
            sql += " AND json_extract(feedback, '$.at') < ?"
            params.append(before)
        sql += " ORDER BY json_extract(feedback, '$.at') DESC, turn_id DESC LIMIT ?"
        params.append(limit)
        rows = await self._db.run(lambda c: c.execute(sql, params).fetchall())
        return [_turn_from_row(r) for r in rows]


class SqliteQuizStore:
    def __init__(self, path: Path, *, timeout_s: float = BUSY_TIMEOUT_S):
        self._db = _Sqlite(path, migrate=_migrate, timeout_s=timeout_s)

    async def count(self) -> int:
        return await self._db.run(lambda c: c.execute("SELECT COUNT(*) FROM quiz").fetchone()[0])

    async def chapter_counts(self) -> dict[int, int]:
        rows = await self._db.run(
            lambda c: c.execute(
                "SELECT capitolo, COUNT(*) AS n FROM quiz GROUP BY capitolo ORDER BY capitolo"
            ).fetchall()
        )
        return {row["capitolo"]: row["n"] for row in rows}

    async def upsert_questions(self, questions: list[Question]) -> int:
        def write(c: sqlite3.Connection) -> int:
            # The rows and their search terms are built here, in the store's thread: for the
            # demo bank (373 questions) that is about 6 ms of CPU the event loop would wait.
            c.executemany(
                "INSERT OR REPLACE INTO quiz VALUES "
                "(:capitolo, :numero, :argomento, :difficolta, :corretta, :testo, :doc)",
                [_quiz_row(q) for q in questions],
            )
            _write_terms(c, questions)
            return len(questions)

        return await self._db.run(write)

    async def _many(
        self, where: str, params: tuple[Any, ...], order: str, limit: int
    ) -> list[Question]:
        rows = await self._db.run(
            lambda c: c.execute(
                f"SELECT doc FROM quiz {where} ORDER BY {order} LIMIT ?", (*params, limit)
            ).fetchall()
        )
        return [json.loads(row["doc"]) for row in rows]

    async def _one(
        self, where: str, params: tuple[Any, ...], order: str = "RANDOM()"
    ) -> Question | None:
        found = await self._many(where, params, order, 1)
        return found[0] if found else None

    async def random_question(self) -> Question | None:
        return await self._one("", ())

    async def random_by_field(self, field: str, value: Any) -> Question | None:
        if field not in QUESTION_FIELDS:
            raise ValueError(f"unknown question field {field!r}; valid: {list(QUESTION_FIELDS)}")
        if field in ("capitolo", "numero"):
            return await self._one(f"WHERE {field} = ?", (int(value),))
        return await self._one(f"WHERE lower({field}) = lower(?)", (str(value),))

    async def sample(self, size: int, *, capitolo: int | None = None) -> list[Question]:
        if capitolo is None:
            return await self._many("", (), "RANDOM()", size)
        return await self._many("WHERE capitolo = ?", (capitolo,), "RANDOM()", size)

    async def by_chapter_and_number(self, capitolo: int, numero: int) -> Question | None:
        return await self._one("WHERE capitolo = ? AND numero = ?", (capitolo, numero), "capitolo")

    async def by_keys(self, keys: Sequence[QuestionKey]) -> list[Question]:
        wanted = list(dict.fromkeys((int(c), int(n)) for c, n in keys))
        if not wanted:
            return []
        return await self._db.run(lambda c: _questions_by_keys(c, wanted))

    async def list_questions(self, *, capitolo: int | None, limit: int) -> list[Question]:
        if capitolo is None:
            return await self._many("", (), "capitolo, numero", limit)
        return await self._many("WHERE capitolo = ?", (capitolo,), "numero", limit)

    async def search_text(
        self, text: str, *, capitolo: int | None = None, limit: int = 5
    ) -> list[Question]:
        plan = search_plan(text)
        if not plan or limit <= 0:
            return []
        terms = plan.terms

        def find(c: sqlite3.Connection) -> list[Question]:
            # One connection and one thread hop for the lookup, the ranking and the fetch.
            matches: dict[QuestionKey, set[str]] = {}
            for start in range(0, len(terms), _MAX_PARAMS):
                chunk = terms[start : start + _MAX_PARAMS]
                sql = (
                    "SELECT term, capitolo, numero FROM quiz_terms "
                    f"WHERE term IN ({', '.join('?' * len(chunk))})"
                )
                params: list[Any] = list(chunk)
                if capitolo is not None:
                    sql += " AND capitolo = ?"
                    params.append(capitolo)
                for term, chapter, number in c.execute(sql, params):
                    matches.setdefault((chapter, number), set()).add(term)
            return _questions_by_keys(c, plan.rank(matches, limit))

        return await self._db.run(find)


class SqliteAttemptStore:
    def __init__(self, path: Path, *, timeout_s: float = BUSY_TIMEOUT_S):
        self._db = _Sqlite(path, migrate=_migrate, timeout_s=timeout_s)

    async def add_attempt(self, attempt: Attempt) -> None:
        row = attempt.model_dump()
        await self._db.run(
            lambda c: c.execute(
                "INSERT INTO quiz_attempts "
                "(userId, capitolo, numero, risposta, corretta, timestamp, turn_id, exam_id) "
                "VALUES (:userId, :capitolo, :numero, :risposta, :corretta, :timestamp, "
                ":turn_id, :exam_id) "
                "ON CONFLICT (userId, exam_id, capitolo, numero) WHERE exam_id IS NOT NULL "
                "DO UPDATE SET risposta = excluded.risposta, corretta = excluded.corretta, "
                "timestamp = excluded.timestamp, turn_id = excluded.turn_id",
                row,
            )
        )

    async def chapter_stats(self, user_id: str) -> list[ChapterStats]:
        rows = await self._db.run(
            lambda c: c.execute(
                "SELECT capitolo, COUNT(*) AS risposte, SUM(corretta) AS corrette "
                "FROM quiz_attempts WHERE userId = ? GROUP BY capitolo ORDER BY capitolo",
                (user_id,),
            ).fetchall()
        )
        return [ChapterStats(**dict(row)) for row in rows]

    async def daily_stats(self, user_id: str, since: str) -> list[DayStats]:
        rows = await self._db.run(  # served by the index (userId, timestamp)
            lambda c: c.execute(
                "SELECT substr(timestamp, 1, 10) AS giorno, capitolo, COUNT(*) AS risposte, "
                "SUM(corretta) AS corrette FROM quiz_attempts "
                "WHERE userId = ? AND timestamp >= ? GROUP BY giorno, capitolo "
                "ORDER BY giorno, capitolo",
                (user_id, since),
            ).fetchall()
        )
        return [DayStats(**dict(row)) for row in rows]

    async def recent_attempts(self, user_id: str, limit: int) -> list[Attempt]:
        rows = await self._db.run(
            lambda c: c.execute(
                "SELECT * FROM quiz_attempts WHERE userId = ? "
                "ORDER BY timestamp DESC, rowid DESC LIMIT ?",
                (user_id, limit),
            ).fetchall()
        )
        return [_attempt(row) for row in rows]

    async def question_attempts(self, user_id: str, key: QuestionKey) -> list[Attempt]:
        rows = await self._db.run(  # served by the index (userId, capitolo, corretta)
            lambda c: c.execute(
                "SELECT * FROM quiz_attempts WHERE userId = ? AND capitolo = ? AND numero = ? "
                "ORDER BY timestamp, rowid",
                (user_id, *key),
            ).fetchall()
        )
        return [_attempt(row) for row in rows]

    async def forget_turn(self, user_id: str, turn_id: str) -> list[QuestionKey]:
        rows = await self._db.run(
            lambda c: c.execute(
                "DELETE FROM quiz_attempts WHERE userId = ? AND turn_id = ? AND exam_id IS NULL "
                "RETURNING capitolo, numero",
                (user_id, turn_id),
            ).fetchall()
        )
        return list(dict.fromkeys((int(r["capitolo"]), int(r["numero"])) for r in rows))


def _attempt(row: sqlite3.Row) -> Attempt:
    return Attempt(**{**dict(row), "corretta": bool(row["corretta"])})
