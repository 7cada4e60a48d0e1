"""The records of a student's long-term memory and the store they live in (adapters:
`aircoach.store.sqlite_memory`, `aircoach.store.mongo_memory`). Implementations raise
`StoreUnavailable` when their backend fails and return JSON-safe values only."""

from __future__ import annotations

import os
import time
from collections.abc import Sequence
from typing import Literal, Protocol

from pydantic import BaseModel, Field

from aircoach.response_model import ResponseModel

ItemKind = Literal["goal", "exam", "difficulty", "topic"]
# One fact of these kinds is kept per user: a new goal or exam date replaces the old one.
SINGLE_KINDS: frozenset[str] = frozenset({"goal", "exam"})
DEFAULT_CONVERSATION = "default"
MAX_ITEM_CHARS = 200


class NewItem(BaseModel):
    """An item read from a turn, before the store gives it an id."""

    kind: ItemKind
    text: str = Field(max_length=MAX_ITEM_CHARS)
    conversation_id: str = DEFAULT_CONVERSATION
    turn_id: str = Field(description="The turn the item was read from.")
    created_at: str = Field(description="ISO 8601, UTC.")


class MemoryItem(NewItem, ResponseModel):
    """One thing the coach remembers of the student (`GET /api/memory`)."""

    id: str


class MemoryStore(Protocol):
    async def add(self, user_id: str, items: Sequence[NewItem], *, keep: int) -> None:
        """Keep `items` for the user, the first as the newest (a turn's items are listed in
        their order). An item with the text of one already kept replaces it,
        a `goal` or `exam` replaces the user's earlier one of its kind, and only the newest
        `keep` items of the user remain."""
        ...

    async def items(self, user_id: str, *, limit: int) -> list[MemoryItem]:
        """The user's items, newest first."""
        ...

    async def delete(self, user_id: str, item_id: str) -> bool:
        """Remove one of the user's items; False when the user has no such item."""
        ...

    async def clear(self, user_id: str) -> int:
        """Remove all the user's items; how many there were."""
        ...

    async def forget_conversation(self, user_id: str, conversation_id: str) -> int:
        """Remove the user's items that came from one conversation; how many there were."""
        ...


def new_item_id() -> str:
    """Time-ordered and unique across instances: the newest item has the greatest id. 28 hex
    digits: a 24-digit one would look like an ObjectId to some MongoDB-compatible servers."""
    return f"{time.time_ns():x}{os.urandom(6).hex()}"
