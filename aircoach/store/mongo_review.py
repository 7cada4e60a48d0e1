"""MongoDB store of the quiz's per-user review records (`quiz.ports.ReviewStore`): one
document per user and question; the indexes serve every read below."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from pymongo import ASCENDING, UpdateOne
from pymongo.asynchronous.collection import AsyncCollection

from aircoach.quiz.models import ReviewRecord
from aircoach.quiz.ports import QuestionKey
from aircoach.store.mongo import MongoConnection, json_safe

REVIEWS = "quiz_reviews"
_KEY = [("userId", ASCENDING), ("capitolo", ASCENDING), ("numero", ASCENDING)]
_SCHEDULE = ("card", "due", "reviewed_at", "reviews", "last_right")


async def create_review_indexes(db: Any) -> None:
    """Idempotent; run once per connection on first use."""
    reviews = db[REVIEWS]
    await reviews.create_index(_KEY, unique=True, name="user_question")
    await reviews.create_index([("userId", ASCENDING), ("due", ASCENDING)], name="user_due")


def _record(doc: dict[str, Any]) -> ReviewRecord:
    doc.pop("_id", None)
    return ReviewRecord.model_validate(json_safe(doc))


class MongoReviewStore:
    def __init__(self, connection: MongoConnection):
        self._db = connection

    async def get(self, user_id: str, key: QuestionKey) -> ReviewRecord | None:
        query = {"userId": user_id, "capitolo": key[0], "numero": key[1]}
        doc = await self._db.run(REVIEWS, lambda c: c.find_one(query))
        return None if doc is None else _record(doc)

    async def save_schedule(self, record: ReviewRecord) -> None:
        doc = record.model_dump()
        query = {"userId": record.userId, "capitolo": record.capitolo, "numero": record.numero}
        update = {"$set": {name: doc[name] for name in _SCHEDULE}}
        await self._db.run(REVIEWS, lambda c: c.update_one(query, update, upsert=True))

    async def mark_asked(self, user_id: str, keys: Sequence[QuestionKey], at: str) -> None:
        ops = [
            UpdateOne(
                {"userId": user_id, "capitolo": int(c), "numero": int(n)},
                {"$set": {"asked_at": at}, "$setOnInsert": {"reviews": 0}},
                upsert=True,
            )
            for c, n in dict.fromkeys(keys)
        ]
        if ops:
            await self._db.run(REVIEWS, lambda c: c.bulk_write(ops, ordered=False))

    async def due(self, user_id: str, now: str, limit: int) -> list[ReviewRecord]:
        query = {"userId": user_id, "due": {"$type": "string", "$lte": now}}

        async def read(c: AsyncCollection) -> list[dict[str, Any]]:
            order = [("due", ASCENDING), ("capitolo", ASCENDING), ("numero", ASCENDING)]
            return await c.find(query).sort(order).limit(limit).to_list()

        return [_record(d) for d in await self._db.run(REVIEWS, read)]

    async def records(self, user_id: str, *, capitolo: int | None = None) -> list[ReviewRecord]:
        query: dict[str, Any] = {"userId": user_id}
        if capitolo is not None:
            query["capitolo"] = capitolo

        async def read(c: AsyncCollection) -> list[dict[str, Any]]:
            return await c.find(query).sort(_KEY[1:]).to_list()

        return [_record(d) for d in await self._db.run(REVIEWS, read)]
