"""POST /api/stream_query: one chat turn, streamed as SSE or answered as JSON."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter
from fastapi.exceptions import RequestValidationError
from fastapi.responses import Response

from aircoach.deps import CurrentUser, RuntimeDep
from aircoach.models import MessageRequest, MessageResponse
from aircoach.routes.responses import UNAUTHORIZED, UNPARSABLE_BODY, unavailable

router = APIRouter(prefix="/api", tags=["chat"])

# One SSE event (FastAPI's own convention for streams: `itemSchema`); `data` is one JSON
# object whose `type` is the event name.
_SSE_EVENT = {
    "type": "object",
    "required": ["event", "data"],
    "properties": {
        "event": {"type": "string", "enum": ["tool_result", "agent_message", "error", "done"]},
        "data": {"type": "string", "contentMediaType": "application/json"},
        "id": {"type": "string"},
        "retry": {"type": "integer", "minimum": 0},
    },
}
_RESPONSES: dict[int | str, dict[str, Any]] = {
    200: {
        "description": "SSE stream of `tool_result`, `agent_message`, `error` and `done` events "
        "(or a JSON `MessageResponse` when `stream` is false).",
        "model": MessageResponse,  # application/json, by reference to the components
        "content": {"text/event-stream": {"itemSchema": _SSE_EVENT}},
    },
    **UNPARSABLE_BODY,
    **UNAUTHORIZED,
    **unavailable("auth_unavailable", "prompt_unavailable", "store_unavailable"),
}


@router.post("/stream_query", responses=_RESPONSES, response_model=None)
async def stream_query(body: MessageRequest, user: CurrentUser, runtime: RuntimeDep) -> Response:
    """Ask the coach. The turn is stored before the response ends."""
    snapshot = await runtime.prompts.current()
    registry = runtime.tools_for(snapshot)
    unknown = registry.unknown(body.tools)
    if unknown:
        raise RequestValidationError(
            [
                {
                    "type": "value_error",
                    "loc": ("body", "tools", name),
                    "msg": f"unknown tool {name!r}; valid: {registry.names}",
                    "input": body.tools,
                }
                for name in unknown
            ]
        )
    from aircoach.chat import prepare_turn
    from aircoach.sse import event_stream

    turn = await prepare_turn(runtime, user, body, snapshot)
    if body.stream:
        return event_stream(turn.events())

    errors: list[dict[str, str]] = []
    async for event in turn.events():
        if event["type"] == "error":
            errors.append({"code": event["code"], "message": event["message"]})
    answer = MessageResponse(
        answer="".join(turn.answer),
        tool=turn.tool,
        turn_id=turn.turn_id,
        prompt_version=turn.prompt_version,
        model=turn.model,
        context_turns=turn.context_turns,
        status=turn.status,
        errors=errors,
    )
    return Response(answer.model_dump_json(), media_type="application/json")
