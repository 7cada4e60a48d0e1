"""POST /api/stream_query: one chat turn, streamed as SSE or answered as JSON."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter
from fastapi.exceptions import RequestValidationError
from fastapi.responses import Response

from aircoach.bodies import json_body_openapi
from aircoach.deps import ChatMessage, CurrentUser, ServicesDep
from aircoach.grounding.models import ResponseGrounding
from aircoach.models import MessageRequest, MessageResponse
from aircoach.routes.responses import INVALID_BODY, TOO_LARGE, UNAUTHORIZED, unavailable
from aircoach.turn.events import ErrorEvent, sse_item_schema

router = APIRouter(prefix="/api", tags=["chat"])

_RESPONSES: dict[int | str, dict[str, Any]] = {
    200: {
        "description": "SSE stream of `tool_result`, `agent_message`, `grounding`, `error` and "
        "`done` events "
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
async def stream_query(user: CurrentUser, body: ChatMessage, services: ServicesDep) -> Response:
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
    from aircoach.turn.prepare import prepare_turn
    from aircoach.turn.sse import event_stream

    turn = await prepare_turn(services, user, body, snapshot)
    if body.stream:
        return event_stream(turn.events())

    errors: list[dict[str, str]] = []
    async for event in turn.events():
        if isinstance(event, ErrorEvent):
            errors.append({"code": event.code, "message": event.message})
    answer = MessageResponse(
        answer=turn.text + turn.caveat,
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
    return Response(answer.model_dump_json(), media_type="application/json")
