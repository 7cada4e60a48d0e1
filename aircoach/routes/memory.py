"""GET /api/memory, DELETE /api/memory/{id}, DELETE /api/memory: what the coach remembers of
the caller, readable and erasable by its owner only."""

from __future__ import annotations

import logging
from typing import Annotated

from fastapi import APIRouter, Path
from pydantic import Field

from aircoach.deps import CurrentUser, ServicesDep
from aircoach.errors import NotFound
from aircoach.memory.ports import MemoryItem
from aircoach.memory.service import UserMemory
from aircoach.models import ErrorBody
from aircoach.response_model import ResponseModel
from aircoach.routes.responses import UNAUTHORIZED, Responses, unavailable

log = logging.getLogger(__name__)

router = APIRouter(prefix="/api", tags=["memory"])

_UNAVAILABLE = unavailable("auth_unavailable", "store_unavailable")
_NOT_FOUND: Responses = {
    404: {"model": ErrorBody, "description": "The caller has no item with this id (`not_found`)."}
}
MAX_ITEM_ID = 64


class MemoryList(ResponseModel):
    """The caller's items, newest first."""

    items: list[MemoryItem]


class MemoryDeleted(ResponseModel):
    deleted: int = Field(description="How many items were removed.")


def _memory(services: ServicesDep) -> UserMemory:
    memory = services.user_memory
    if memory is None:
        raise NotFound("not_found")
    return memory


@router.get("/memory", responses={**UNAUTHORIZED, **_UNAVAILABLE})
async def list_memory(user: CurrentUser, services: ServicesDep) -> MemoryList:
    """What the coach remembers of the caller beyond the conversation's history: what they
    said about themselves (`goal`, `exam`, `difficulty`) and the topics they asked about
    (`topic`), newest first (at most `MEMORY_MAX_ITEMS`)."""
    return MemoryList(items=await _memory(services).items(user.sub))


@router.delete("/memory/{item_id}", responses={**UNAUTHORIZED, **_NOT_FOUND, **_UNAVAILABLE})
async def delete_memory_item(
    user: CurrentUser,
    services: ServicesDep,
    item_id: Annotated[str, Path(min_length=1, max_length=MAX_ITEM_ID)],
) -> MemoryDeleted:
    """Remove one of the caller's items; 404 `not_found` for an unknown id or someone
    else's item."""
    if not await _memory(services).store.delete(user.sub, item_id):
        raise NotFound("not_found")
    return MemoryDeleted(deleted=1)


@router.delete("/memory", responses={**UNAUTHORIZED, **_UNAVAILABLE})
async def clear_memory(user: CurrentUser, services: ServicesDep) -> MemoryDeleted:
    """Remove everything the coach remembers of the caller (as "dimentica quello che ti ho
    detto" in the chat does)."""
    removed = await _memory(services).store.clear(user.sub)
    log.info("memory of %r cleared: %d items", user.sub, removed)
    return MemoryDeleted(deleted=removed)
