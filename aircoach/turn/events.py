"""The events of a chat turn, as plain typed data with a `type` discriminator. The turn
yields them and knows no transport: they travel as their JSON objects (`model_dump(mode=
"json")`), live, through the turn log to another instance, or rebuilt from a stored turn, and
the HTTP layer encodes them (`aircoach.routes.sse`: one SSE message each, the `event:` line its
`type`, the `data:` line its JSON, the `id:` line its number in the turn) and describes them in
the OpenAPI schema from these models.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import ConfigDict, Field

from aircoach.grounding.models import GroundingResult
from aircoach.response_model import ResponseModel

# What a tool returned, as the client gets it (`tool_result.data`, a stored turn's `tools`):
# any object, with the fields every client may read typed so that generated clients can
# read them (a bare `dict[str, Any]` is `{[key: string]: unknown}` to openapi-typescript):
# a failure's `error`, and `messaggio`, the one name of a sentence for the student.
ToolData = Annotated[
    dict[str, Any],
    Field(
        json_schema_extra={
            "properties": {
                "error": {
                    "type": "string",
                    "description": "A failed tool's error: the text the model is given, in "
                    "English.",
                },
                "messaggio": {
                    "type": "string",
                    "description": "The sentence for the student, to show as it is: a failed "
                    "tool's, in the request's language, naming the tool by its label; the "
                    "quiz's when no question matched (`domanda_teoria`).",
                },
                "message": {
                    "type": "string",
                    "deprecated": True,
                    "description": "Deprecated: the quiz's no-match sentence under its old "
                    "name, the same text as `messaggio`; read `messaggio`.",
                },
            }
        }
    ),
]


class _Event(ResponseModel):
    model_config = ConfigDict(frozen=True)


class ToolResult(_Event):
    """What a tool returned, for the client to render."""

    type: Literal["tool_result"] = "tool_result"
    tool_name: str
    arguments: dict[str, Any] = Field(
        description="The arguments the model called the tool with (the AI SDK stream's tool "
        "`input`)."
    )
    data: ToolData = Field(
        description="An object, never a JSON string. A failed tool's has `error` (the text the "
        "model is given, in English) and `messaggio` (the sentence for the student, in the "
        "request's language, naming the tool by its label); `messaggio` is also the quiz's "
        "sentence when no question matched (`message`, the same text, is deprecated)."
    )
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
    request_id: str = Field(
        description="The id of the request that ran the turn, as in its X-Request-ID header (a "
        "replay rebuilt from the stored turn carries its own)."
    )


TurnEvent = ToolResult | AgentMessage | Grounding | ErrorEvent | Done
EVENT_TYPES: tuple[type[_Event], ...] = (ToolResult, AgentMessage, Grounding, ErrorEvent, Done)
