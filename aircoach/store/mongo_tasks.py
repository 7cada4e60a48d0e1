"""MongoDB stores of the task engine: `task_runs`, `task_review_queue`, `contacts`. Same
connection rules as the chat store (`MongoConnection`: one client per event loop); the
indexes below serve every read these stores make."""

from __future__ import annotations

from typing import Any

from pymongo import ASCENDING, DESCENDING, ReplaceOne
from pymongo.asynchronous.collection import AsyncCollection

from aircoach.store.mongo import MongoConnection, json_safe
from aircoach.tasks.records import Contact, ReviewItem, ReviewStatus, TaskRun

TASK_RUNS = "task_runs"
REVIEW_QUEUE = "task_review_queue"
CONTACTS = "contacts"


async def create_task_indexes(db: Any) -> None:
    """Idempotent; run once per connection on first use."""
    runs = db[TASK_RUNS]
    await runs.create_index("run_id", unique=True, name="run_id")
    await runs.create_index(
        [("task", ASCENDING), ("created_at", DESCENDING)], name="task_created_at"
    )
    queue = db[REVIEW_QUEUE]
    await queue.create_index("review_id", unique=True, name="review_id")
    await queue.create_index([("status", ASCENDING), ("review_id", ASCENDING)], name="status_id")
    await queue.create_index(
        [("status", ASCENDING), ("task", ASCENDING), ("review_id", ASCENDING)],
        name="status_task_id",
    )
    await db[CONTACTS].create_index("key", unique=True, name="key")


def _doc(doc: dict[str, Any] | None) -> dict[str, Any] | None:
    if doc is None:
        return None
    doc.pop("_id", None)
    return json_safe(doc)


class MongoTaskRunStore:
    def __init__(self, connection: MongoConnection):
        self._db = connection

    async def insert_run(self, run: TaskRun) -> None:
        await self._db.run(TASK_RUNS, lambda c: c.insert_one(run.model_dump(mode="json")))

    async def get_run(self, run_id: str) -> TaskRun | None:
        doc = _doc(await self._db.run(TASK_RUNS, lambda c: c.find_one({"run_id": run_id})))
        return TaskRun.model_validate(doc) if doc else None


class MongoReviewQueue:
    def __init__(self, connection: MongoConnection):
        self._db = connection

    async def enqueue(self, item: ReviewItem) -> None:
        await self._db.run(REVIEW_QUEUE, lambda c: c.insert_one(item.model_dump(mode="json")))

    async def get_item(self, review_id: str) -> ReviewItem | None:
        doc = _doc(await self._db.run(REVIEW_QUEUE, lambda c: c.find_one({"review_id": review_id})))
        return ReviewItem.model_validate(doc) if doc else None

    async def list_items(
        self, *, status: ReviewStatus, task: str | None, limit: int, after: str | None
    ) -> list[ReviewItem]:
        query: dict[str, Any] = {"status": status}
        if task is not None:
            query["task"] = task
        if after:
            query["review_id"] = {"$gt": after}

        async def read(c: AsyncCollection) -> list[dict[str, Any]]:
            return await c.find(query).sort("review_id", ASCENDING).limit(limit).to_list()

        docs = await self._db.run(REVIEW_QUEUE, read)
        return [ReviewItem.model_validate(_doc(d)) for d in docs]

    async def resolve(self, review_id: str, *, run_id: str, by: str, at: str) -> bool:
        update = {
            "$set": {
                "status": "resolved",
                "resolved_by": by,
                "resolved_at": at,
                "resolution_run_id": run_id,
            }
        }
        result = await self._db.run(
            REVIEW_QUEUE,
            lambda c: c.update_one({"review_id": review_id, "status": "open"}, update),
        )
        return result.modified_count == 1

    async def reopen(self, review_id: str) -> None:
        update = {
            "$set": {
                "status": "open",
                "resolved_by": None,
                "resolved_at": None,
                "resolution_run_id": None,
            }
        }
        await self._db.run(REVIEW_QUEUE, lambda c: c.update_one({"review_id": review_id}, update))


class MongoContactStore:
    def __init__(self, connection: MongoConnection):
        self._db = connection

    async def aclose(self) -> None:
        await self._db.close()

    async def upsert_contacts(self, contacts: list[Contact]) -> int:
        if not contacts:
            return 0
        ops = [
            ReplaceOne({"key": c.key}, {"key": c.key, **c.model_dump(mode="json")}, upsert=True)
            for c in contacts
        ]
        await self._db.run(CONTACTS, lambda c: c.bulk_write(ops, ordered=False))
        return len(ops)

    async def find_contact(self, key: str) -> Contact | None:
        doc = _doc(await self._db.run(CONTACTS, lambda c: c.find_one({"key": key})))
        if doc is None:
            return None
        doc.pop("key", None)
        return Contact.model_validate(doc)
