"""A user's conversations: `GET /api/conversations` lists them, `DELETE
/api/conversations/{conversation_id}` removes one (see `aircoach.turn.conversations`)."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Path, Query
from fastapi.responses import Response
from pydantic import Field

from aircoach.deps import ChatStoreDep, CurrentUser, ServicesDep
from aircoach.errors import NotFound
from aircoach.models import ErrorBody, TurnInProgressBody
from aircoach.response_model import ResponseModel
from aircoach.routes.history import TurnCursor, decode_cursor, encode_cursor
from aircoach.routes.responses import INVALID_QUERY, UNAUTHORIZED, unavailable
from aircoach.turn.conversations import ConversationIdText, listed_conversations
from aircoach.turn.records import ConversationSummary

router = APIRouter(prefix="/api", tags=["conversations"])

ConversationId = Annotated[
    ConversationIdText,
    Path(
        description="The client's conversation id (`conversation_id` of the chat request).",
    ),
]


class ConversationList(ResponseModel):
    conversations: list[ConversationSummary]
    next_cursor: str | None = Field(
        default=None,
        description="Opaque and URL-safe: pass as `cursor` to get the next page (the less "
        "recently active conversations); null on the last page.",
    )


@router.get(
    "/conversations",
    responses={
        **UNAUTHORIZED,
        **INVALID_QUERY,
        **unavailable("auth_unavailable", "store_unavailable"),
    },
)
async def list_conversations(
    user: CurrentUser,
    chats: ChatStoreDep,
    services: ServicesDep,
    limit: Annotated[int, Query(ge=1, le=100)] = 50,
    cursor: TurnCursor = None,
) -> ConversationList:
    """The caller's conversations (those started with a `conversation_id`), the most recently
    active first (by their newest turn), with their first question and last activity; pass
    `next_cursor` as `cursor` for the next page. The default conversation (requests without
    `conversation_id`) is not listed: `GET /api/history` has its turns. Neither is a
    conversation stored as `default` (named so before that id was reserved): its turns are
    the default conversation's."""
    before_turn = decode_cursor(cursor) if cursor is not None else None
    await services.dead_letters.replay(chats)
    listed, more = await listed_conversations(chats, user.sub, limit=limit, before_turn=before_turn)
    return ConversationList(
        conversations=listed,
        next_cursor=encode_cursor(listed[-1].last_turn_id) if more else None,
    )


@router.delete(
    "/conversations/{conversation_id}",
    status_code=204,
    response_class=Response,
    responses={
        **UNAUTHORIZED,
        404: {
            "model": ErrorBody,
            "description": "The caller has no such conversation: neither the store nor the "
            "dead-letter spool holds a turn of it.",
        },
        409: {
            "model": TurnInProgressBody,
            "description": "`turn_in_progress`: the conversation's running turn (`turn_id`) "
            "was asked to stop but still ran 10 s later; nothing was removed. Retry after "
            "`Retry-After` seconds.",
        },
        **unavailable("auth_unavailable", "store_unavailable"),
    },
)
async def delete_conversation(
    conversation_id: ConversationId, user: CurrentUser, services: ServicesDep
) -> Response:
    """Delete one of the caller's conversations: its running turn is cancelled first and the
    delete waits until it has stopped and stored what it had; then its turns, their event
    log and idempotency records, its quiz state (held in its turns) and the memory derived
    from it are removed, from the store and from this instance's memory (the other instances
    rebuild theirs from the store on its next turn). Turns the store refused, waiting in the
    dead-letter spool, leave the spool with the conversation (other conversations' wait
    there): a conversation held only there is deleted too. 404 when neither the store nor
    the spool holds a turn of it; 409 (nothing removed) when the running turn has not stopped
    within 10 s; 503 when the spool, which may hold the conversation's turns, cannot be read
    (nothing removed) or fails to remove one of them (those removed before stay removed):
    retry, a retry finishes the delete."""
    if not await services.conversation_eraser.erase(user.sub, conversation_id):
        raise NotFound("conversation_not_found", conversation_id=conversation_id)
    return Response(status_code=204)
