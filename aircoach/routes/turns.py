"""A turn by its id (it came in the `X-Turn-ID` header): `GET /api/turns/{turn_id}` the stored
turn; `GET /api/turns/{turn_id}/events` its events after `Last-Event-ID`, followed live while
it runs on any instance; `POST /api/turns/{turn_id}/cancel` stops it from any instance."""

from __future__ import annotations

import time
from typing import Annotated, Any

from fastapi import APIRouter, Header, Path, Query
from fastapi.responses import Response

from aircoach.deps import ChatStoreDep, CurrentUser, RequestLanguage, ServicesDep
from aircoach.errors import NotFound, TurnFinished
from aircoach.models import ErrorBody, HistoryTurn
from aircoach.response_model import ResponseModel
from aircoach.routes.responses import UNAUTHORIZED, unavailable
from aircoach.routes.sse import sse_item_schema

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
    404 until its stream ends. One the store refused (its stream ended after
    `persist_failed`) is read from the dead-letter spool until it reaches the store."""
    # A turn the store refused earlier belongs here once it takes writes again.
    await services.dead_letters.replay(chats)
    turn = await chats.get_turn(user.sub, turn_id)
    if turn is None:
        # The store may still refuse writes, or another instance spooled it and no replay
        # is due here yet: it has ended all the same.
        turn = await services.dead_letters.find(user.sub, turn_id)
    if turn is None:
        raise NotFound("turn_not_found", turn_id=turn_id)
    return HistoryTurn.of(turn)


_NOT_FOUND: dict[int | str, dict[str, Any]] = {
    404: {"model": ErrorBody, "description": "No turn of the caller's has this id."}
}
LastEventId = Annotated[
    int,
    Header(
        alias="Last-Event-ID",
        ge=0,
        le=1_000_000,
        description="The `id` of the last event the client read: the stream goes on after it.",
    ),
]


@router.get(
    "/turns/{turn_id}/events",
    response_class=Response,
    responses={
        200: {
            "description": "SSE: the turn's events after `Last-Event-ID` (or from the "
            "start), followed live while the turn runs, to its `done`. The same events, with "
            "the same ids, as the stream that started it.",
            "content": {"text/event-stream": {"itemSchema": sse_item_schema()}},
        },
        **UNAUTHORIZED,
        **_NOT_FOUND,
        **unavailable("auth_unavailable", "store_unavailable"),
    },
)
async def turn_events_stream(
    turn_id: TurnId,
    user: CurrentUser,
    services: ServicesDep,
    language: RequestLanguage,
    last_event_id: LastEventId = 0,
    query_last_id: Annotated[
        int,
        Query(
            alias="last_event_id",
            ge=0,
            le=1_000_000,
            description="`Last-Event-ID` for clients that cannot set headers.",
        ),
    ] = 0,
) -> Response:
    """Rejoin a turn after a dropped connection, from any instance: the events after the one
    named, then the rest as the turn writes them, ending with `done`. A finished turn replays
    the same way. 404 for an unknown id or someone else's turn."""
    from aircoach.routes.sse import event_stream
    from aircoach.turn.rejoin import turn_events

    after = last_event_id or query_last_id  # 0: from the start
    events = await turn_events(
        services.turn_log,
        services.chats,
        user.sub,
        turn_id,
        after=after,
        language=language,
        give_up_s=services.settings.turn_timeout_s,
        caveats=services.settings.grounding_caveat,
        running=services.running_turns,
    )
    if events is None:
        raise NotFound("turn_not_found", turn_id=turn_id)
    return event_stream(events)


class Cancelling(ResponseModel):
    turn_id: str
    status: str = "cancelling"


@router.post(
    "/turns/{turn_id}/cancel",
    status_code=202,
    responses={
        **UNAUTHORIZED,
        **_NOT_FOUND,
        409: {"model": ErrorBody, "description": "`turn_finished`: the turn has ended."},
        **unavailable("auth_unavailable", "store_unavailable"),
    },
)
async def cancel_turn(turn_id: TurnId, user: CurrentUser, services: ServicesDep) -> Cancelling:
    """Stop a running turn, from any instance, within about a second (at once on its own
    instance). It is stored
    `interrupted` with what it had produced; its stream, and anyone following it, ends with
    `done` whose `status` is `cancelled`. 409 `turn_finished` for a turn that has ended; 404
    for an unknown id or someone else's turn."""
    if await services.turn_log.request_cancel(user.sub, turn_id, now=time.time()):
        services.running_turns.stop(turn_id)  # at once, if it runs on this instance
        return Cancelling(turn_id=turn_id)
    logged = await services.turn_log.read(user.sub, turn_id, after=0, limit=1)
    if logged or await services.chats.get_turn(user.sub, turn_id) is not None:
        raise TurnFinished(turn_id=turn_id)
    raise NotFound("turn_not_found", turn_id=turn_id)
