"""MongoDB turn log and running-turn claims (see `aircoach.turn.log`): events keyed by turn
and number (a batch written twice is kept once), a unique (user, thread) index that lets one
turn hold a thread, and TTL indexes that drop what expired."""

from __future__ import annotations

import json
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any

from pymongo import ASCENDING
from pymongo.asynchronous.collection import AsyncCollection
from pymongo.errors import BulkWriteError, DuplicateKeyError

from aircoach.store.mongo import MongoConnection
from aircoach.turn.log import LoggedEvent, RunningTurn

EVENTS = "turn_events"
RUNNING = "running_turns"
CANCELS = "turn_cancels"
_DUPLICATE_KEY = 11000


async def create_turn_log_indexes(db: Any) -> None:
    """Idempotent; run once per connection on first use."""
    events = db[EVENTS]
    await events.create_index([("turn_id", ASCENDING), ("seq", ASCENDING)], name="turn_seq")
    await events.create_index("expires", expireAfterSeconds=0, name="expires")
    running = db[RUNNING]
    await running.create_index(
        [("userId", ASCENDING), ("thread", ASCENDING)], unique=True, name="user_thread"
    )
    await running.create_index("turn_id", name="turn_id")
    await running.create_index("expires", expireAfterSeconds=0, name="expires")
    await db[CANCELS].create_index("expires", expireAfterSeconds=0, name="expires")


def _date(seconds: float) -> datetime:
    return datetime.fromtimestamp(seconds, UTC)


def _claim_of(doc: dict[str, Any], cancelled: bool) -> RunningTurn:
    return RunningTurn(str(doc["turn_id"]), str(doc["thread"]), float(doc["expires_at"]), cancelled)


class MongoTurnLog:
    def __init__(self, connection: MongoConnection):
        self._db = connection

    async def append(
        self, user_id: str, turn_id: str, events: Sequence[LoggedEvent], *, expires_at: float
    ) -> None:
        # The event's JSON as text: tool data may hold keys MongoDB refuses (`$x`, `a.b`).
        docs = [
            {
                "_id": f"{turn_id}:{e.seq}",
                "turn_id": turn_id,
                "seq": e.seq,
                "userId": user_id,
                "type": e.type,
                "data": e.text,
                "expires": _date(expires_at),
            }
            for e in events
        ]

        async def op(c: AsyncCollection) -> None:
            try:
                await c.insert_many(docs, ordered=False)
            except BulkWriteError as exc:
                errors = exc.details.get("writeErrors", [])
                if any(error.get("code") != _DUPLICATE_KEY for error in errors):
                    raise

        if docs:
            await self._db.run(EVENTS, op)

    async def finish(
        self, user_id: str, turn_id: str, events: Sequence[LoggedEvent], *, expires_at: float
    ) -> None:
        # Two collections, two writes (no transaction outside a replica set): the events
        # first, so that no other request can start on the thread before `done` is logged.
        await self.append(user_id, turn_id, events, expires_at=expires_at)
        await self._db.run(RUNNING, lambda c: c.delete_one({"userId": user_id, "turn_id": turn_id}))

    async def read(
        self, user_id: str, turn_id: str, *, after: int = 0, limit: int = 500
    ) -> list[LoggedEvent]:
        async def op(c: AsyncCollection) -> list[LoggedEvent]:
            cursor = (
                c.find({"turn_id": turn_id, "seq": {"$gt": after}, "userId": user_id})
                .sort("seq", ASCENDING)
                .limit(limit)
            )
            return [LoggedEvent(int(d["seq"]), json.loads(d["data"])) async for d in cursor]

        return await self._db.run(EVENTS, op)

    async def claim(
        self, user_id: str, thread: str, turn_id: str, *, now: float, expires_at: float
    ) -> RunningTurn | None:
        doc = {
            "userId": user_id,
            "thread": thread,
            "turn_id": turn_id,
            "expires_at": expires_at,
            "expires": _date(expires_at),
        }

        async def op(c: AsyncCollection) -> RunningTurn | None:
            try:
                await c.insert_one(dict(doc))
                return None
            except DuplicateKeyError:
                pass
            held = await c.find_one({"userId": user_id, "thread": thread})
            if held is None:  # expired and dropped meanwhile
                return await op(c)
            if held["expires_at"] <= now:
                replaced = await c.update_one(
                    {"userId": user_id, "thread": thread, "turn_id": held["turn_id"]},
                    {
                        "$set": {
                            "turn_id": turn_id,
                            "expires_at": expires_at,
                            "expires": doc["expires"],
                        }
                    },
                )
                if replaced.modified_count == 1:
                    return None
                held = await c.find_one({"userId": user_id, "thread": thread}) or held
            return _claim_of(held, await self.cancel_requested(str(held["turn_id"])))

        return await self._db.run(RUNNING, op)

    async def take_over(
        self,
        user_id: str,
        thread: str,
        *,
        held_by: str,
        turn_id: str,
        now: float,
        expires_at: float,
    ) -> bool:
        async def op(c: AsyncCollection) -> bool:
            moved = await c.update_one(
                {"userId": user_id, "thread": thread, "turn_id": held_by},
                {
                    "$set": {
                        "turn_id": turn_id,
                        "expires_at": expires_at,
                        "expires": _date(expires_at),
                    }
                },
            )
            return bool(moved.modified_count == 1)

        if not await self._db.run(RUNNING, op):
            return False
        await self._ask_to_stop(held_by, expires_at)
        return True

    async def release(self, user_id: str, thread: str, turn_id: str) -> None:
        await self._db.run(
            RUNNING,
            lambda c: c.delete_one({"userId": user_id, "thread": thread, "turn_id": turn_id}),
        )

    async def renew(self, user_id: str, turn_id: str, *, expires_at: float) -> None:
        await self._db.run(
            RUNNING,
            lambda c: c.update_one(
                {"userId": user_id, "turn_id": turn_id},
                {"$set": {"expires_at": expires_at, "expires": _date(expires_at)}},
            ),
        )

    async def running(self, user_id: str, turn_id: str, *, now: float) -> RunningTurn | None:
        held = await self._db.run(
            RUNNING,
            lambda c: c.find_one(
                {"turn_id": turn_id, "userId": user_id, "expires_at": {"$gt": now}}
            ),
        )
        if held is None:
            return None
        return _claim_of(held, await self.cancel_requested(turn_id))

    async def request_cancel(self, user_id: str, turn_id: str, *, now: float) -> bool:
        held = await self.running(user_id, turn_id, now=now)
        if held is None:
            return False
        await self._ask_to_stop(turn_id, held.expires_at)
        return True

    async def holder(self, user_id: str, thread: str, *, now: float) -> RunningTurn | None:
        held = await self._db.run(
            RUNNING,
            lambda c: c.find_one({"userId": user_id, "thread": thread, "expires_at": {"$gt": now}}),
        )
        if held is None:
            return None
        return _claim_of(held, await self.cancel_requested(str(held["turn_id"])))

    async def forget(self, user_id: str, turn_ids: Sequence[str]) -> None:
        await self._db.run(
            EVENTS,
            lambda c: c.delete_many({"userId": user_id, "turn_id": {"$in": list(turn_ids)}}),
        )

    async def cancel_requested(self, turn_id: str) -> bool:
        found = await self._db.run(CANCELS, lambda c: c.find_one({"_id": turn_id}))
        return found is not None

    async def _ask_to_stop(self, turn_id: str, expires_at: float) -> None:
        await self._db.run(
            CANCELS,
            lambda c: c.update_one(
                {"_id": turn_id}, {"$set": {"expires": _date(expires_at)}}, upsert=True
            ),
        )
