"""MongoDB stores through PyMongo's async API (`AsyncMongoClient`; Motor is deprecated).

The client is bound to the event loop that created it, and on serverless each invocation may
run in a fresh loop: `MongoClients` creates one lazily for the running loop and never hands
it to another; every MongoDB store of the process shares it (one connection pool). Indexes are created idempotently on first use. Every value read back is made
JSON-safe here (ObjectId, datetime), so the rest of the app never sees a BSON type.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import re
import time
from collections.abc import Awaitable, Callable, Sequence
from datetime import date, datetime
from typing import Any, TypeVar

import anyio
import pymongo
from bson import ObjectId
from bson.errors import BSONError
from pymongo import ASCENDING, DESCENDING, AsyncMongoClient, ReplaceOne, UpdateOne
from pymongo.asynchronous.collection import AsyncCollection
from pymongo.errors import (
    DocumentTooLarge,
    DuplicateKeyError,
    PyMongoError,
    ServerSelectionTimeoutError,
)

from aircoach.errors import StoreUnavailable, cut
from aircoach.grounding.feedback import Feedback, Voto
from aircoach.quiz.models import Attempt, ChapterStats, DayStats
from aircoach.quiz.ports import QUESTION_FIELDS, Question, QuestionKey, index_terms
from aircoach.settings import StoreSettings
from aircoach.text import TERMS_VERSION
from aircoach.text import plan as search_plan
from aircoach.turn.ports import RESERVED_CONVERSATION_ID, ConversationScope
from aircoach.turn.records import ConversationSummary, Turn

T = TypeVar("T")
log = logging.getLogger(__name__)

_NEWEST_FIRST = [("timestamp", DESCENDING), ("turn_id", DESCENDING)]
# Turn ids are unique and time-ordered (the turn's start): the order of the questions, exact
# within a second, whatever the timestamps' format.
_LATEST_TURNS = [("turn_id", DESCENDING)]
_BY_CHAPTER = [("capitolo", ASCENDING), ("numero", ASCENDING)]
_DEADLINE_MARGIN_S = 5.0
_DRIVER_DIR = os.path.dirname(pymongo.__file__) + os.sep


def _expired(deadline: anyio.CancelScope | None) -> bool:
    return deadline is not None and deadline.cancel_called


def _raised_in_driver(exc: BaseException) -> bool:
    """Whether `exc` was raised by PyMongo's own code (its innermost frame is there)."""
    tb = exc.__traceback__
    if tb is None:
        return False
    while tb.tb_next is not None:
        tb = tb.tb_next
    return tb.tb_frame.f_code.co_filename.startswith(_DRIVER_DIR)


def _refusal(exc: BaseException) -> str:
    """A driver's refusal of a document, without the document: `DocumentTooLarge` says only
    sizes; `InvalidDocument` and `UnicodeEncodeError` quote the value they could not encode."""
    if isinstance(exc, DocumentTooLarge):
        return f"DocumentTooLarge: {exc}"
    return type(exc).__name__


def json_safe(value: Any) -> Any:
    """BSON values as JSON values: ObjectId and datetimes become strings, tuples and sets lists."""
    if isinstance(value, dict):
        return {str(k): json_safe(v) for k, v in value.items()}
    if isinstance(value, list | tuple | set | frozenset):
        return [json_safe(v) for v in value]
    if isinstance(value, ObjectId):
        return str(value)
    if isinstance(value, datetime | date):
        return value.isoformat()
    return value


class MongoClients:
    """The process's one `AsyncMongoClient` (one connection pool), shared by every MongoDB
    store: created on first use for the running event loop, and never handed to another
    loop."""

    def __init__(self, settings: StoreSettings, *, clock: Callable[[], float] = time.monotonic):
        """`clock`: monotonic seconds (how long the server counts as unreachable)."""
        if not settings.mongodb_uri:
            raise ValueError("MongoClients needs MONGODB_URI")
        self.settings = settings
        self.clock = clock
        self._loop: asyncio.AbstractEventLoop | None = None
        self._client: AsyncMongoClient | None = None
        self._unreachable_until = 0.0

    def unreachable(self) -> bool:
        """Whether an operation found no server to run on in the last STORE_TIMEOUT_S:
        then every operation fails at once instead of each waiting STORE_TIMEOUT_S again
        (a turn makes a dozen; during an outage they stacked past a minute)."""
        return self.clock() < self._unreachable_until

    def failed_to_reach(self, exc: Exception) -> None:
        if not self.unreachable():
            log.warning(
                "MongoDB unreachable (%s): store operations fail at once for %ss",
                type(exc).__name__,
                self.settings.store_timeout_s,
            )
        self._unreachable_until = self.clock() + self.settings.store_timeout_s

    def current(self) -> AsyncMongoClient:
        loop = asyncio.get_running_loop()
        if self._client is None or self._loop is not loop:
            # A client from another (possibly closed) loop must not be touched from this one;
            # it is dropped, and its sockets go with it.
            timeout_ms = int(self.settings.store_timeout_s * 1000)
            self._client = AsyncMongoClient(
                self.settings.mongodb_uri,
                serverSelectionTimeoutMS=timeout_ms,
                connectTimeoutMS=timeout_ms,
                timeoutMS=timeout_ms,
                tz_aware=True,
                appname="aircoach",
            )
            self._loop = loop
        return self._client

    async def discard(self, client: AsyncMongoClient) -> None:
        """Replace `client`, which left an operation waiting past its deadline or failed
        inside the driver (see `MongoConnection.run`): its pool or topology may stay stuck.
        The next operation gets a new client; the old one gets STORE_TIMEOUT_S to close,
        shielded like every operation."""
        if client is not self._client:
            return  # another operation has replaced it already
        self._client = self._loop = None
        with (
            anyio.CancelScope(shield=True),
            anyio.move_on_after(self.settings.store_timeout_s) as closing,
        ):
            try:
                await client.close()
            except Exception as exc:
                log.warning("MongoDB: the replaced client failed to close (%r)", exc)
        if closing.cancel_called:
            log.warning("MongoDB: the replaced client did not close in time; it is dropped")

    async def close(self) -> None:
        """Close the client of the running loop (the CLI calls this before its loop ends)."""
        if self._client is not None and self._loop is asyncio.get_running_loop():
            await self._client.close()
        self._client = self._loop = None


class MongoConnection:
    """The collections of one group of stores (chats and quiz, tasks, guards) on the shared
    client, their indexes created on first use."""

    def __init__(
        self,
        settings: StoreSettings,
        *,
        create_indexes: Callable[[Any], Awaitable[None]] | None = None,
        clients: MongoClients | None = None,
    ):
        """`create_indexes(db)`: the indexes of the collections this connection serves
        (default: the chat and quiz collections); `clients`: the process's shared client
        (default: a client of its own)."""
        if not settings.mongodb_uri:
            raise ValueError("MongoConnection needs MONGODB_URI")
        self.settings = settings
        self.clients = clients or MongoClients(settings)
        self._index = create_indexes or self._create_indexes
        self._indexed = False

    async def collection(self, name: str) -> AsyncCollection:
        db = self.clients.current()[self.settings.mongodb_db]
        if not self._indexed:
            await self._index(db)
            self._indexed = True
        return db[name]

    async def _create_indexes(self, db: Any) -> None:
        # create_index is idempotent: every cold instance may run this once, concurrently.
        chats = db[self.settings.mongodb_chats_collection]
        await chats.create_index([("userId", ASCENDING), *_NEWEST_FIRST], name="user_time")
        await chats.create_index([("userId", ASCENDING), *_LATEST_TURNS], name="user_turn")
        await chats.create_index("turn_id", unique=True, name="turn_id")
        await chats.create_index(
            [("userId", ASCENDING), ("conversation_id", ASCENDING), *_LATEST_TURNS],
            name="user_conversation",
        )
        await chats.create_index([("feedback.at", DESCENDING)], sparse=True, name="feedback_time")
        quiz = db[self.settings.mongodb_quiz_collection]
        await quiz.create_index(_BY_CHAPTER, unique=True, name="capitolo_numero")
        # The forgiving search looks questions up by their stems (`aircoach.text`); a
        # `$text` index would neither fold plurals the same way nor forgive typos.
        await quiz.create_index("terms", name="terms")
        await quiz.create_index("terms_v", name="terms_v")
        await _reindex_stale_questions(quiz)
        attempts = db[self.settings.mongodb_attempts_collection]
        await attempts.create_index(
            [("userId", ASCENDING), ("capitolo", ASCENDING), ("corretta", ASCENDING)],
            name="user_chapter",
        )
        await attempts.create_index(
            [("userId", ASCENDING), ("timestamp", DESCENDING)], name="user_time"
        )
        await attempts.create_index(
            [
                ("userId", ASCENDING),
                ("exam_id", ASCENDING),
                ("capitolo", ASCENDING),
                ("numero", ASCENDING),
            ],
            unique=True,
            partialFilterExpression={"exam_id": {"$type": "string"}},
            name="exam_question",
        )

    async def run(self, name: str, op: Callable[[AsyncCollection], Awaitable[T]]) -> T:
        """Run `op` on collection `name`; a backend failure becomes `StoreUnavailable`, at
        once while the server counts as unreachable (`MongoClients.unreachable`).

        `op` is shielded from the caller's cancellation (a client that left, a turn's
        deadline, a stopped ticker): the caller waits for it, then is cancelled. So an
        operation never stops halfway (a `find` and its `delete_many`), and the driver never
        sees a cancellation: PyMongo 4.20 on Python 3.11 loses one now and then (3.11's
        `asyncio.wait_for`), and its pool then kept operations waiting past any timeout.

        It is bounded too: the driver ends each of its operations after STORE_TIMEOUT_S
        (`timeoutMS`), and `op` (at most two of them) is cancelled at `_deadline_s()`. A
        client that did not end `op` by then, or that failed inside the driver with an
        error that is not a `PyMongoError` (nor a document BSON cannot hold), is replaced
        (`MongoClients.discard`). Either
        way the caller gets a `StoreUnavailable`, never a hang or a 500."""
        if self.clients.unreachable():
            raise StoreUnavailable()
        client = self.clients.current()
        deadline: anyio.CancelScope | None = None
        failure: Exception | None = None
        try:
            with anyio.CancelScope(shield=True):
                collection = await self.collection(name)
                with anyio.move_on_after(self._deadline_s()) as deadline:
                    return await op(collection)
        except Exception as exc:
            if not _expired(deadline):
                if isinstance(exc, PyMongoError):
                    # Only a server the driver could not select counts: a slow query that
                    # ran out of time says nothing about the others (a network error marks
                    # the server unknown, and the next operation's selection then times out).
                    if isinstance(exc, ServerSelectionTimeoutError):
                        self.clients.failed_to_reach(exc)
                    raise StoreUnavailable() from exc
                if not _raised_in_driver(exc):
                    raise  # ours: a 500 that its traceback explains
                if isinstance(exc, BSONError | UnicodeEncodeError):
                    # The document, not the client: one over 16 MB (`DocumentTooLarge`) or
                    # that BSON cannot encode fails alone, and the pool stays. Logged by its
                    # class: an encoding error quotes the whole value (a question, an answer).
                    log.warning("MongoDB %s: a document was refused (%s)", name, _refusal(exc))
                    raise StoreUnavailable() from exc
            failure = exc
        if _expired(deadline):
            what = f"an operation the driver did not end in {self._deadline_s()}s was cancelled"
        else:
            # Bounded: an error of the driver's own code names what failed, not a document;
            # should one quote a value, at most this much of it reaches the log.
            what = f"the driver failed ({cut(repr(failure), 200)})"
        log.warning("MongoDB %s: %s; the client is replaced", name, what)
        await self.clients.discard(client)
        raise StoreUnavailable() from failure

    def _deadline_s(self) -> float:
        """Two driver operations and a margin: a driver's own timeout, even late on a busy
        event loop, comes first."""
        return 2 * self.settings.store_timeout_s + _DEADLINE_MARGIN_S

    async def close(self) -> None:
        """Close the shared client of the running loop (the CLI calls this before its loop
        ends)."""
        await self.clients.close()


async def _turn_ids(chats: AsyncCollection, query: dict[str, Any]) -> list[str]:
    docs = await chats.find(query, {"turn_id": 1, "_id": 0}).to_list()
    return [doc["turn_id"] for doc in docs]


def _turn(doc: dict[str, Any]) -> Turn:
    doc.pop("_id", None)
    return Turn.model_validate(json_safe(doc))


class MongoChatStore:
    def __init__(self, connection: MongoConnection):
        self._db = connection
        self._name = connection.settings.mongodb_chats_collection

    async def aclose(self) -> None:
        await self._db.close()

    async def append_turn(self, turn: Turn) -> None:
        # Timestamps are stored as the ISO strings the app made (UTC, one format): they sort
        # as text, round-trip exactly and serve as the `before` cursor unchanged.
        doc = turn.model_dump(exclude={"turn_id"})

        async def insert_once(c: AsyncCollection) -> None:
            # A concurrent write of the same turn (a dead letter replayed twice) may win.
            with contextlib.suppress(DuplicateKeyError):
                await c.update_one({"turn_id": turn.turn_id}, {"$setOnInsert": doc}, upsert=True)

        await self._db.run(self._name, insert_once)

    async def recent_turns(
        self, user_id: str, limit: int, *, conversation: str | None = None
    ) -> list[Turn]:
        if limit <= 0:
            return []
        # `conversation_id: None` also matches the turns stored before conversations existed.
        query = {"userId": user_id, "conversation_id": conversation}

        async def read(c: AsyncCollection) -> list[dict[str, Any]]:
            return await c.find(query).sort(_LATEST_TURNS).limit(limit).to_list()

        docs = await self._db.run(self._name, read)
        return [_turn(d) for d in reversed(docs)]

    async def latest_turn_ids(
        self, user_id: str, limit: int = 2, *, conversation: str | None = None
    ) -> list[str]:
        async def read(c: AsyncCollection) -> list[dict[str, Any]]:
            cursor = c.find(
                {"userId": user_id, "conversation_id": conversation}, {"turn_id": 1, "_id": 0}
            )
            return await cursor.sort(_LATEST_TURNS).limit(limit).to_list()

        return [doc["turn_id"] for doc in await self._db.run(self._name, read)]

    async def conversations(
        self, user_id: str, *, limit: int, before_turn: str | None = None
    ) -> list[ConversationSummary]:
        older = [{"$match": {"newest": {"$lt": before_turn}}}] if before_turn else []
        pipeline: list[dict[str, Any]] = [
            {"$match": {"userId": user_id, "conversation_id": {"$type": "string"}}},
            {"$sort": {"turn_id": 1}},
            {
                "$group": {
                    "_id": "$conversation_id",
                    "first_question": {"$first": "$human"},
                    "last_activity": {"$last": "$timestamp"},
                    "newest": {"$max": "$turn_id"},
                    "turns": {"$sum": 1},
                }
            },
            *older,
            {"$sort": {"newest": -1}},
            {"$limit": limit},
        ]

        async def read(c: AsyncCollection) -> list[dict[str, Any]]:
            return await (await c.aggregate(pipeline)).to_list()

        return [
            ConversationSummary(
                conversation_id=doc["_id"],
                first_question=doc["first_question"],
                last_activity=doc["last_activity"],
                last_turn_id=doc["newest"],
                turns=doc["turns"],
            )
            for doc in await self._db.run(self._name, read)
        ]

    async def delete_turn(self, user_id: str, turn_id: str) -> bool:
        async def delete(c: AsyncCollection) -> bool:
            result = await c.delete_one({"userId": user_id, "turn_id": turn_id})
            return bool(result.deleted_count == 1)

        return await self._db.run(self._name, delete)

    async def conversation_turn_ids(self, user_id: str, conversation: str) -> list[str]:
        query = {"userId": user_id, "conversation_id": conversation}

        return await self._db.run(self._name, lambda c: _turn_ids(c, query))

    async def delete_conversation(self, user_id: str, conversation: str) -> list[str]:
        query = {"userId": user_id, "conversation_id": conversation}

        async def delete(c: AsyncCollection) -> list[str]:
            ids = await _turn_ids(c, query)
            if ids:
                await c.delete_many({**query, "turn_id": {"$in": ids}})
            return ids

        return await self._db.run(self._name, delete)

    async def get_turn(self, user_id: str, turn_id: str) -> Turn | None:
        async def read(c: AsyncCollection) -> dict[str, Any] | None:
            return await c.find_one({"turn_id": turn_id, "userId": user_id})

        doc = await self._db.run(self._name, read)
        return _turn(doc) if doc is not None else None

    async def history(
        self,
        user_id: str,
        *,
        limit: int,
        before: str | None = None,
        before_turn: str | None = None,
        conversation: str | ConversationScope = ConversationScope.EVERY,
    ) -> list[Turn]:
        query: dict[str, Any] = {"userId": user_id}
        if conversation is ConversationScope.DEFAULT:
            # None also matches a turn stored before conversations existed (no such field).
            query["conversation_id"] = {"$in": [None, RESERVED_CONVERSATION_ID]}
        elif isinstance(conversation, str):
            query["conversation_id"] = conversation
        if before:
            query["timestamp"] = {"$lt": before}
        if before_turn:
            query["turn_id"] = {"$lt": before_turn}

        async def read(c: AsyncCollection) -> list[dict[str, Any]]:
            return await c.find(query).sort(_LATEST_TURNS).limit(limit).to_list()

        return [_turn(d) for d in await self._db.run(self._name, read)]

    async def set_feedback(self, user_id: str, turn_id: str, feedback: Feedback) -> bool:
        async def update(c: AsyncCollection) -> int:
            result = await c.update_one(
                {"turn_id": turn_id, "userId": user_id},
                {"$set": {"feedback": feedback.model_dump()}},
            )
            return result.matched_count

        return bool(await self._db.run(self._name, update))

    async def feedback(self, *, voto: Voto | None, limit: int, before: str | None) -> list[Turn]:
        query: dict[str, Any] = {"feedback.at": {"$type": "string"}}
        if voto:
            query["feedback.voto"] = voto
        if before:
            query["feedback.at"] = {"$type": "string", "$lt": before}

        async def read(c: AsyncCollection) -> list[dict[str, Any]]:
            cursor = c.find(query).sort([("feedback.at", DESCENDING), ("turn_id", DESCENDING)])
            return await cursor.limit(limit).to_list()

        return [_turn(d) for d in await self._db.run(self._name, read)]


async def _reindex_stale_questions(quiz: AsyncCollection) -> None:
    """Give questions loaded by an earlier version (no terms, or terms of an older
    `TERMS_VERSION`) their search terms; a no-op read when all are current."""
    stale = await quiz.find(
        {"terms_v": {"$ne": TERMS_VERSION}}, {"terms": 0, "terms_v": 0}
    ).to_list()
    if stale:
        await quiz.bulk_write(
            [UpdateOne({"_id": doc["_id"]}, {"$set": _search_fields(doc)}) for doc in stale],
            ordered=False,
        )
        log.info("quiz: search terms rebuilt for %d questions", len(stale))


def _search_fields(question: Question) -> dict[str, Any]:
    return {"terms": index_terms(question), "terms_v": TERMS_VERSION}


_HIDDEN = ("_id", "terms", "terms_v")  # storage fields, never part of a question


def _question(doc: dict[str, Any] | None) -> Question | None:
    if doc is None:
        return None
    for name in _HIDDEN:
        doc.pop(name, None)
    return json_safe(doc)


class MongoQuizStore:
    def __init__(self, connection: MongoConnection):
        self._db = connection
        self._name = connection.settings.mongodb_quiz_collection

    async def aclose(self) -> None:
        await self._db.close()

    async def count(self) -> int:
        return await self._db.run(self._name, lambda c: c.count_documents({}))

    async def chapter_counts(self) -> dict[int, int]:
        async def group(c: AsyncCollection) -> list[dict[str, Any]]:
            cursor = await c.aggregate([{"$group": {"_id": "$capitolo", "n": {"$sum": 1}}}])
            return await cursor.to_list()

        rows = await self._db.run(self._name, group)
        return {int(row["_id"]): int(row["n"]) for row in sorted(rows, key=lambda r: r["_id"])}

    async def upsert_questions(self, questions: list[Question]) -> int:
        if not questions:
            return 0
        ops = []
        for q in questions:
            key = {"capitolo": int(q["capitolo"]), "numero": int(q["numero"])}
            ops.append(ReplaceOne(key, {**q, **key, **_search_fields(q)}, upsert=True))
        await self._db.run(self._name, lambda c: c.bulk_write(ops, ordered=False))
        return len(ops)

    async def _sample(self, match: dict[str, Any], size: int = 1) -> list[Question]:
        async def pick(c: AsyncCollection) -> list[dict[str, Any]]:
            cursor = await c.aggregate([{"$match": match}, {"$sample": {"size": size}}])
            return await cursor.to_list()

        docs = await self._db.run(self._name, pick)
        # $sample may return a document twice when the collection is small.
        found: dict[QuestionKey, Question] = {}
        for doc in docs:
            q = _question(doc)
            if q is not None:
                found.setdefault((q["capitolo"], q["numero"]), q)
        return list(found.values())

    async def _sample_one(self, match: dict[str, Any]) -> Question | None:
        found = await self._sample(match)
        return found[0] if found else None

    async def random_question(self) -> Question | None:
        return await self._sample_one({})

    async def random_by_field(self, field: str, value: Any) -> Question | None:
        if field not in QUESTION_FIELDS:
            raise ValueError(f"unknown question field {field!r}; valid: {list(QUESTION_FIELDS)}")
        if field in ("capitolo", "numero"):
            return await self._sample_one({field: int(value)})
        return await self._sample_one({field: _case_insensitive(str(value), whole=True)})

    async def sample(self, size: int, *, capitolo: int | None = None) -> list[Question]:
        if size <= 0:
            return []
        return await self._sample({} if capitolo is None else {"capitolo": capitolo}, size)

    async def by_chapter_and_number(self, capitolo: int, numero: int) -> Question | None:
        doc = await self._db.run(
            self._name, lambda c: c.find_one({"capitolo": capitolo, "numero": numero})
        )
        return _question(doc)

    async def by_keys(self, keys: Sequence[QuestionKey]) -> list[Question]:
        wanted = list(dict.fromkeys((int(c), int(n)) for c, n in keys))
        if not wanted:
            return []
        # Chapters x numbers: index bounds on (capitolo, numero), a few extra questions at
        # most (dropped below); an `$or` of pairs costs one index scan per pair, and
        # nx-27017 answers it with a collection scan (30x slower at 10,000 questions).
        query = {
            "capitolo": {"$in": sorted({c for c, _ in wanted})},
            "numero": {"$in": sorted({n for _, n in wanted})},
        }
        docs = await self._db.run(self._name, lambda c: c.find(query).to_list())
        found = {(q["capitolo"], q["numero"]): q for d in docs if (q := _question(d))}
        return [found[key] for key in wanted if key in found]

    async def list_questions(self, *, capitolo: int | None, limit: int) -> list[Question]:
        query = {} if capitolo is None else {"capitolo": capitolo}

        async def read(c: AsyncCollection) -> list[dict[str, Any]]:
            return await c.find(query).sort(_BY_CHAPTER).limit(limit).to_list()

        return [q for d in await self._db.run(self._name, read) if (q := _question(d))]

    async def search_text(
        self, text: str, *, capitolo: int | None = None, limit: int = 5
    ) -> list[Question]:
        plan = search_plan(text)
        if not plan or limit <= 0:
            return []
        terms = plan.terms
        query: dict[str, Any] = {"terms": {"$in": terms}}
        if capitolo is not None:
            query["capitolo"] = capitolo
        fields = {"_id": 0, "capitolo": 1, "numero": 1, "terms": 1}

        async def lookup(c: AsyncCollection) -> list[dict[str, Any]]:
            return await c.find(query, fields).to_list()

        wanted = set(terms)
        matches = {
            (int(d["capitolo"]), int(d["numero"])): wanted.intersection(d.get("terms", ()))
            for d in await self._db.run(self._name, lookup)
        }
        return await self.by_keys(plan.rank(matches, limit))


class MongoAttemptStore:
    def __init__(self, connection: MongoConnection):
        self._db = connection
        self._name = connection.settings.mongodb_attempts_collection

    async def aclose(self) -> None:
        await self._db.close()

    async def add_attempt(self, attempt: Attempt) -> None:
        doc = attempt.model_dump()
        if attempt.exam_id is None:
            await self._db.run(self._name, lambda c: c.insert_one(doc))
            return
        # One per exam and question (the unique index exam_question): a resubmission replaces it.
        query = {k: doc[k] for k in ("userId", "exam_id", "capitolo", "numero")}
        await self._db.run(self._name, lambda c: c.update_one(query, {"$set": doc}, upsert=True))

    async def chapter_stats(self, user_id: str) -> list[ChapterStats]:
        # Two single-key groups, not one `$cond` sum: both are served by the index
        # (userId, capitolo, corretta), and they work on every server that speaks the protocol.
        async def per_chapter(c: AsyncCollection, match: dict[str, Any]) -> dict[int, int]:
            cursor = await c.aggregate(
                [{"$match": match}, {"$group": {"_id": "$capitolo", "n": {"$sum": 1}}}]
            )
            return {int(row["_id"]): int(row["n"]) for row in await cursor.to_list()}

        answered = await self._db.run(self._name, lambda c: per_chapter(c, {"userId": user_id}))
        right = await self._db.run(
            self._name, lambda c: per_chapter(c, {"userId": user_id, "corretta": True})
        )
        return [
            ChapterStats(capitolo=chapter, risposte=n, corrette=right.get(chapter, 0))
            for chapter, n in sorted(answered.items())
        ]

    async def daily_stats(self, user_id: str, since: str) -> list[DayStats]:
        # One string key per day and chapter, and `$cond` on `$eq`: the forms every server
        # that speaks the protocol evaluates (a compound `_id` is not, everywhere).
        day = {"$substrCP": ["$timestamp", 0, 10]}
        pipeline: list[dict[str, Any]] = [
            {"$match": {"userId": user_id, "timestamp": {"$gte": since}}},  # index user_time
            {
                "$project": {
                    "k": {"$concat": [day, "|", {"$toString": "$capitolo"}]},
                    "right": {"$cond": [{"$eq": ["$corretta", True]}, 1, 0]},
                }
            },
            {"$group": {"_id": "$k", "risposte": {"$sum": 1}, "corrette": {"$sum": "$right"}}},
        ]

        async def read(c: AsyncCollection) -> list[dict[str, Any]]:
            return await (await c.aggregate(pipeline)).to_list()

        rows = []
        for row in await self._db.run(self._name, read):
            giorno, capitolo = str(row["_id"]).split("|")
            rows.append(
                DayStats(
                    giorno=giorno,
                    capitolo=int(capitolo),
                    risposte=int(row["risposte"]),
                    corrette=int(row["corrette"]),
                )
            )
        return sorted(rows, key=lambda d: (d.giorno, d.capitolo))

    async def recent_attempts(self, user_id: str, limit: int) -> list[Attempt]:
        if limit <= 0:
            return []

        async def read(c: AsyncCollection) -> list[dict[str, Any]]:
            cursor = c.find({"userId": user_id}, {"_id": 0})
            # _id: insertion order among attempts made in the same microsecond.
            newest_first = [("timestamp", DESCENDING), ("_id", DESCENDING)]
            return await cursor.sort(newest_first).limit(limit).to_list()

        return [Attempt.model_validate(json_safe(d)) for d in await self._db.run(self._name, read)]

    async def question_attempts(self, user_id: str, key: QuestionKey) -> list[Attempt]:
        query = {"userId": user_id, "capitolo": key[0], "numero": key[1]}

        async def read(c: AsyncCollection) -> list[dict[str, Any]]:
            oldest_first = [("timestamp", ASCENDING), ("_id", ASCENDING)]
            return await c.find(query, {"_id": 0}).sort(oldest_first).to_list()

        return [Attempt.model_validate(json_safe(d)) for d in await self._db.run(self._name, read)]

    async def forget_turn(self, user_id: str, turn_id: str) -> list[QuestionKey]:
        query = {"userId": user_id, "turn_id": turn_id, "exam_id": None}

        async def forget(c: AsyncCollection) -> list[QuestionKey]:
            found = await c.find(query, {"capitolo": 1, "numero": 1}).to_list()
            if found:
                await c.delete_many({"_id": {"$in": [d["_id"] for d in found]}})
            return list(dict.fromkeys((int(d["capitolo"]), int(d["numero"])) for d in found))

        return await self._db.run(self._name, forget)


def _case_insensitive(text: str, *, whole: bool) -> dict[str, str]:
    # re.escape: user text is matched literally, never interpreted as a pattern.
    pattern = re.escape(text)
    return {"$regex": f"^{pattern}$" if whole else pattern, "$options": "i"}
