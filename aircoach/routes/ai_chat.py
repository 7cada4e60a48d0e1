"""The Vercel AI SDK's chat routes: `POST /api/chat` takes the body `DefaultChatTransport`
sends and answers with the UI message stream (`aircoach.routes.ui_stream`); `GET
/api/chat/{id}/stream` rejoins the conversation's running turn (`resumeStream`). The same
turn pipeline as `/api/stream_query` (auth, quotas, idempotency, storage): another encoding."""

from __future__ import annotations

import hashlib
import logging
import re
from typing import Annotated, Any, Literal

from fastapi import APIRouter, Path, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import Response
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from aircoach.bodies import MAX_JSON_ITEMS, json_body_openapi, max_body_bytes, parse_json_body
from aircoach.deps import CurrentUser, RequestLanguage, ServicesDep
from aircoach.models import (
    CLIENT_MESSAGE_ID_PATTERN,
    MAX_CLIENT_MESSAGE_ID,
    MAX_TOOL_NAME,
    MessageRequest,
)
from aircoach.routes.chat import WARNING_HEADER, ignored_warning, run_chat, turn_from_start
from aircoach.routes.responses import (
    INVALID_BODY,
    REPLAYED_HEADER,
    TOO_LARGE,
    TURN_REFUSED,
    UNAUTHORIZED,
    unavailable,
)
from aircoach.routes.ui_stream import UI_STREAM_HEADER, UI_STREAM_VERSION, ui_encoder
from aircoach.tools.registry import MAX_TOOLS
from aircoach.turn.conversations import ConversationIdText
from aircoach.turn.regenerate import Regeneration

router = APIRouter(prefix="/api", tags=["chat"])

log = logging.getLogger(__name__)

CLIENT_MESSAGE_ID = re.compile(CLIENT_MESSAGE_ID_PATTERN)
MAX_NAMED_KEYS = 10  # the unknown keys a `Warning` names
_PLAIN_KEY = re.compile(r"[A-Za-z0-9_.-]{1,40}")  # fullmatch: `$` takes a final newline
# A message without an id has no `client_message_id`: each resend runs the model again.
_NO_ID_WARNING = '299 - "the last user message has no id: a resend of it is a new turn"'
MAX_UI_MESSAGES = 1000  # a conversation's messages useChat resends with each new one
# What a chat sent whole is told once it passes a cap: only the last message is read.
_LONG_CHAT = (
    f"a chat of more than {MAX_UI_MESSAGES} messages or {MAX_JSON_ITEMS} JSON values; only "
    "the last user message is read (the server keeps the conversation): send that one alone "
    "(DefaultChatTransport's prepareSendMessagesRequest, see docs/integrating.md)"
)


class UIMessage(BaseModel):
    """A UI message as `useChat` sends it: only the last user message's text parts are read;
    any other key (metadata, tool parts, files) is ignored."""

    model_config = ConfigDict(extra="ignore")

    id: str = Field(default="", max_length=MAX_CLIENT_MESSAGE_ID)
    role: Literal["system", "user", "assistant"]
    parts: list[dict[str, Any]] = Field(default_factory=list, max_length=1000)


class UIChatRequest(BaseModel):
    """The body of `DefaultChatTransport` (`id`, `messages`, `trigger`, `messageId`) and our
    own switches, sent through the transport's `body` option. Other keys are ignored, and
    named in the response's `Warning` (a misspelt `if_bussy` did not say it was not read)."""

    model_config = ConfigDict(extra="allow")

    id: ConversationIdText = Field(description="The chat's id: its `conversation_id`.")
    messages: list[UIMessage] = Field(
        min_length=1,
        max_length=MAX_UI_MESSAGES,
        description="Only the last user message is read (the history comes from the store): "
        "a client may send that one alone.",
    )
    trigger: Literal["submit-message", "regenerate-message"] = "submit-message"
    messageId: str | None = Field(default=None, max_length=MAX_CLIENT_MESSAGE_ID)
    tools: dict[Annotated[str, Field(max_length=MAX_TOOL_NAME)], bool] | None = Field(
        default=None, max_length=MAX_TOOLS
    )
    chat_history: bool = True
    user_data: bool = True
    use_memory_retrieval: bool = True
    # `useChat`'s `stop()` only aborts the fetch, and the turn runs on (a dropped connection
    # must not lose it): the next message would find it running. The AI SDK's own backends
    # let a new message replace a running one, and `useChat` shows a refusal as raw JSON.
    if_busy: Literal["reject", "interrupt"] = Field(
        default="interrupt",
        description="While another turn of this chat runs: `interrupt` (the default here) "
        "cancels it and answers this message; `reject` answers 409 `turn_in_progress`.",
    )


async def _chat_body(request: Request) -> UIChatRequest:
    """The body; a chat sent whole past its caps is a 422 on `messages` that says to send the
    last message alone. In a valid chat body only `messages` grows, so a body of too many JSON
    values is a chat too long (the parse names no field: its check stops at the count)."""
    try:
        return await parse_json_body(request, UIChatRequest)
    except RequestValidationError as exc:
        if any(_is_long_chat(error) for error in exc.errors()):
            raise _invalid(("body", "messages"), _LONG_CHAT, "chat_too_long") from None
        raise


def _is_long_chat(error: Any) -> bool:
    loc = tuple(error.get("loc", ()))
    kind = error.get("type")
    return kind == "json_too_many_items" or (kind == "too_long" and loc == ("body", "messages"))


def _as_message(body: UIChatRequest) -> MessageRequest:
    """The turn the body asks for: the last user message's text is the query, its id the
    `client_message_id` (a resend replays; a regeneration, or an edit, is a new turn)."""
    at = next(
        (n for n in reversed(range(len(body.messages))) if body.messages[n].role == "user"), -1
    )
    if at < 0:
        raise _invalid(("body", "messages"), "no user message")
    last = body.messages[at]
    texts: list[str] = []
    for n, part in enumerate(last.parts):
        if part.get("type") != "text":
            continue
        text = part.get("text", "")
        if not isinstance(text, str):
            # `null`, `5` or `{"a": 1}` were asked as "None", "5" and "{'a': 1}"
            loc = ("body", "messages", at, "parts", n, "text")
            raise _invalid(loc, "a text part's text is a string", given=type(text).__name__)
        texts.append(text)
    query = "".join(texts)
    if not query:  # a file alone was "String should have at least 1 character" on `parts`
        raise _invalid(
            ("body", "messages", at, "parts"),
            "the last user message has no text: only its text parts are read (not files or "
            "other parts)",
        )
    key = None
    if body.trigger == "submit-message" and last.id:
        # An edit (`sendMessage({text, messageId})`) keeps the message's id: its key is the id
        # with the new text, so that it is a new question and a resend of it replays.
        key = _message_key(last.id if body.messageId is None else f"{last.id}\x1f{query}")
    fields: dict[str, Any] = {
        "query": query,
        "conversation_id": body.id,
        "stream": True,
        "chat_history": body.chat_history,
        "user_data": body.user_data,
        "use_memory_retrieval": body.use_memory_retrieval,
        "if_busy": body.if_busy,
        "client_message_id": key,
    }
    if body.tools is not None:
        fields["tools"] = body.tools
    try:
        return MessageRequest.model_validate(fields)
    except ValidationError as exc:  # the query's limits: a 422 on the message's text
        error = exc.errors()[0]
        raise _invalid(
            ("body", "messages", at, "parts"),
            f"its text: {error['msg']}",
            error["type"],
            given=f"{len(query)} characters",
        ) from None


def _regeneration(body: UIChatRequest) -> Regeneration | None:
    """What a `regenerate-message` replaces: the answer `messageId` names (the assistant
    message's id is its turn id), or the newest when it names none or the question itself
    (`regenerate({messageId})` of a user message)."""
    if body.trigger != "regenerate-message":
        return None
    question = [m for m in body.messages if m.role == "user"][-1]
    named = body.messageId if body.messageId not in (None, question.id) else None
    return Regeneration(answer_id=named)


def _message_key(message_id: str) -> str:
    """The message's id as its `client_message_id`; an id of other characters (a client's
    own ids may hold anything) by its digest, so that a resend still replays."""
    if CLIENT_MESSAGE_ID.fullmatch(message_id):
        return message_id
    return "sha256:" + hashlib.sha256(message_id.encode()).hexdigest()[:40]


def _invalid(
    loc: tuple[Any, ...], msg: str, kind: str = "value_error", *, given: str | None = None
) -> RequestValidationError:
    """A 422 naming `loc`; `given` says what was sent (a type, a length), never the text."""
    error = {"type": kind, "loc": loc, "msg": msg}
    if given is not None:
        error["input"] = given
    return RequestValidationError([error])


def _body_openapi() -> dict[str, Any]:
    """`json_body_openapi` of the body, its one nested model inline (an inline schema's
    `$defs` cannot be referred to from an OpenAPI document)."""
    extra = json_body_openapi(UIChatRequest)
    schema = extra["requestBody"]["content"]["application/json"]["schema"]
    defs = schema.pop("$defs")
    schema["properties"]["messages"]["items"] = defs["UIMessage"]
    schema.pop("additionalProperties", None)  # allowed, as by default: kept to be named
    return extra


def _unknown_keys(extra: dict[str, Any]) -> list[str]:
    """The body's keys the chat does not read, as a header may carry them: the first ten
    plain names (others counted)."""
    plain = [key for key in extra if _PLAIN_KEY.fullmatch(key)]
    shown = plain[:MAX_NAMED_KEYS]
    if len(extra) > len(shown):
        shown.append(f"{len(extra) - len(shown)} more")
    return shown


_UI_HEADERS = {UI_STREAM_HEADER: UI_STREAM_VERSION}
_HEADER_DOCS: dict[str, Any] = {
    UI_STREAM_HEADER: {
        "description": "The stream's protocol version.",
        "schema": {"type": "string", "const": UI_STREAM_VERSION},
    },
    "X-Turn-ID": {
        "description": "The turn's id (the assistant message's `id`), sent before the first "
        "chunk: `GET /api/turns/{turn_id}` fetches it once stored.",
        "schema": {"type": "string"},
    },
}
_WARNING_DOC = {
    "description": '`299 - "ignored request keys: ..."`: top-level keys of the body this '
    "route does not read (the first ten plain names), accepted and ignored; "
    f"`{_NO_ID_WARNING}`: the last user message came without an `id`, so a resend cannot be "
    "told from a new question (both, comma-separated, when both apply).",
    "schema": {"type": "string"},
}
_REPLAYED_DOC = {
    "description": "`true` when the last user message's id was sent before: the stored turn "
    "again (the model did not run), or the turn still running for it.",
    "schema": {"type": "string", "enum": ["true"]},
}
_STREAM_DOC = {
    "description": "The AI SDK UI message stream (protocol v1): `data:` lines of JSON chunks "
    "ending with `data: [DONE]`; header `x-vercel-ai-ui-message-stream: v1`.",
    "headers": _HEADER_DOCS,
    "content": {
        "text/event-stream": {
            "itemSchema": {
                "type": "object",
                "required": ["data"],
                "properties": {
                    "data": {
                        "type": "string",
                        "description": "A chunk's JSON (`start`, `text-delta`, "
                        "`tool-output-available`, `data-grounding`, `data-progress`, `error`, "
                        "`finish`, or `abort` for a turn stopped before its end...), or "
                        "`[DONE]` last.",
                    }
                },
            }
        }
    },
}


@router.post(
    "/chat",
    responses={
        200: {
            **_STREAM_DOC,
            "headers": {
                **_HEADER_DOCS,
                REPLAYED_HEADER: _REPLAYED_DOC,
                WARNING_HEADER: _WARNING_DOC,
            },
        },
        **UNAUTHORIZED,
        **TOO_LARGE,
        **INVALID_BODY,
        **TURN_REFUSED,
        **unavailable("auth_unavailable", "prompt_unavailable", "store_unavailable"),
    },
    response_class=Response,
    openapi_extra=_body_openapi(),
)
@max_body_bytes("chat_max_body_bytes", message="chat_body_too_large")
async def ai_chat(
    request: Request,
    user: CurrentUser,
    services: ServicesDep,
    language: RequestLanguage,
) -> Response:
    """Chat as the Vercel AI SDK's `useChat` (`DefaultChatTransport`) does: the chat `id` is
    the conversation, the last user message is the question (the rest of `messages` is not
    read: history comes from the store, so a client may send the last message alone; a chat
    sent whole past 1000 messages is a 422 on `messages`). `regenerate-message` replaces the
    chat's newest stored turn when it answers the same question (it leaves the history and
    the model's context); otherwise it is a new turn."""
    chat = await _chat_body(request)
    body = _as_message(chat)
    headers = _UI_HEADERS
    warnings = []
    if chat.model_extra:
        unknown = _unknown_keys(chat.model_extra)
        log.info("chat body keys ignored: %s", ", ".join(unknown))
        warnings.append(ignored_warning(unknown))
    if chat.trigger == "submit-message" and body.client_message_id is None:
        warnings.append(_NO_ID_WARNING)
    if warnings:
        headers = {**_UI_HEADERS, WARNING_HEADER: ", ".join(warnings)}
    return await run_chat(
        services,
        user,
        body,
        language,
        body.client_message_id,
        encoder_for=ui_encoder,
        headers=headers,
        regeneration=_regeneration(chat),
    )


@router.get(
    "/chat/{chat_id}/stream",
    responses={
        200: _STREAM_DOC,
        204: {"description": "Nothing runs in this chat."},
        **UNAUTHORIZED,
        **unavailable("auth_unavailable", "store_unavailable"),
    },
    response_class=Response,
)
async def resume_chat(
    chat_id: Annotated[ConversationIdText, Path()],
    user: CurrentUser,
    services: ServicesDep,
    language: RequestLanguage,
) -> Response:
    """The AI SDK's `resumeStream`: the running turn of the caller's chat `chat_id`, from its
    first event, followed live to its end (from any instance); 204 when nothing runs."""
    from aircoach.routes.sse import event_stream
    from aircoach.turn.conversations import conversation_thread

    thread = conversation_thread(user.sub, chat_id)
    held = await services.turn_log.holder(user.sub, thread, now=services.clock())
    if held is None:
        return Response(status_code=204)
    following = await turn_from_start(services, user.sub, held.turn_id, language)
    if following is None:
        return Response(status_code=204)
    return event_stream(
        following,
        headers={**_UI_HEADERS, "X-Turn-ID": held.turn_id},
        encoder=ui_encoder(held.turn_id),
    )
