"""The events of a chat turn's stream (the SSE contract clients depend on), as typed models.

Each event is one SSE message: the `event:` line is its `type`, the `data:` line its JSON, and
the `id:` line its number in the turn (1, 2, ...): a client that lost the connection sends the
last one it read as `Last-Event-ID` to `GET /api/turns/{turn_id}/events`. Events travel as
their JSON objects (`model_dump(mode="json")`): live, from the turn log on another instance,
or rebuilt from a stored turn, one encoder (`encode_sse`) writes them all.
The OpenAPI description of the stream is generated from these models (`sse_item_schema`).
"""

from __future__ import annotations

import json
from typing import Any, Literal

from fastapi.sse import format_sse_event
from pydantic import BaseModel, ConfigDict, Field

from aircoach.grounding.models import GroundingResult


class _Event(BaseModel):
    model_config = ConfigDict(frozen=True)


def encode_sse(seq: int, data: dict[str, Any]) -> bytes:
    """One SSE message: `event: <type>`, one `data:` line of JSON, `id: <seq>`."""
    text = json.dumps(data, ensure_ascii=False, separators=(",", ":"))
    return format_sse_event(data_str=text, event=str(data["type"]), id=str(seq))


class ToolResult(_Event):
    """What a tool returned, for the client to render."""

    type: Literal["tool_result"] = "tool_result"
    tool_name: str
    data: dict[str, Any] = Field(description="An object, never a JSON string.")
    final: bool = Field(
        description="True for a return_direct tool that succeeded: it ends the turn."
    )


class AgentMessage(_Event):
    """A text delta of the answer."""

    type: Literal["agent_message"] = "agent_message"
    content: str


class Grounding(GroundingResult, _Event):
    """The citation guard's verdict on the answer, before `done`; only when it cites
    something. An unverified citation is followed by a caveat `agent_message`
    (`GROUNDING_CAVEAT`)."""

    type: Literal["grounding"] = "grounding"


class ErrorEvent(_Event):
    """A user-safe failure notice; the stream still ends with `done`."""

    type: Literal["error"] = "error"
    code: str
    message: str


DoneStatus = Literal["ok", "error", "interrupted", "cancelled"]


class Done(_Event):
    """The last event of every stream."""

    type: Literal["done"] = "done"
    status: DoneStatus = Field(
        default="ok",
        description="How the turn ended: `ok`; `error` (an `error` event said why); "
        "`interrupted` (it stopped before its end: its instance went away, or a stored turn "
        "that did not end well is replayed); `cancelled` (`POST /api/turns/{id}/cancel`, or a "
        'new message with `if_busy: "interrupt"`).',
    )
    turn_id: str
    prompt_version: str
    model: str = Field(description="The model that answered.")
    context_turns: int = Field(description="Stored turns the model was shown.")
    request_id: str = Field(description="The request's id, as in the X-Request-ID header.")


TurnEvent = ToolResult | AgentMessage | Grounding | ErrorEvent | Done
EVENT_TYPES: tuple[type[_Event], ...] = (ToolResult, AgentMessage, Grounding, ErrorEvent, Done)


def sse_item_schema() -> dict[str, Any]:
    """One SSE message of the stream, in FastAPI's convention for streams (`itemSchema`):
    one alternative per event type, its `data` described by the event's model."""
    alternatives = []
    for event in EVENT_TYPES:
        schema = event.model_json_schema(mode="serialization")
        name = schema["properties"]["type"]["const"]
        schema["required"] = list(schema["properties"])  # every field is always sent
        alternatives.append(
            {
                "type": "object",
                "title": event.__name__,
                "description": schema.get("description", ""),
                "required": ["event", "data"],
                "properties": {
                    "event": {"type": "string", "const": name},
                    "data": {
                        "type": "string",
                        "contentMediaType": "application/json",
                        "contentSchema": schema,
                    },
                    "id": {
                        "type": "string",
                        "description": "The event's number in the turn: 1, 2, ...",
                    },
                    "retry": {"type": "integer", "minimum": 0},
                },
            }
        )
    return {"oneOf": alternatives}
