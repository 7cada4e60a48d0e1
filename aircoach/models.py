"""Request, response and event shapes of the HTTP contract (stable: clients depend on them)."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

TurnStatus = Literal["ok", "error", "interrupted"]

# The most tools a `tools.json` may declare, and so the most switches a request may send.
MAX_TOOLS = 64
# A tool name's longest form (`ToolSpec.name`).
MAX_TOOL_NAME = 64


class MessageRequest(BaseModel):
    """A chat turn. Old clients that send only `query` keep working."""

    # Strict types: a switch is JSON true or false, as the schema says (lax mode took 0, 1
    # and "yes" too, and the schema's negative tests sometimes caught it). Unknown fields are
    # still ignored.
    model_config = ConfigDict(extra="ignore", strict=True)

    query: str = Field(min_length=1, max_length=4000, description="The user's message.")
    chat_history: bool = Field(default=True, description="Show the model the earlier turns.")
    user_data: bool = Field(default=True, description="Add the user's profile to the prompt.")
    stream: bool = Field(default=True, description="SSE stream when true, JSON when false.")
    tools: dict[Annotated[str, Field(max_length=MAX_TOOL_NAME)], bool] | None = Field(
        default=None,
        max_length=MAX_TOOLS,
        description="Tool switches by name; missing names take their defaults.",
    )

    @field_validator("tools", mode="before")
    @classmethod
    def _few_switches(cls, tools: Any) -> Any:
        # Counted before each switch is validated: a map of thousands of names fails at once.
        if isinstance(tools, dict) and len(tools) > MAX_TOOLS:
            raise ValueError(f"at most {MAX_TOOLS} tool switches, got {len(tools)}")
        return tools


class ToolRecord(BaseModel):
    """A tool's result as the client got it (`tool_result.data`)."""

    tool_name: str
    data: dict[str, Any]


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


class MessageResponse(BaseModel):
    """The JSON answer when `stream` is false: the same content the stream would carry."""

    answer: str
    tool: ToolRecord | None = None
    turn_id: str
    prompt_version: str
    model: str
    context_turns: int
    status: TurnStatus
    errors: list[dict[str, str]] = Field(default_factory=list)
    request_id: str = Field(description="The request's id, as in the X-Request-ID header.")


class _TurnFields(BaseModel):
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
    status: TurnStatus = "ok"


class Turn(_TurnFields):
    """One stored chat turn (collection `chats`). Turns stored before `tools` existed have
    only `tool`."""

    tools: list[ToolCall] = Field(default_factory=list)


class HistoryTurn(_TurnFields):
    """A stored turn as `/api/history` returns it: every tool call's client data, never the
    text the model was given."""

    tools: list[ToolUse] = Field(default_factory=list)

    @classmethod
    def of(cls, turn: Turn) -> HistoryTurn:
        return cls(
            **turn.model_dump(exclude={"tools"}),
            tools=[
                ToolUse(tool_name=t.tool_name, arguments=t.arguments, data=t.data)
                for t in turn.tools
            ],
        )


class HistoryPage(BaseModel):
    turns: list[HistoryTurn]
    next_before: str | None = Field(
        default=None, description="Pass as `before` to get the next (older) page."
    )


class ToolInfo(BaseModel):
    name: str
    label: str = Field(description="Short name for the tool's switch, in Italian.")
    description: str
    default_enabled: bool
    source: bool
    return_direct: bool
    available: bool
    unavailable_reason: str | None = Field(
        default=None, description="Why the tool cannot be switched on (Italian), when unavailable."
    )


class DocDetail(BaseModel):
    key: str
    version_id: str | None = None
    etag: str
    size: int
    last_modified: str | None = None


class UpdateDocsResponse(BaseModel):
    message: str
    docs_count: int
    docs_details: list[DocDetail]
    prompt_version: str
    previous_version: str | None
    system_prompt: str


class ErrorBody(BaseModel):
    error: str
    message: str


class ValidationIssue(BaseModel):
    """One reason a request was refused: where (`loc`), why, and a bounded preview of the
    value at fault (never the whole input)."""

    loc: list[str | int]
    msg: str
    type: str
    input: Any = None
    ctx: dict[str, Any] | None = None


class ValidationErrorBody(BaseModel):
    """422: the request did not validate (at most 20 issues are listed)."""

    detail: list[ValidationIssue]
