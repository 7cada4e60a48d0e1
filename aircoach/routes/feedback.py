"""Feedback on answers: a student marks one of their answers `errata` or `utile`, and a docs
editor lists them (`GET /api/feedback`) to fix the docs."""

from __future__ import annotations

import logging
from datetime import UTC, datetime
from typing import Annotated

from fastapi import APIRouter, Path, Query, Request

from aircoach import telemetry
from aircoach.bodies import json_body_openapi, parse_json_body
from aircoach.deps import ChatStoreDep, CurrentUser, ServicesDep
from aircoach.errors import ForbiddenError, NotFound
from aircoach.grounding.feedback import (
    Feedback,
    FeedbackItem,
    FeedbackPage,
    FeedbackReceipt,
    FeedbackRequest,
    Voto,
)
from aircoach.models import ErrorBody
from aircoach.routes.history import parse_before
from aircoach.routes.responses import (
    INVALID_BODY,
    INVALID_QUERY,
    TOO_LARGE,
    UNAUTHORIZED,
    Responses,
    unavailable,
)

log = logging.getLogger(__name__)
router = APIRouter(prefix="/api", tags=["feedback"])

_NOT_FOUND: Responses = {
    404: {"model": ErrorBody, "description": "The caller has no turn with this id (`not_found`)."}
}
_FORBIDDEN: Responses = {
    403: {"model": ErrorBody, "description": "The token lacks `ADMIN_PERMISSION` (`forbidden`)."}
}
_UNAVAILABLE = unavailable("auth_unavailable", "store_unavailable")


@router.post(
    "/turns/{turn_id}/feedback",
    openapi_extra=json_body_openapi(FeedbackRequest),
    responses={**UNAUTHORIZED, **_NOT_FOUND, **TOO_LARGE, **INVALID_BODY, **_UNAVAILABLE},
)
async def give_feedback(
    request: Request,
    user: CurrentUser,
    chats: ChatStoreDep,
    services: ServicesDep,
    turn_id: Annotated[str, Path(min_length=1, max_length=64)],
) -> FeedbackReceipt:
    """Mark one of the caller's answers `errata` (wrong) or `utile` (helpful), with an
    optional comment. One feedback per turn: a second call replaces the first. The body is
    read after the token is verified, within `MAX_BODY_BYTES` (a valid one, even a comment
    of 1,000 characters written as JSON escapes, fits). A turn the store refused, waiting in
    the dead-letter spool, is moved into the store first (503 while the store refuses it)."""
    body = await parse_json_body(request, FeedbackRequest)
    feedback = Feedback(**body.model_dump(), at=datetime.now(UTC).isoformat())
    if not await chats.set_feedback(user.sub, turn_id, feedback):
        if await services.dead_letters.find(user.sub, turn_id) is None:
            raise NotFound("turn_not_found", turn_id=turn_id)
        # Its client was answered; the feedback needs it stored (StoreUnavailable: retry).
        await services.dead_letters.drain(chats)
        if not await chats.set_feedback(user.sub, turn_id, feedback):
            raise NotFound("turn_not_found", turn_id=turn_id)
    log.info("feedback turn_id=%s user=%r voto=%s", turn_id, user.sub, feedback.voto)
    telemetry.observe("feedback", {"vote": feedback.voto})
    return FeedbackReceipt(turn_id=turn_id, feedback=feedback)


@router.get("/feedback", responses={**UNAUTHORIZED, **_FORBIDDEN, **INVALID_QUERY, **_UNAVAILABLE})
async def list_feedback(
    user: CurrentUser,
    chats: ChatStoreDep,
    services: ServicesDep,
    voto: Voto | None = None,
    limit: Annotated[int, Query(ge=1, le=100)] = 20,
    before: Annotated[
        str | None,
        Query(
            max_length=64,
            json_schema_extra={"format": "date-time"},
            description="`next_before` of the previous page (an ISO 8601 timestamp)",
        ),
    ] = None,
) -> FeedbackPage:
    """Every student's feedback, newest first (`voto=errata`: the wrong answers only), with
    the turn's question, answer, citation check and prompt version. Needs `ADMIN_PERMISSION`."""
    permission = services.settings.admin_permission
    if permission not in user.permissions:
        raise ForbiddenError("permission_needed", permission=permission)
    since = parse_before(before) if before is not None else None
    # One more than the page tells whether another follows (none after a just-full last one).
    found = await chats.feedback(voto=voto, limit=limit + 1, before=since)
    turns = found[:limit]
    items = [
        FeedbackItem(
            turn_id=t.turn_id,
            userId=t.userId,
            voto=t.feedback.voto,
            commento=t.feedback.commento,
            at=t.feedback.at,
            question=t.human,
            answer=t.system,
            grounding=t.grounding,
            prompt_version=t.prompt_version,
            model=t.model,
        )
        for t in turns
        if t.feedback is not None
    ]
    next_before = items[-1].at if len(found) > limit and items else None
    return FeedbackPage(items=items, next_before=next_before)
