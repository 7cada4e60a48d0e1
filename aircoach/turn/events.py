"""The events of a chat turn's stream (the SSE contract clients depend on), as typed models.

Each event is one SSE message: the `event:` line is its `type`, the `data:` line its JSON.
The OpenAPI description of the stream is generated from these models (`sse_item_schema`).
"""

from __future__ import annotations

from typing import Any, Literal

from fastapi.sse import format_sse_event
from pydantic import BaseModel, ConfigDict, Field

from aircoach.grounding.models import GroundingResult


class _Event(BaseModel):
    model_config = ConfigDict(frozen=True)

    def encode(self) -> bytes:
        """The SSE message: `event: <type>` and one `data:` line of JSON."""
        return format_sse_event(data_str=self.model_dump_json(), event=self.type)  # type: ignore[attr-defined]


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


class Done(_Event):
    """The last event of every stream."""

    type: Literal["done"] = "done"
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
        schema["required"] = ["type", *schema.get("required", [])]  # always sent
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
                    "id": {"type": "string"},
                    "retry": {"type": "integer", "minimum": 0},
                },
            }
        )
    return {"oneOf": alternatives}
