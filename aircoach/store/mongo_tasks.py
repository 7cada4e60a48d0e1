"""MongoDB stores of the task engine: `task_runs`, `task_review_queue`, `contacts`. Same
connection rules as the chat store (`MongoConnection`: one client per event loop); the
indexes below serve every read these stores make."""

from __future__ import annotations

import math
from typing import Any

from pymongo import ASCENDING, DESCENDING, ReplaceOne
from pymongo.asynchronous.collection import AsyncCollection
from pymongo.errors import DuplicateKeyError

from aircoach.store.mongo import MongoConnection, json_safe
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

TASK_RUNS = "task_runs"
REVIEW_QUEUE = "task_review_queue"
CONTACTS = "contacts"
RUN_KEYS = "task_run_keys"
# Stored beside each run: what the listing filters and the stats count.
_FACTS = "facts"
_SUMMED = ("attempts", "shrunk", "fallback", "truncated", "input_tokens", "output_tokens")


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
    await runs.create_index([("task", ASCENDING), ("run_id", DESCENDING)], name="task_run_id")
    await runs.create_index([("task", ASCENDING), ("latency_ms", ASCENDING)], name="task_latency")
    await runs.create_index("origin", name="origin")
    await db[RUN_KEYS].create_index("key", unique=True, name="key")


def _doc(doc: dict[str, Any] | None) -> dict[str, Any] | None:
    if doc is None:
        return None
    doc.pop("_id", None)
    return json_safe(doc)


class MongoTaskRunStore:
    def __init__(self, connection: MongoConnection):
        self._db = connection

    async def insert_run(self, run: TaskRun) -> None:
        doc = {**run.model_dump(mode="json"), _FACTS: run_facts(run)}
        await self._db.run(TASK_RUNS, lambda c: c.insert_one(doc))

    async def get_run(self, run_id: str) -> TaskRun | None:
        doc = _run_doc(await self._db.run(TASK_RUNS, lambda c: c.find_one({"run_id": run_id})))
        return TaskRun.model_validate(doc) if doc else None

    async def stored(self, run_ids: list[str]) -> set[str]:
        if not run_ids:
            return set()

        async def read(c: AsyncCollection) -> list[dict[str, Any]]:
            query = {"run_id": {"$in": run_ids}}
            return await c.find(query, {"run_id": 1, "_id": 0}).to_list()

        return {d["run_id"] for d in await self._db.run(TASK_RUNS, read)}

    async def list_runs(self, where: RunFilter, *, limit: int, before: str | None) -> list[TaskRun]:
        query = _run_query(where)
        if before:
            query["run_id"] = {"$lt": before}

        async def read(c: AsyncCollection) -> list[dict[str, Any]]:
            return await c.find(query).sort("run_id", DESCENDING).limit(limit).to_list()

        docs = await self._db.run(TASK_RUNS, read)
        return [TaskRun.model_validate(_run_doc(d)) for d in docs]

    async def record_verdict(
        self, run_id: str, *, verdict: Verdict, output: dict[str, Any]
    ) -> None:
        update = {"$set": {"verdict": verdict, "reviewed_output": output}}
        await self._db.run(TASK_RUNS, lambda c: c.update_one({"run_id": run_id}, update))

    async def stats(self, task: str | None, since: str | None) -> list[RunStats]:
        match = _run_query(RunFilter(task=task, since=since))
        match["source"] = {"$ne": "review"}

        async def read(c: AsyncCollection) -> list[RunStats]:
            totals = await (
                await c.aggregate(
                    [
                        {"$match": match},
                        {
                            "$group": {
                                "_id": "$task",
                                "n": {"$sum": 1},
                                **{name: {"$sum": f"${_FACTS}.{name}"} for name in _SUMMED},
                            }
                        },
                        {"$sort": {"_id": 1}},
                    ]
                )
            ).to_list()
            found = []
            for row in totals:
                scoped = {**match, "task": row["_id"]}
                # One task at a time: a compound group key is not served by every server
                # that speaks the protocol (nx-27017 among them).
                by_status = await (
                    await c.aggregate(
                        [{"$match": scoped}, {"$group": {"_id": "$status", "n": {"$sum": 1}}}]
                    )
                ).to_list()

                async def quantile(q: float, n: int = row["n"], scoped: Any = scoped) -> Any:
                    rank = max(0, min(n - 1, math.ceil(q * n) - 1))
                    docs = (
                        await c.find(scoped, {"latency_ms": 1})
                        .sort("latency_ms", ASCENDING)
                        .skip(rank)
                        .limit(1)
                        .to_list()
                    )
                    return docs[0]["latency_ms"] if docs else None

                found.append(
                    RunStats(
                        task=row["_id"],
                        runs={r["_id"]: int(r["n"]) for r in by_status},
                        attempts=int(row["attempts"]),
                        shrunk=int(row["shrunk"]),
                        fallback=int(row["fallback"]),
                        truncated=int(row["truncated"]),
                        latency_p50_ms=await quantile(0.5),
                        latency_p95_ms=await quantile(0.95),
                        input_tokens=int(row["input_tokens"]),
                        output_tokens=int(row["output_tokens"]),
                    )
                )
            return found

        return await self._db.run(TASK_RUNS, read)

    async def claim(self, key: str, input_hash: str, *, now: float, lease_s: float) -> Claim:
        async def claim(c: AsyncCollection) -> Claim:
            try:
                await c.insert_one(
                    {"key": key, "input_hash": input_hash, "run_id": None, "claimed_at": now}
                )
                return Claim("new")
            except DuplicateKeyError:
                pass
            doc = await c.find_one({"key": key})
            if doc is None:  # released meanwhile
                return Claim("busy")
            if doc["input_hash"] != input_hash:
                return Claim("mismatch", doc.get("run_id"))
            if doc.get("run_id"):
                return Claim("done", doc["run_id"])
            if doc["claimed_at"] > now - lease_s:
                return Claim("busy")
            taken = await c.update_one(
                {"key": key, "run_id": None, "claimed_at": doc["claimed_at"]},
                {"$set": {"claimed_at": now}},
            )
            return Claim("new" if taken.modified_count == 1 else "busy")

        return await self._db.run(RUN_KEYS, claim)

    async def complete(self, key: str, run_id: str) -> None:
        await self._db.run(
            RUN_KEYS, lambda c: c.update_one({"key": key}, {"$set": {"run_id": run_id}})
        )

    async def release(self, key: str) -> None:
        await self._db.run(RUN_KEYS, lambda c: c.delete_one({"key": key, "run_id": None}))


def _run_doc(doc: dict[str, Any] | None) -> dict[str, Any] | None:
    found = _doc(doc)
    if found is not None:
        found.pop(_FACTS, None)
    return found


def _run_query(where: RunFilter) -> dict[str, Any]:
    query: dict[str, Any] = {}
    if where.task is not None:
        query["task"] = where.task
    if where.source is not None:
        if where.source == "http":
            query["source"] = {"$in": list(http_sources())}
        elif ":" in where.source:
            query["origin"] = where.source
        else:
            query["source"] = where.source
    if where.since is not None:
        query["created_at"] = {"$gte": where.since}
    if where.reviewed:
        query["verdict"] = {"$ne": None}
    return query


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

    async def resolve(
        self, review_id: str, *, run_id: str, by: str, at: str, verdict: Verdict = "corrected"
    ) -> bool:
        update = {
            "$set": {
                "status": "resolved",
                "resolved_by": by,
                "resolved_at": at,
                "resolution_run_id": run_id,
                "verdict": verdict,
            }
        }
        result = await self._db.run(
            REVIEW_QUEUE,
            lambda c: c.update_one({"review_id": review_id, "status": "open"}, update),
        )
        return result.modified_count == 1

    async def dismiss(self, review_id: str, *, by: str, at: str, note: str) -> bool:
        update = {
            "$set": {
                "status": "dismissed",
                "resolved_by": by,
                "resolved_at": at,
                "dismissal_note": note,
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
                "verdict": None,
            }
        }
        await self._db.run(REVIEW_QUEUE, lambda c: c.update_one({"review_id": review_id}, update))

    async def queue_stats(self, task: str | None) -> list[QueueStats]:
        match: dict[str, Any] = {"status": "open"}
        if task is not None:
            match["task"] = task

        async def read(c: AsyncCollection) -> list[dict[str, Any]]:
            pipeline = [
                {"$match": match},
                {"$group": {"_id": "$task", "n": {"$sum": 1}, "oldest": {"$min": "$created_at"}}},
                {"$sort": {"_id": 1}},
            ]
            return await (await c.aggregate(pipeline)).to_list()

        rows = await self._db.run(REVIEW_QUEUE, read)
        return [QueueStats(r["_id"], int(r["n"]), r["oldest"]) for r in rows]


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
