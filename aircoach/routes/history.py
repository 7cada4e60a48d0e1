"""GET /api/history: the caller's stored turns."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query

from aircoach.deps import ChatStoreDep, CurrentUser, ServicesDep
from aircoach.models import HistoryPage, HistoryTurn
from aircoach.routes.responses import UNAUTHORIZED, unavailable

router = APIRouter(prefix="/api", tags=["meta"])


@router.get(
    "/history", responses={**UNAUTHORIZED, **unavailable("auth_unavailable", "store_unavailable")}
)
async def history(
    user: CurrentUser,
    chats: ChatStoreDep,
    services: ServicesDep,
    limit: Annotated[int, Query(ge=1, le=100)] = 20,
    before: Annotated[
        str | None, Query(max_length=64, description="`next_before` of the previous page")
    ] = None,
) -> HistoryPage:
    """The caller's stored turns, newest first, with every tool call's client data (what the
    model alone was given, such as a quiz question's key, is never returned)."""
    # Turns the store refused earlier belong in this page once it takes writes again.
    await services.dead_letters.replay(chats)
    turns = await chats.history(user.sub, limit=limit, before=before)
    next_before = turns[-1].timestamp if len(turns) == limit else None
    return HistoryPage(turns=[HistoryTurn.of(t) for t in turns], next_before=next_before)
