"""GET /api/history: the caller's stored turns."""

from __future__ import annotations

import base64
import binascii
import re
from datetime import UTC, datetime
from typing import Annotated

from fastapi import APIRouter, Query
from fastapi.exceptions import RequestValidationError

from aircoach.deps import ChatStoreDep, CurrentUser, ServicesDep
from aircoach.models import HistoryPage, HistoryTurn
from aircoach.routes.responses import INVALID_QUERY, UNAUTHORIZED, unavailable
from aircoach.turn.conversations import (
    CONVERSATION_ID_PATTERN,
    MAX_CONVERSATION_ID,
    RESERVED_CONVERSATION_ID,
)
from aircoach.turn.ports import ConversationScope

router = APIRouter(prefix="/api", tags=["meta"])

# The cursor is the base64url (unpadded) of the last turn id, so it survives any client's URL
# handling. Any well-formed one is accepted: it only bounds the ids of the page.
CURSOR_PATTERN = r"^(?:[A-Za-z0-9_-]{4})*(?:[A-Za-z0-9_-]{2,3})?$"
_CURSOR = re.compile(CURSOR_PATTERN)
MAX_CURSOR = 88  # base64 of 64 bytes


# The `cursor` query parameter of a page that `encode_cursor` ends (history, conversations).
TurnCursor = Annotated[
    str | None,
    Query(
        min_length=2,
        max_length=MAX_CURSOR,
        pattern=CURSOR_PATTERN,
        description="`next_cursor` of the previous page",
    ),
]


def encode_cursor(turn_id: str) -> str:
    """The opaque `next_cursor` after the turn `turn_id`."""
    return base64.urlsafe_b64encode(turn_id.encode()).decode().rstrip("=")


def decode_cursor(cursor: str) -> str:
    """The turn id of a cursor that `encode_cursor` made; a 422 for a malformed one."""
    if not cursor or not _CURSOR.fullmatch(cursor):
        raise _invalid("cursor", cursor, "not a cursor from `next_cursor`")
    try:
        raw = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4))
    except (binascii.Error, ValueError):
        raise _invalid("cursor", cursor, "not a cursor from `next_cursor`") from None
    return raw.decode("latin-1")  # a turn id is ASCII; any other bytes still order


def parse_before(before: str) -> str:
    """The `before` query parameter (a `next_before`) as stored timestamps are written (UTC,
    ISO 8601), so that they compare as text; a 422 for what is no timestamp."""
    # An unencoded `+00:00` arrives as ` 00:00`: restore it rather than return a wrong page.
    try:
        moment = datetime.fromisoformat(before.strip().replace(" ", "+"))
    except ValueError:
        raise _invalid("before", before, "not an ISO 8601 timestamp from `next_before`") from None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    try:
        return moment.astimezone(UTC).isoformat()  # the format turns are stored in
    except OverflowError:  # "0001-01-01T00:00:00+01:00": before year 1 in UTC (it was a 500)
        raise _invalid("before", before, "outside the years 1-9999 in UTC") from None


def _scope(conversation_id: str | None) -> str | ConversationScope:
    if conversation_id is None:
        return ConversationScope.EVERY
    if conversation_id == RESERVED_CONVERSATION_ID:
        return ConversationScope.DEFAULT
    return conversation_id


def _invalid(name: str, value: str, message: str) -> RequestValidationError:
    return RequestValidationError(
        [{"type": "value_error", "loc": ("query", name), "msg": message, "input": value[:64]}]
    )


@router.get(
    "/history",
    responses={
        **UNAUTHORIZED,
        **INVALID_QUERY,
        **unavailable("auth_unavailable", "store_unavailable"),
    },
)
async def history(
    user: CurrentUser,
    chats: ChatStoreDep,
    services: ServicesDep,
    limit: Annotated[int, Query(ge=1, le=100)] = 20,
    cursor: TurnCursor = None,
    before: Annotated[
        str | None,
        Query(
            max_length=64,
            deprecated=True,
            json_schema_extra={"format": "date-time"},
            description="`next_before` of the previous page (deprecated: use `cursor`)",
        ),
    ] = None,
    # Not `ConversationIdText`: on this read the reserved id names the default conversation.
    conversation_id: Annotated[
        str | None,
        Query(
            min_length=1,
            max_length=MAX_CONVERSATION_ID,
            pattern=CONVERSATION_ID_PATTERN,
            description=(
                f"Only this conversation's turns; `{RESERVED_CONVERSATION_ID}`: only the "
                "default conversation's (the turns sent without `conversation_id`); "
                "absent: every conversation's."
            ),
        ),
    ] = None,
) -> HistoryPage:
    """The caller's stored turns, newest first, with every tool call's client data (what the
    model alone was given, such as a quiz question's key, is never returned). Pass the page's
    `next_cursor` as `cursor` for the next (older) page; `conversation_id` pages one
    conversation, `default` the default one."""
    before_turn = decode_cursor(cursor) if cursor is not None else None
    since = parse_before(before) if before is not None else None
    # Turns the store refused earlier belong in this page once it takes writes again.
    await services.dead_letters.replay(chats)
    # One more than the page tells whether an older page follows: a last page that is just
    # full has no cursor (a client would ask for an empty page).
    found = await chats.history(
        user.sub,
        limit=limit + 1,
        before=since,
        before_turn=before_turn,
        conversation=_scope(conversation_id),
    )
    turns, more = found[:limit], len(found) > limit
    return HistoryPage(
        turns=[HistoryTurn.of(t) for t in turns],
        next_cursor=encode_cursor(turns[-1].turn_id) if more else None,
        next_before=turns[-1].timestamp if more else None,
    )
