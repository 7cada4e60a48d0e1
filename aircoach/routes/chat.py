"""POST /api/stream_query: one chat turn, streamed as SSE or answered as JSON."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter
from fastapi.exceptions import RequestValidationError
from fastapi.responses import Response

from aircoach.bodies import json_body_openapi
from aircoach.deps import ChatMessage, CurrentUser, RequestLanguage, ServicesDep
from aircoach.models import MessageRequest, MessageResponse
from aircoach.routes.responses import INVALID_BODY, TOO_LARGE, UNAUTHORIZED, unavailable
from aircoach.turn.events import ErrorEvent, sse_item_schema

router = APIRouter(prefix="/api", tags=["chat"])

_RESPONSES: dict[int | str, dict[str, Any]] = {
    200: {
        "description": "SSE stream of `tool_result`, `agent_message`, `error` and `done` events "
        "(or a JSON `MessageResponse` when `stream` is false).",
        "model": MessageResponse,  # application/json, by reference to the components
        "content": {"text/event-stream": {"itemSchema": sse_item_schema()}},
    },
    **UNAUTHORIZED,
    **TOO_LARGE,
    **INVALID_BODY,
    **unavailable("auth_unavailable", "prompt_unavailable", "store_unavailable"),
}


@router.post(
    "/stream_query",
    responses=_RESPONSES,
    response_model=None,
    openapi_extra=json_body_openapi(MessageRequest),
)
async def stream_query(
    user: CurrentUser, body: ChatMessage, services: ServicesDep, language: RequestLanguage
) -> Response:
    """Ask the coach. The turn is stored before the response ends."""
    snapshot = await services.prompts.current()
    registry = services.tools_for(snapshot)
    unknown = registry.unknown(body.tools)
    if unknown:
        raise RequestValidationError(
            [
                {
                    "type": "value_error",
                    "loc": ("body", "tools", name),
                    "msg": f"unknown tool {name!r}; valid: {registry.names}",
                    "input": name,
                }
                for name in unknown
            ]
        )
    # Imported here so that the routes which never chat (health) never import LangGraph.
    from aircoach.turn.answer import json_answer
    from aircoach.turn.prepare import prepare_turn
    from aircoach.turn.sse import event_stream
    from aircoach.turn.turn import FALLBACK_ANSWER

    turn = await prepare_turn(services, user, body, snapshot, language=language)
    if body.stream:
        return event_stream(turn.events())

    errors: list[dict[str, str]] = []
    async for event in turn.events():
        if isinstance(event, ErrorEvent):
            errors.append({"code": event.code, "message": event.message})
    answer = MessageResponse(
        answer=json_answer(turn.text, turn.tool, FALLBACK_ANSWER),
        tool=turn.tool,
        turn_id=turn.turn_id,
        prompt_version=turn.prompt_version,
        model=turn.model,
        context_turns=turn.context_turns,
        status=turn.status,
        errors=errors,
        request_id=turn.request_id,
    )
    return Response(answer.model_dump_json(), media_type="application/json")
