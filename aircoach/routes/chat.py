"""POST /api/stream_query: one chat turn, streamed as SSE or answered as JSON."""

from __future__ import annotations

import dataclasses
import logging
import re
from collections.abc import AsyncIterator, Callable
from functools import partial
from typing import TYPE_CHECKING, Any

import anyio
from fastapi import APIRouter, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import Response

from aircoach.bodies import json_body_openapi
from aircoach.deps import ChatMessage, CurrentUser, RequestLanguage, ServicesDep
from aircoach.grounding.models import ResponseGrounding
from aircoach.logs import current_request_id, current_stages
from aircoach.models import (
    CLIENT_MESSAGE_ID_PATTERN,
    MAX_CLIENT_MESSAGE_ID,
    MessageRequest,
    MessageResponse,
)
from aircoach.routes.responses import (
    IDEMPOTENCY_HEADER,
    INVALID_BODY,
    REPLAYED_HEADER,
    TOO_LARGE,
    TURN_REFUSED,
    UNAUTHORIZED,
    unavailable,
)
from aircoach.routes.sse import sse_item_schema
from aircoach.startup import first_import
from aircoach.turn.answer import FALLBACK_ANSWER, json_answer
from aircoach.turn.log import LoggedEvent, listed
from aircoach.turn.records import ToolRecord

if TYPE_CHECKING:
    from aircoach.auth.tokens import Principal
    from aircoach.messages import Language
    from aircoach.routes.sse import Encoder
    from aircoach.services import Services
    from aircoach.tools.registry import ToolRegistry
    from aircoach.turn.regenerate import Regeneration

router = APIRouter(prefix="/api", tags=["chat"])
log = logging.getLogger(__name__)

TURN_ID_HEADER = "X-Turn-ID"
WARNING_HEADER = "Warning"
CLIENT_MESSAGE_ID = re.compile(CLIENT_MESSAGE_ID_PATTERN)

_RESPONSES: dict[int | str, dict[str, Any]] = {
    200: {
        "description": "SSE stream of `tool_result`, `agent_message`, `grounding`, `error` and "
        "`done` events "
        "(or a JSON `MessageResponse` when `stream` is false).",
        "model": MessageResponse,  # application/json, by reference to the components
        "headers": {
            "X-Turn-ID": {
                "description": "The turn's id, sent before the first event: "
                "`GET /api/turns/{turn_id}` fetches it once stored.",
                "schema": {"type": "string"},
            },
            "Warning": {
                "description": '`299 - "ignored request keys: ..."`: keys of older '
                "clients accepted and ignored here (`use_rag_v3_retrieval`, a `{name}_enabled` "
                "switch of a tool this deployment does not configure).",
                "schema": {"type": "string"},
            },
            REPLAYED_HEADER: {
                "description": "`true` when a repeated `client_message_id` got the stored "
                "turn again (the model did not run).",
                "schema": {"type": "string", "enum": ["true"]},
            },
        },
        "content": {"text/event-stream": {"itemSchema": sse_item_schema()}},
    },
    **UNAUTHORIZED,
    **TOO_LARGE,
    **INVALID_BODY,
    **TURN_REFUSED,
    **unavailable("auth_unavailable", "prompt_unavailable", "store_unavailable"),
}


# Read from the request's headers by `_message_key` (the body is parsed by hand), declared here
# so that a generated client has it, spelled as the quiz's and the tasks' routes spell theirs.
_IDEMPOTENCY_PARAMETER: dict[str, Any] = {
    "name": IDEMPOTENCY_HEADER,
    "in": "header",
    "required": False,
    "schema": {
        "type": "string",
        "minLength": 1,
        "maxLength": MAX_CLIENT_MESSAGE_ID,
        "pattern": CLIENT_MESSAGE_ID_PATTERN,
    },
    "description": "The message's id, as the body's `client_message_id` (either, or both "
    "when equal): a repeat gets the first turn (`Idempotent-Replayed: true`), streamed or "
    "replayed; the same id with another question is a 422.",
}


@router.post(
    "/stream_query",
    responses=_RESPONSES,
    response_model=None,
    openapi_extra={**json_body_openapi(MessageRequest), "parameters": [_IDEMPOTENCY_PARAMETER]},
)
async def stream_query(
    request: Request,
    user: CurrentUser,
    body: ChatMessage,
    services: ServicesDep,
    language: RequestLanguage,
) -> Response:
    """Ask the coach. The turn is stored before the response ends; its id is in the
    `X-Turn-ID` header from the start. A repeated `client_message_id` (or `Idempotency-Key`)
    gets the stored turn again, without running the model."""
    key = _message_key(body, request.headers.get(IDEMPOTENCY_HEADER))
    return await run_chat(services, user, body, language, key)


async def run_chat(
    services: Services,
    user: Principal,
    body: MessageRequest,
    language: Language,
    key: str | None,
    *,
    encoder_for: Callable[[str], Encoder] | None = None,
    headers: dict[str, str] | None = None,
    regeneration: Regeneration | None = None,
) -> Response:
    """The one turn pipeline of both chat routes: replay, rejoin or run the turn, streamed
    with the encoder `encoder_for(turn_id)` gives (our SSE when None), or as JSON. A
    `regeneration` replaces the conversation's newest turn when it answers the same question
    (`aircoach.turn.regenerate`)."""
    # Imported by the first chat, not at start-up, so that the routes which never chat
    # (health) never import LangGraph; with the collector paused (aircoach/startup.py).
    first_import("aircoach.turn.prepare")
    with current_stages().timed("prompt"):
        snapshot = await services.prompts.current()
        registry = services.tools_for(snapshot)
    ignored = _ignored_switches(body, registry)
    from aircoach.routes.sse import event_stream, turn_stream
    from aircoach.turn.admission import (
        KeyReused,
        admit,
        finished_turn,
        give_back,
        hold_thread,
        in_progress,
        interrupted_has_ended,
        let_thread_go,
    )
    from aircoach.turn.conversations import conversation_thread
    from aircoach.turn.prepare import prepare_turn
    from aircoach.turn.regenerate import (
        let_go,
        let_go_gradings,
        put_back,
        take_back,
        take_back_interrupted,
    )
    from aircoach.turn.replay import replayed_caveat, replayed_errors, replayed_events
    from aircoach.turn.run import TurnRun

    thread = conversation_thread(user.sub, body.conversation_id)
    if key is not None and body.conversation_id is not None:
        key = f"{body.conversation_id}/{key}"  # no `/` in a message id: keys cannot meet
    with current_stages().timed("admission"):
        try:
            admission = await admit(services.gate, user.sub, key, query=body.query)
        except KeyReused:
            raise _reused_key(body, key or "") from None
    encoder = encoder_for(admission.turn_id) if encoder_for is not None else None
    headers = {**(headers or {}), TURN_ID_HEADER: admission.turn_id}
    if ignored:
        headers[WARNING_HEADER] = ignored_warning(ignored)
    if admission.rejoin:
        # The same message while its turn runs: the client gets that turn, not a second one.
        headers[REPLAYED_HEADER] = "true"
        following = await turn_from_start(services, user.sub, admission.turn_id, language)
        if following is not None and body.stream:
            return event_stream(following, headers=headers, encoder=encoder)
        if following is not None:
            async for _ in following:
                pass
        rejoined = await finished_turn(services.gate, user.sub, admission.turn_id)
        if rejoined is None:
            raise in_progress(key or "", admission.turn_id)
        admission = dataclasses.replace(admission, replay=rejoined)
    if admission.replay is not None:
        stored = admission.replay
        headers[REPLAYED_HEADER] = "true"
        caveats = services.settings.grounding_caveat
        if body.stream:
            replayed = None
            if stored.status == "ok":
                # The events as the turn's log keeps them, numbered as the first time, so that
                # a rejoin after this stream drops (`Last-Event-ID`) neither repeats nor skips.
                # Once the log is gone, and for a turn cut short (which says so with an error
                # the first stream did not have), rebuilt from the store as a rejoin would be.
                replayed = await turn_from_start(services, user.sub, stored.turn_id, language)
            if replayed is None:
                replayed = listed(replayed_events(stored, language, caveats=caveats))
            return event_stream(replayed, headers=headers, encoder=encoder)
        return _json_response(
            headers,
            text=stored.system,
            tool=stored.tool,
            caveat=replayed_caveat(stored, caveats=caveats),
            turn_id=stored.turn_id,
            prompt_version=stored.prompt_version,
            model=stored.model,
            context_turns=0,  # not stored
            status=stored.status,
            errors=replayed_errors(stored, language),
            request_id=current_request_id() or "",
            # Whether the answer was a second one is not stored: a replay says false.
            grounding=ResponseGrounding(**stored.grounding.model_dump())
            if stored.grounding
            else None,
        )

    # The turn as it runs now; prepared again after waiting for a turn it interrupted.
    prepare = partial(
        prepare_turn,
        services.turn_parts,
        user,
        body,
        snapshot,
        registry,
        language=language,
        turn_id=admission.turn_id,
    )
    replaced = None
    try:
        if regeneration is not None:
            # Out of the store before the thread is read: the new turn's context lacks it.
            replaced = await take_back(
                services.gate, user.sub, body.conversation_id, regeneration, question=body.query
            )
        turn = await prepare()
    except BaseException:
        # Nothing ran: a retry may run it, and a turn taken back is stored again, also when
        # the request is cancelled (the client left): the old answer is out of the store.
        with anyio.CancelScope(shield=True):
            await give_back(services.gate, user.sub, admission)
            if replaced is not None:
                await put_back(services.gate, replaced)
        raise
    try:
        with current_stages().timed("admission"):
            interrupted = await hold_thread(
                services.gate, user.sub, thread, admission, interrupt=body.if_busy == "interrupt"
            )
    except BaseException:
        await turn.models.aclose()  # the turn never runs: its model clients close here
        if replaced is not None:
            with anyio.CancelScope(shield=True):
                await put_back(services.gate, replaced)
        raise
    try:
        if interrupted is not None:
            # The interrupted turn stores what it had and, cut short, drops the warm thread as
            # it ends: this turn's agent would then read an empty thread. Wait for it, then
            # prepare the turn again: its history (the interrupted turn in it, or taken back by
            # a regeneration), its memory and its prompt as they are now.
            await interrupted_has_ended(services.gate, user.sub, interrupted)
            if regeneration is not None and replaced is None:
                # `stop()` then `regenerate()`: the stopped answer ran on until now.
                replaced = await take_back_interrupted(
                    services.gate,
                    user.sub,
                    body.conversation_id,
                    regeneration,
                    question=body.query,
                    interrupted=interrupted,
                    regenerating=admission.turn_id,
                )
            again = await prepare()
            await turn.models.aclose()
            turn = again
    except BaseException:
        # Cancelled (the client left) while it held the thread and before it ran: the thread is
        # freed for the next message, not held until its claim lapses.
        with anyio.CancelScope(shield=True):
            await turn.models.aclose()
            await let_thread_go(services.gate, user.sub, thread, admission)
            if replaced is not None:
                await put_back(services.gate, replaced)
        raise
    if replaced is not None:
        # One step: a cancellation between a grading's attempts and its schedule would leave
        # the schedule moved twice.
        with anyio.CancelScope(shield=True):
            await let_go(services.gate, user.sub, replaced)
            await let_go_gradings(services.quiz_service, user.sub, replaced)
    run = TurnRun(
        services.turn_log,
        user_id=user.sub,
        turn_id=turn.turn_id,
        on_cancel=turn.cancel,
        running=services.running_turns,
    )
    # The run frees the thread with its last write (`TurnRun.produce`).
    events = turn.events()
    if body.stream:
        return turn_stream(run, events, headers=headers, encoder=encoder)

    await run.produce(events)
    errors = [
        {"code": e.data["code"], "message": e.data["message"]}
        for e in run.events
        if e.type == "error"
    ]
    return _json_response(
        headers,
        text=turn.text,
        caveat=turn.caveat,
        tool=turn.tool,
        turn_id=turn.turn_id,
        prompt_version=turn.prompt_version,
        model=turn.model,
        context_turns=turn.context_turns,
        status=turn.status,
        errors=errors,
        request_id=turn.request_id,
        grounding=ResponseGrounding(**turn.checked.model_dump(), regenerated=turn.regenerated)
        if turn.checked
        else None,
    )


def _json_response(
    headers: dict[str, str],
    *,
    text: str,
    tool: ToolRecord | None,
    caveat: str = "",
    errors: list[dict[str, str]] | None = None,
    **fields: Any,
) -> Response:
    """The JSON answer (`stream: false`) of a turn, run now or stored and replayed: its
    `answer` never empty (`json_answer`), but for a turn cancelled before it wrote anything,
    which is stored with no answer (the fallback was sent and never stored)."""
    fallback = "" if fields.get("status") == "interrupted" else FALLBACK_ANSWER
    answer = MessageResponse(
        answer=json_answer(text, tool, fallback) + caveat,
        tool=tool,
        errors=errors or [],
        **fields,
    )
    return Response(answer.model_dump_json(), media_type="application/json", headers=headers)


def _ignored_switches(body: MessageRequest, registry: ToolRegistry) -> list[str]:
    """The request's keys this deployment ignores (the seed's `use_rag_v3_retrieval`, a flat
    `{name}_enabled` switch of a tool not configured here), dropped from `body.tools`; a name
    inside `tools` that is no tool here stays a 422 listing the valid ones."""
    unknown = registry.unknown(body.tools)
    dropped = [name for name in unknown if name in body.flat_switches]
    refused = [name for name in unknown if name not in body.flat_switches]
    if refused:
        raise RequestValidationError(
            [
                {
                    "type": "value_error",
                    "loc": ("body", "tools", name),
                    "msg": f"unknown tool {name!r}; valid: {registry.names}",
                    "input": name,
                }
                for name in refused
            ]
        )
    if body.tools is not None:
        for name in dropped:
            del body.tools[name]
    ignored = [name + "_enabled" for name in dropped]
    if body.use_rag_v3_retrieval is not None:
        ignored.insert(0, "use_rag_v3_retrieval")
    if ignored:
        log.info("request keys ignored (not used by this deployment): %s", ", ".join(ignored))
    return ignored


async def turn_from_start(
    services: Services, user_id: str, turn_id: str, language: Language
) -> AsyncIterator[LoggedEvent] | None:
    """A turn's events from its first, as a rejoin gets them (`turn.rejoin.turn_events`):
    followed live while it runs, from its log once it ended, rebuilt from the store once the
    log is gone; None when the caller has no such turn."""
    from aircoach.turn.rejoin import turn_events

    return await turn_events(
        services.turn_log,
        services.chats,
        user_id,
        turn_id,
        after=0,
        language=language,
        give_up_s=services.settings.turn_timeout_s,
        caveats=services.settings.grounding_caveat,
        running=services.running_turns,
    )


def ignored_warning(ignored: list[str]) -> str:
    """RFC 9111's `Warning` (299: a persistent warning), naming the ignored keys."""
    return f'299 - "ignored request keys: {", ".join(ignored)}"'


def _message_key(body: MessageRequest, header: str | None) -> str | None:
    """The request's client_message_id: the body's, or the `Idempotency-Key` header's."""
    if header is None:
        return body.client_message_id
    if not CLIENT_MESSAGE_ID.fullmatch(header) or len(header) > MAX_CLIENT_MESSAGE_ID:
        raise _invalid_key(header, "header", IDEMPOTENCY_HEADER, "not a valid message id")
    if body.client_message_id not in (None, header):
        raise _invalid_key(
            body.client_message_id, "body", "client_message_id", "differs from Idempotency-Key"
        )
    return header


def _reused_key(body: MessageRequest, key: str) -> RequestValidationError:
    """422 for a message id whose turn answers another question (the id from the body, else
    from the `Idempotency-Key` header; `key` may be prefixed with the conversation)."""
    where, name = (
        ("body", "client_message_id") if body.client_message_id else ("header", IDEMPOTENCY_HEADER)
    )
    return _invalid_key(
        key.rpartition("/")[2],
        where,
        name,
        "already used in the last 24 h for another question: send a new id for a new question",
    )


def _invalid_key(value: str, where: str, name: str, message: str) -> RequestValidationError:
    return RequestValidationError(
        [{"type": "value_error", "loc": (where, name), "msg": message, "input": value[:64]}]
    )
