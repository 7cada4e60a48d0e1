"""MongoDB store of mock exams (`quiz.ports.ExamStore`): one document per exam; the indexes
serve every read below."""

from __future__ import annotations

from typing import Any

from pymongo import ASCENDING, DESCENDING
from pymongo.asynchronous.collection import AsyncCollection

from aircoach.quiz.exam_models import ExamRecord
from aircoach.store.mongo import MongoConnection, json_safe

EXAMS = "quiz_exams"


async def create_exam_indexes(db: Any) -> None:
    """Idempotent; run once per connection on first use."""
    exams = db[EXAMS]
    await exams.create_index("id", unique=True, name="id")
    await exams.create_index([("userId", ASCENDING), ("creato", DESCENDING)], name="user_time")


def _record(doc: dict[str, Any]) -> ExamRecord:
    doc.pop("_id", None)
    return ExamRecord.model_validate(json_safe(doc))


class MongoExamStore:
    def __init__(self, connection: MongoConnection):
        self._db = connection

    async def create(self, exam: ExamRecord) -> None:
        await self._db.run(EXAMS, lambda c: c.insert_one(exam.model_dump()))

    async def get(self, user_id: str, exam_id: str) -> ExamRecord | None:
        doc = await self._db.run(EXAMS, lambda c: c.find_one({"id": exam_id, "userId": user_id}))
        return None if doc is None else _record(doc)

    async def list_for(
        self, user_id: str, limit: int, *, before: tuple[str, str] | None = None
    ) -> list[ExamRecord]:
        query: dict[str, Any] = {"userId": user_id}
        if before is not None:
            creato, exam_id = before
            # `$type` beside `$lt`: nx-27017 matched nothing for a bare `$lt` on these ISO
            # strings (real MongoDB compares them as strings either way).
            query["$or"] = [
                {"creato": {"$type": "string", "$lt": creato}},
                {"creato": creato, "id": {"$lt": exam_id}},
            ]

        async def read(c: AsyncCollection) -> list[dict[str, Any]]:
            order = [("creato", DESCENDING), ("id", DESCENDING)]
            return await c.find(query).sort(order).limit(limit).to_list()

        return [_record(d) for d in await self._db.run(EXAMS, read)]

    async def claim(
        self, user_id: str, exam_id: str, at: str, *, previous: str | None = None
    ) -> bool:
        query = {"id": exam_id, "userId": user_id, "consegnato": previous}
        result = await self._db.run(
            EXAMS, lambda c: c.update_one(query, {"$set": {"consegnato": at}})
        )
        return result.modified_count == 1

    async def finish(self, user_id: str, exam_id: str, esito: dict[str, Any]) -> None:
        query = {"id": exam_id, "userId": user_id}
        await self._db.run(EXAMS, lambda c: c.update_one(query, {"$set": {"esito": esito}}))
