"""Request, response and event shapes of the HTTP contract (stable: clients depend on them)."""

from __future__ import annotations

import re
from typing import Annotated, Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ModelWrapValidatorHandler,
    PrivateAttr,
    ValidationError,
    field_validator,
    model_validator,
)
from pydantic_core import InitErrorDetails, PydanticCustomError

from aircoach.grounding.models import ResponseGrounding
from aircoach.response_model import ResponseModel
from aircoach.tools.registry import MAX_TOOLS
from aircoach.turn.conversations import ConversationIdText, shown_conversation_id
from aircoach.turn.records import ToolRecord, ToolUse, Turn, TurnFields, TurnStatus

# A tool name's longest form (`ToolSpec.name`).
MAX_TOOL_NAME = 64
# A client's id of one message (a UUID, a ULID...): `client_message_id` or `Idempotency-Key`.
MAX_CLIENT_MESSAGE_ID = 128
CLIENT_MESSAGE_ID_PATTERN = r"^[A-Za-z0-9._:-]+$"
# A character that shows: not a space, a control (C0, C1) nor a format character that draws
# nothing (soft hyphen, zero-width space and joiners, direction marks, word joiner, BOM). The
# OpenAPI `pattern` of a message's text: the schema's readers and `_not_blank` use the same.
VISIBLE_PATTERN = (
    r"[^\s\x00-\x1f\x7f-\x9f\u00ad\u061c\u180e\u200b-\u200f\u202a-\u202e\u2060-\u206f"
    r"\ufeff\ufff9-\ufffb]"
)
_VISIBLE = re.compile(VISIBLE_PATTERN)
# Flat tool switches of older clients: `kb_search_enabled: false` is `tools.kb_search: false`.
_FLAT_SUFFIX = "_enabled"


class MessageRequest(BaseModel):
    """A chat turn. Old clients that send only `query` keep working. Deprecated and not in
    this schema: a flat `{name}_enabled` boolean is the same as `tools[name]` (ignored, with
    a `Warning`, for a tool not configured here)."""

    # Strict types: a switch is JSON true or false, as the schema says (lax mode took 0, 1
    # and "yes" too). An unknown field is a 422 naming it (a typo such as `chat_histroy` was
    # silently ignored), except the flat `{name}_enabled` switches older clients send. Those
    # are left out of the schema: as `patternProperties` they made generated clients type
    # the whole body as `{[key: string]: boolean}`, so that `{query: "x"}` did not compile.
    model_config = ConfigDict(extra="forbid", strict=True)

    query: str = Field(
        min_length=1,
        max_length=4000,
        description="The user's message: at least one character that shows (not only spaces, "
        "controls or zero-width characters).",
        # Checked by `_not_blank` with the same expression (Python's, as the schema's readers).
        json_schema_extra={"pattern": VISIBLE_PATTERN},
    )
    chat_history: bool = Field(default=True, description="Show the model the earlier turns.")
    user_data: bool = Field(default=True, description="Add the user's profile to the prompt.")
    stream: bool = Field(default=True, description="SSE stream when true, JSON when false.")
    stile: Literal["breve", "dettagliato"] | None = Field(
        default=None,
        description="The answer's length: `breve` or `dettagliato`; unset, the user's profile "
        "(`stile`, when USER_DATA_FIELDS names it), else the prompt's own.",
    )
    tools: dict[Annotated[str, Field(max_length=MAX_TOOL_NAME)], bool] | None = Field(
        default=None,
        max_length=MAX_TOOLS,
        description="Tool switches by name; missing names take their defaults.",
    )
    client_message_id: str | None = Field(
        default=None,
        min_length=1,
        max_length=MAX_CLIENT_MESSAGE_ID,
        pattern=CLIENT_MESSAGE_ID_PATTERN,
        description="The client's id of this message (or the `Idempotency-Key` header): a "
        "repeat within 24 h gets the stored turn instead of a second one; the same id with "
        "another `query` is a 422 naming it.",
    )
    conversation_id: ConversationIdText | None = Field(
        default=None,
        description="The client's conversation (the AI SDK's chat `id`): history, memory, "
        "quiz state and the one running turn are per conversation. None: the user's default "
        "conversation (so no client's conversation is called `default`).",
    )
    use_memory_retrieval: bool = True
    use_rag_v3_retrieval: bool | None = Field(
        default=None,
        description="Deprecated (the seed's tool platform): accepted and ignored, named in "
        "the response's `Warning` header.",
    )
    # The tools switched by a flat `{name}_enabled` key: one this deployment does not
    # configure is ignored (a `Warning`), not refused (`flat_switches`).
    _flat_switches: frozenset[str] = PrivateAttr(default=frozenset())
    if_busy: Literal["reject", "interrupt"] = Field(
        default="reject",
        description="While a turn of this conversation still runs: `reject` answers 409 "
        "`turn_in_progress` with its `turn_id` (rejoin it with `GET "
        "/api/turns/{turn_id}/events`); `interrupt` cancels it and starts this one.",
    )

    @model_validator(mode="wrap")
    @classmethod
    def _flat_switches_lifted(
        cls, data: Any, handler: ModelWrapValidatorHandler[MessageRequest]
    ) -> MessageRequest:
        """`{"kb_search_enabled": false}` (as the LEXE web chat sends it) is
        `{"tools": {"kb_search": false}}`; a 422 names the flat key when the two forms
        disagree, or when it is no boolean (`"false"`)."""
        flat = _flat(cls, data)
        if not flat:
            return handler(data)
        tools = data.get("tools")
        if tools is not None and not isinstance(tools, dict):
            return handler(data)  # the `tools` field reports its own type
        merged = dict(tools or {})
        for name, enabled in flat.items():
            key = name + _FLAT_SUFFIX
            if not isinstance(enabled, bool):
                raise _switch_error(key, enabled, "bool_type")
            if merged.get(name, enabled) != enabled:
                said = f"{key!r} and tools[{name!r}] disagree; send only one"
                conflict = PydanticCustomError("value_error", "{said}", {"said": said})
                raise _switch_error(key, enabled, conflict)
            merged[name] = enabled
        lifted = {name + _FLAT_SUFFIX for name in flat}
        rest = {key: value for key, value in data.items() if key not in lifted}
        request = handler({**rest, "tools": merged})
        request._flat_switches = frozenset(flat)
        return request

    @property
    def flat_switches(self) -> frozenset[str]:
        """The tools this request switched with a flat `{name}_enabled` key."""
        return self._flat_switches

    @field_validator("query")
    @classmethod
    def _not_blank(cls, query: str) -> str:
        # "\u200b\u200b" or "\u0000" was answered, charged and stored.
        if not _VISIBLE.search(query):
            raise ValueError("must hold a character that shows, not only spaces or controls")
        return query

    @field_validator("tools", mode="before")
    @classmethod
    def _few_switches(cls, tools: Any) -> Any:
        # Counted before each switch is validated: a map of thousands of names fails at once.
        if isinstance(tools, dict) and len(tools) > MAX_TOOLS:
            raise ValueError(f"at most {MAX_TOOLS} tool switches, got {len(tools)}")
        return tools


def _flat(cls: type[BaseModel], data: Any) -> dict[str, Any]:
    if not isinstance(data, dict):
        return {}
    return {
        key[: -len(_FLAT_SUFFIX)]: value
        for key, value in data.items()
        if isinstance(key, str) and key.endswith(_FLAT_SUFFIX) and key not in cls.model_fields
    }


def _switch_error(key: str, value: Any, kind: str | PydanticCustomError) -> ValidationError:
    """A 422 whose `loc` is the flat switch `key` (a model's own error names the body)."""
    return ValidationError.from_exception_data(
        MessageRequest.__name__, [InitErrorDetails(type=kind, loc=(key,), input=value)]
    )


class MessageResponse(ResponseModel):
    """The JSON answer when `stream` is false: the same content the stream would carry."""

    answer: str = Field(
        description="Never empty: the model's text; for a quiz turn the tool ended, the "
        "question(s) and options as text, from `tool.data`; empty only for a turn cancelled "
        '(`status: "interrupted"`) before it wrote anything, as it is stored.'
    )
    tool: ToolRecord | None = None
    turn_id: str
    prompt_version: str
    model: str
    context_turns: int
    status: TurnStatus
    errors: list[dict[str, str]] = Field(default_factory=list)
    request_id: str = Field(description="The request's id, as in the X-Request-ID header.")
    grounding: ResponseGrounding | None = Field(
        default=None,
        description="The citation guard's verdict on `answer` (null when it cites nothing).",
    )


class HistoryTurn(TurnFields, ResponseModel):
    """A stored turn as `/api/history` returns it: every tool call's client data, never the
    text the model was given."""

    tools: list[ToolUse] = Field(default_factory=list)

    @classmethod
    def of(cls, turn: Turn) -> HistoryTurn:
        return cls(
            **turn.model_dump(exclude={"tools", "conversation_id"}),
            conversation_id=shown_conversation_id(turn.conversation_id),
            tools=[
                ToolUse(tool_name=t.tool_name, arguments=t.arguments, data=t.data)
                for t in turn.tools
            ],
        )


class HistoryPage(ResponseModel):
    turns: list[HistoryTurn]
    next_cursor: str | None = Field(
        default=None,
        description="Opaque and URL-safe: pass as `cursor` to get the next (older) page; "
        "null on the last page.",
    )
    next_before: str | None = Field(
        default=None,
        deprecated=True,
        description="Deprecated (use `next_cursor`): pass as `before` to get the next page.",
    )


class ToolInfo(ResponseModel):
    name: str
    label: str = Field(description="Short name for the tool's switch, in Italian.")
    description: str
    default_enabled: bool
    source: bool
    return_direct: bool
    available: bool
    backend: Literal["python", "remote", "embedded"] | None = Field(
        description="What runs the tool now: its Python handler, its HTTP service (`remote`), "
        "its in-process fallback while the service is not configured (`embedded`); null when "
        "unavailable."
    )
    unavailable_reason: str | None = Field(
        default=None, description="Why the tool cannot be switched on (Italian), when unavailable."
    )


class DocDetail(ResponseModel):
    key: str
    version_id: str | None = None
    etag: str
    size: int
    last_modified: str | None = None


class UpdateDocsResponse(ResponseModel):
    message: str
    docs_count: int
    docs_details: list[DocDetail]
    prompt_version: str
    previous_version: str | None
    system_prompt: str
    manual_version: str | None = Field(
        default=None,
        description="Version of the course manual (`manual/` docs); null without a manual. "
        "Editing the manual changes this, never `prompt_version`.",
    )


class ErrorBody(ResponseModel):
    error: str
    message: str


class TurnInProgressBody(ErrorBody):
    """`turn_in_progress`: the running turn the client may rejoin."""

    turn_id: str = Field(description="The running turn: `GET /api/turns/{turn_id}/events`.")


class ValidationIssue(ResponseModel):
    """One reason a request was refused: where (`loc`), why, and a bounded preview of the
    value at fault (never the whole input)."""

    loc: list[str | int]
    msg: str
    type: str
    input: Any = None
    ctx: dict[str, Any] | None = Field(
        default=None,
        exclude_if=lambda ctx: ctx is None,
        description="The rule's parameters (`min_length`...), for the issues that have some: "
        "absent otherwise.",
    )


class ValidationErrorBody(ResponseModel):
    """422: the request did not validate. `message` names the first field at fault in the
    request's language; `detail` lists at most 20 issues."""

    error: Literal["invalid_request"] = "invalid_request"
    message: str = Field(default="", description="One sentence a client can show.")
    detail: list[ValidationIssue]
