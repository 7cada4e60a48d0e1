"""A chat turn as it is stored (collection `chats`; the same fields in SQLite) and its tool
calls: the records the chat store keeps (`aircoach.turn.ports.ChatStore`)."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, Field

from aircoach.grounding.feedback import Feedback
from aircoach.grounding.models import GroundingResult, Retrieved
from aircoach.response_model import ResponseModel
from aircoach.turn.events import ToolData

TurnStatus = Literal["ok", "error", "interrupted"]


class ToolRecord(ResponseModel):
    """A tool's result as the client got it (`tool_result.data`)."""

    tool_name: str
    data: ToolData


class ToolUse(ToolRecord):
    """A tool call of a stored turn as endpoints return it: client data only."""

    arguments: dict[str, Any] = Field(default_factory=dict)


class ToolCall(ToolUse):
    """A tool call of a stored turn, enough to rebuild exactly what the model was shown:
    its call (id, arguments) and the tool message (`text`, `status`). `text` is for the
    model only (it may hold a quiz question's key) and no endpoint returns it."""

    call_id: str
    text: str
    status: Literal["success", "error"] = "success"
    step: int = Field(default=0, description="The model call (0 = first) that made it.")
    offset: int = Field(
        default=0, description="Characters of the answer written before that model call ended."
    )


class TurnFields(BaseModel):
    userId: str
    human: str
    system: str
    tool: ToolRecord | None = Field(
        default=None, description="The last tool result of the turn (kept for older readers)."
    )
    timestamp: str
    prompt_version: str
    model: str
    thread_id: str
    turn_id: str
    conversation_id: str | None = Field(
        default=None,
        description="The client's conversation (`conversation_id` of the request); null: the "
        "user's default conversation.",
    )
    status: TurnStatus = "ok"
    error_code: str | None = Field(
        default=None,
        description="Why a turn with `status: error` failed: the `code` of its `error` event "
        "(an error code of the API, such as `model_unavailable`); null for any other status. "
        "The event's message is not stored.",
    )
    grounding: GroundingResult | None = Field(
        default=None, description="The citation guard's verdict (null: the answer cites nothing)."
    )
    retrieved: list[Retrieved] = Field(
        default_factory=list, description="What each tool returned: counts, ids or titles."
    )
    feedback: Feedback | None = Field(
        default=None, description="The student's verdict on the answer (the latest one)."
    )


class ConversationSummary(ResponseModel):
    """One of a user's conversations: its first question and its last activity."""

    conversation_id: str
    first_question: str = Field(description="The question of its first stored turn.")
    last_activity: str = Field(description="The timestamp of its newest stored turn.")
    last_turn_id: str = Field(description="The id of its newest stored turn.")
    turns: int = Field(description="How many turns it has stored.")


class Turn(TurnFields):
    """One stored chat turn (collection `chats`). Turns stored before `tools` existed have
    only `tool`."""

    tools: list[ToolCall] = Field(default_factory=list)


# A turn's question in the model's thread (its human message), live or rebuilt from the store,
# has the turn's id with this suffix: the thread tells which turns it holds.
_QUESTION_SUFFIX = "-h"


def question_message_id(turn_id: str) -> str:
    return f"{turn_id}{_QUESTION_SUFFIX}"


def turn_of_question(message_id: str | None) -> str | None:
    """The turn whose question has this message id; None for another message."""
    if message_id and message_id.endswith(_QUESTION_SUFFIX):
        return message_id[: -len(_QUESTION_SUFFIX)]
    return None
