"""MongoDB long-term memory (`aircoach.memory.ports.MemoryStore`): collection `memory`, one
document per item. Its time-ordered `id` makes the newest items of a user one indexed read and
the bound one more; its `_id` names its slot (the user and the kind of a goal or exam, the text
of any other item), so that two instances writing the same slot at once keep one item, as a
SQLite transaction does."""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from typing import Any

from pymongo import ASCENDING, DESCENDING
from pymongo.asynchronous.collection import AsyncCollection

from aircoach.memory.ports import SINGLE_KINDS, MemoryItem, NewItem, new_item_id
from aircoach.store.mongo import MongoConnection

MEMORY = "memory"


async def create_memory_indexes(db: Any) -> None:
    """Idempotent; run once per connection on first use."""
    items = db[MEMORY]
    await items.create_index([("userId", ASCENDING), ("id", DESCENDING)], name="user_newest")
    await items.create_index("id", unique=True, name="id")
    await items.create_index(
        [("userId", ASCENDING), ("conversation_id", ASCENDING)], name="user_conversation"
    )


def _item(doc: dict[str, Any]) -> MemoryItem:
    return MemoryItem(
        id=str(doc["id"]),
        conversation_id=str(doc["conversation_id"]),
        kind=doc["kind"],
        text=str(doc["text"]),
        created_at=str(doc["created_at"]),
        turn_id=str(doc["turn_id"]),
    )


def _slot(user_id: str, item: NewItem) -> str:
    """The `_id` of the one item the user keeps of `item`'s kind (goal, exam) or text (any
    other): a hash, as a user id and a text may be long."""
    slot = item.kind if item.kind in SINGLE_KINDS else f"text:{item.text}"
    return hashlib.sha256(f"{user_id}\0{slot}".encode()).hexdigest()


class MongoMemoryStore:
    def __init__(self, connection: MongoConnection):
        self._db = connection

    async def add(self, user_id: str, items: Sequence[NewItem], *, keep: int) -> None:
        async def op(c: AsyncCollection) -> None:
            for item in reversed(items):  # the first is the newest
                same: dict[str, Any] = (
                    {"kind": item.kind} if item.kind in SINGLE_KINDS else {"text": item.text}
                )
                # Items kept before `_id` named the slot are found by their fields.
                await c.delete_many({"userId": user_id, **same})
                slot = _slot(user_id, item)
                await c.replace_one(
                    {"_id": slot},
                    {"_id": slot, "id": new_item_id(), "userId": user_id, **item.model_dump()},
                    upsert=True,
                )
            beyond = c.find({"userId": user_id}, {"id": 1}).sort("id", DESCENDING).skip(keep)
            old = [doc["id"] async for doc in beyond]
            if old:
                await c.delete_many({"userId": user_id, "id": {"$in": old}})

        if items:
            await self._db.run(MEMORY, op)

    async def items(self, user_id: str, *, limit: int) -> list[MemoryItem]:
        async def op(c: AsyncCollection) -> list[MemoryItem]:
            found = c.find({"userId": user_id}).sort("id", DESCENDING).limit(limit)
            return [_item(doc) async for doc in found]

        return await self._db.run(MEMORY, op)

    async def delete(self, user_id: str, item_id: str) -> bool:
        async def op(c: AsyncCollection) -> bool:
            result = await c.delete_one({"userId": user_id, "id": item_id})
            return bool(result.deleted_count == 1)

        return await self._db.run(MEMORY, op)

    async def clear(self, user_id: str) -> int:
        async def op(c: AsyncCollection) -> int:
            return int((await c.delete_many({"userId": user_id})).deleted_count)

        return await self._db.run(MEMORY, op)

    async def forget_conversation(self, user_id: str, conversation_id: str) -> int:
        async def op(c: AsyncCollection) -> int:
            result = await c.delete_many({"userId": user_id, "conversation_id": conversation_id})
            return int(result.deleted_count)

        return await self._db.run(MEMORY, op)
