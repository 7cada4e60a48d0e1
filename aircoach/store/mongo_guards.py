"""MongoDB reservations and quota counters (see `aircoach.store.guards`): a unique index
decides which request gets a reservation, and a conditional `$inc` with upsert never counts
past a limit, across every instance."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any

from pymongo import ASCENDING, ReturnDocument
from pymongo.asynchronous.collection import AsyncCollection
from pymongo.errors import DuplicateKeyError

from aircoach.store.mongo import MongoConnection
from aircoach.turn.guards import Reservation

IDEMPOTENCY = "idempotency"
QUOTAS = "quotas"


async def create_guard_indexes(db: Any) -> None:
    """Idempotent; run once per connection on first use. The TTL indexes let the server
    drop what has expired (the code never trusts an expired document either)."""
    reservations = db[IDEMPOTENCY]
    await reservations.create_index(
        [("userId", ASCENDING), ("key", ASCENDING)], unique=True, name="user_key"
    )
    await reservations.create_index("expires", expireAfterSeconds=0, name="expires")
    await db[QUOTAS].create_index("expires", expireAfterSeconds=0, name="expires")


def _date(seconds: float) -> datetime:
    return datetime.fromtimestamp(seconds, UTC)


class MongoReservationStore:
    def __init__(self, connection: MongoConnection):
        self._db = connection

    async def reserve(
        self,
        user_id: str,
        key: str,
        turn_id: str,
        *,
        now: float,
        ttl_s: float,
        fingerprint: str = "",
    ) -> Reservation | None:
        doc = {
            "userId": user_id,
            "key": key,
            "turn_id": turn_id,
            "fingerprint": fingerprint,
            "created_at": now,
            "expires_at": now + ttl_s,
            "expires": _date(now + ttl_s),
        }

        async def op(c: AsyncCollection) -> Reservation | None:
            try:
                await c.insert_one(dict(doc))
                return None
            except DuplicateKeyError:
                pass
            held = await c.find_one({"userId": user_id, "key": key})
            if held is None:  # expired and dropped meanwhile
                return await op(c)
            if held["expires_at"] <= now:
                replaced = await c.update_one(
                    {"userId": user_id, "key": key, "turn_id": held["turn_id"]},
                    {"$set": {k: v for k, v in doc.items() if k not in ("userId", "key")}},
                )
                if replaced.modified_count == 1:
                    return None
                held = await c.find_one({"userId": user_id, "key": key}) or held
            return Reservation(
                str(held["turn_id"]), float(held["created_at"]), str(held.get("fingerprint", ""))
            )

        return await self._db.run(IDEMPOTENCY, op)

    async def take_over(
        self, user_id: str, key: str, *, held_by: str, turn_id: str, now: float, ttl_s: float
    ) -> bool:
        async def op(c: AsyncCollection) -> bool:
            result = await c.update_one(
                {"userId": user_id, "key": key, "turn_id": held_by},
                {
                    "$set": {
                        "turn_id": turn_id,
                        "created_at": now,
                        "expires_at": now + ttl_s,
                        "expires": _date(now + ttl_s),
                    }
                },
            )
            return bool(result.modified_count == 1)

        return await self._db.run(IDEMPOTENCY, op)

    async def release(self, user_id: str, key: str, turn_id: str) -> None:
        await self._db.run(
            IDEMPOTENCY,
            lambda c: c.delete_one({"userId": user_id, "key": key, "turn_id": turn_id}),
        )

    async def forget_turns(self, user_id: str, turn_ids: Sequence[str]) -> None:
        await self._db.run(
            IDEMPOTENCY,
            lambda c: c.delete_many({"userId": user_id, "turn_id": {"$in": list(turn_ids)}}),
        )


class MongoQuotaStore:
    def __init__(self, connection: MongoConnection):
        self._db = connection

    async def hit(
        self, user_id: str, window: str, *, limit: int, now: float, expires_at: float
    ) -> bool:
        # `now` is unused: the TTL index on `expires` drops expired counters.
        async def op(c: AsyncCollection) -> bool:
            # At the limit the filter matches nothing, the upsert collides with the existing
            # counter's _id, and nothing is counted.
            try:
                doc = await c.find_one_and_update(
                    {"_id": f"{window}/{user_id}", "n": {"$lt": limit}},
                    {
                        "$inc": {"n": 1},
                        "$setOnInsert": {"userId": user_id, "expires": _date(expires_at)},
                    },
                    upsert=True,
                    return_document=ReturnDocument.AFTER,
                )
            except DuplicateKeyError:
                return False
            return doc is not None and int(doc["n"]) <= limit

        return await self._db.run(QUOTAS, op)

    async def refund(self, user_id: str, window: str) -> None:
        await self._db.run(
            QUOTAS,
            lambda c: c.update_one(
                {"_id": f"{window}/{user_id}", "n": {"$gt": 0}}, {"$inc": {"n": -1}}
            ),
        )
