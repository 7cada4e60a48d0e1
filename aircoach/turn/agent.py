"""The agent factory: one LangGraph agent per request, over the process-wide checkpointer."""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from langchain.agents import create_agent
from langchain.agents.middleware import AgentMiddleware, AgentState, ModelRequest, ModelResponse
from langchain.agents.middleware.types import ToolCallRequest, hook_config
from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AnyMessage, HumanMessage, ToolMessage
from langchain_core.tools import StructuredTool, ToolException
from langgraph.checkpoint.base import BaseCheckpointSaver
from langgraph.graph.state import CompiledStateGraph
from langgraph.types import Command

from aircoach.llm.failover import ModelFailover
from aircoach.tools.arguments import InvalidArguments, check_arguments
from aircoach.tools.registry import ToolContext, ToolSpec

log = logging.getLogger(__name__)


def window(messages: list[AnyMessage], history_limit: int) -> list[AnyMessage]:
    """The current turn plus the last `history_limit` turns before it; a turn starts at a
    human message. The checkpointed state keeps everything; only the model's input shrinks."""
    starts = [i for i, m in enumerate(messages) if isinstance(m, HumanMessage)]
    if len(starts) <= history_limit + 1:
        return messages
    return messages[starts[-(history_limit + 1)] :]


@dataclass(frozen=True)
class _Result:
    """A tool's artifact on its way out of the tool: the client data, and whether the result
    may end the turn (`ToolOutput.final`). Unwrapped by `TurnMiddleware` before the message
    enters the state, so the state (and the stream) only ever hold the client data."""

    data: dict[str, Any]
    final: bool
    ok: bool = True  # False: the tool failed; its data (e.g. `success: false`, `meta`) stays


def ends_turn(message: ToolMessage) -> bool:
    """Whether this tool message ends the run: set by `TurnMiddleware` on the messages of
    this turn (a return_direct tool whose result is final and not a failure)."""
    return bool(message.response_metadata.get("ends_turn"))


class TurnMiddleware(AgentMiddleware):
    """History window for the model, and return_direct that lets failures reach the model:
    a return_direct tool ends the run only when it succeeded and its result is final."""

    def __init__(self, history_limit: int, return_direct: frozenset[str]):
        super().__init__()
        self.history_limit = history_limit
        self.return_direct = return_direct

    @hook_config(can_jump_to=["end"])
    def before_model(self, state: AgentState, runtime: Any) -> dict[str, Any] | None:
        last = state["messages"][-1] if state["messages"] else None
        if isinstance(last, ToolMessage) and ends_turn(last):
            return {"jump_to": "end"}
        return None

    async def awrap_tool_call(
        self,
        request: ToolCallRequest,
        handler: Callable[[ToolCallRequest], Awaitable[ToolMessage | Command[Any]]],
    ) -> ToolMessage | Command[Any]:
        message = await handler(request)
        if not isinstance(message, ToolMessage):
            return message
        final = True
        if isinstance(message.artifact, _Result):
            final = message.artifact.final
            if not message.artifact.ok:
                message.status = "error"
            message.artifact = message.artifact.data
        ends = final and message.name in self.return_direct and message.status != "error"
        message.response_metadata["ends_turn"] = ends
        return message

    async def awrap_model_call(
        self,
        request: ModelRequest,
        handler: Callable[[ModelRequest], Awaitable[ModelResponse]],
    ) -> ModelResponse:
        return await handler(
            request.override(messages=window(request.messages, self.history_limit))
        )


def build_tool(spec: ToolSpec, ctx: ToolContext) -> StructuredTool:
    handler = spec.load_handler()

    async def run(**arguments: Any) -> tuple[str, _Result]:
        try:
            arguments = check_arguments(spec.parameters, arguments)
        except InvalidArguments as exc:  # the model reads what to fix and may call again
            log.warning("tool %s refused its arguments: %s", spec.name, exc)
            raise ToolException(f"[Tool {spec.name}: invalid arguments: {exc}]") from None
        try:
            output = await handler(ctx, **arguments)
        except Exception as exc:  # a tool never crashes the turn: the model explains the failure
            log.exception("tool %s failed", spec.name)
            raise ToolException(f"[Tool {spec.name} failed: {type(exc).__name__}]") from exc
        # A failure the tool reported itself keeps its client data (`success: false` and
        # `meta` for a search tool); the middleware marks the message as an error.
        return output.text, _Result(output.data, output.final, ok=output.ok)

    return StructuredTool.from_function(
        coroutine=run,
        name=spec.name,
        description=spec.description,
        args_schema=spec.parameters,
        response_format="content_and_artifact",
        handle_tool_error=True,
    )


def build_agent(
    *,
    model: BaseChatModel,
    tools: list[ToolSpec],
    ctx: ToolContext,
    system_prompt: str,
    checkpointer: BaseCheckpointSaver | None,
    history_limit: int,
    failover: ModelFailover | None = None,
) -> CompiledStateGraph:
    turn = TurnMiddleware(history_limit, frozenset(t.name for t in tools if t.return_direct))
    return create_agent(
        model,
        [build_tool(spec, ctx) for spec in tools],
        system_prompt=system_prompt,
        # Failover outermost: each model it tries gets the same history window.
        middleware=[failover or ModelFailover(), turn],
        checkpointer=checkpointer,
    )
