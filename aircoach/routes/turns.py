"""GET /api/turns/{turn_id}: one of the caller's stored turns, for a client that lost the
stream it started (the id came in the `X-Turn-ID` header)."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Path

from aircoach.deps import ChatStoreDep, CurrentUser, ServicesDep
from aircoach.errors import NotFound
from aircoach.models import ErrorBody, HistoryTurn
from aircoach.routes.responses import UNAUTHORIZED, unavailable

router = APIRouter(prefix="/api", tags=["meta"])

TurnId = Annotated[
    str, Path(min_length=1, max_length=64, pattern=r"^[A-Za-z0-9_-]+$", description="Turn id")
]


@router.get(
    "/turns/{turn_id}",
    responses={
        **UNAUTHORIZED,
        404: {"model": ErrorBody, "description": "No turn of the caller's has this id."},
        **unavailable("auth_unavailable", "store_unavailable"),
    },
)
async def get_turn(
    turn_id: TurnId, user: CurrentUser, chats: ChatStoreDep, services: ServicesDep
) -> HistoryTurn:
    """One of the caller's turns, client data only (as in `/api/history`); 404 `not_found`
    for an unknown id or someone else's turn. A turn still being answered is not stored yet:
    404 until its stream ends."""
    # A turn the store refused earlier belongs here once it takes writes again.
    await services.dead_letters.replay(chats)
    turn = await chats.get_turn(user.sub, turn_id)
    if turn is None:
        raise NotFound("turn_not_found", turn_id=turn_id)
    return HistoryTurn.of(turn)
