"""The agent of a turn: a LangGraph structure built once per prompt version and tool set, and
what is bound to it per request (the models, the system prompt, the tools' context).

`create_agent` compiles a graph (nodes, channels, tool schemas, middleware chains) that only
depends on the tools and the middleware's settings; compiling it took 1.3-2.1 ms of every
turn. `AgentShapes` keeps the compiled graphs, which are pure data: no model, no client, no
user, nothing bound to an event loop (the checkpointer is the process-wide one). Everything
that belongs to the request travels in LangGraph's runtime context (`TurnBinding`), read by
`TurnMiddleware` at each model and tool call, so two requests through one structure never
see each other's model, prompt (with its per-user sections) or tools' context.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import OrderedDict
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from contextvars import Context, ContextVar
from dataclasses import dataclass, field
from typing import Any, cast

from langchain.agents import create_agent
from langchain.agents.middleware import AgentMiddleware, AgentState, ModelRequest, ModelResponse
from langchain.agents.middleware.types import ToolCallRequest, hook_config
from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AnyMessage, HumanMessage, SystemMessage, ToolMessage
from langchain_core.outputs import ChatResult
from langchain_core.runnables import RunnableConfig
from langchain_core.tools import StructuredTool, ToolException
from langgraph.checkpoint.base import BaseCheckpointSaver
from langgraph.graph.state import CompiledStateGraph
from langgraph.types import Command
from langsmith import set_runtime_overrides
from langsmith.utils import tracing_is_enabled

from aircoach.logs import current_stages
from aircoach.tools.arguments import InvalidArguments, check_arguments
from aircoach.tools.backends import load_handler
from aircoach.tools.registry import ToolContext, ToolSpec
from aircoach.turn.failover import ModelFailover

log = logging.getLogger(__name__)


async def _inline_unless_tracing(
    default: Callable[..., Awaitable[Any]],
    ctx: Context,
    func: Callable[..., Any],
    /,
    *args: Any,
    **kwargs: Any,
) -> Any:
    """LangSmith's `traceable`, which `create_agent` puts around every middleware hook, hops
    to a worker thread twice per call (span set-up and end): four thread hand-offs per model
    call and two per tool call. With tracing off both are a few dict operations: run them on
    the loop. With tracing on, LangSmith's own thread hop stands."""
    if tracing_is_enabled():
        return await default(ctx, func, *args, **kwargs)
    return ctx.run(func, *args, **kwargs)


# Process-wide, like LangChain's own configure hooks (see turn/failover.py): LangSmith's
# documented override for how it leaves the event loop.
set_runtime_overrides(aio_to_thread=_inline_unless_tracing)

# How many compiled structures a process keeps (prompt versions x tool sets in use).
MAX_SHAPES = 16


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


@dataclass(frozen=True)
class TurnBinding:
    """What one request binds to a shared structure (LangGraph's runtime context)."""

    model: BaseChatModel
    system_prompt: str
    tools: ToolContext
    failover: ModelFailover = field(default_factory=ModelFailover)


# The tools' context of the tool call running in this task: set by `TurnMiddleware` around
# each call from the request's binding, read by the tool (a shared `StructuredTool`).
_tool_context: ContextVar[ToolContext] = ContextVar("aircoach_tool_context")


class TurnMiddleware(AgentMiddleware[AgentState[Any], TurnBinding]):
    """Binds the request to the model call (its model and fallbacks, its system prompt, the
    history window) and to each tool call (its tools' context); unwraps tool results."""

    def __init__(self, history_limit: int, return_direct: frozenset[str]):
        super().__init__()
        self.history_limit = history_limit
        self.return_direct = return_direct

    async def awrap_model_call(
        self,
        request: ModelRequest[TurnBinding],
        handler: Callable[[ModelRequest[TurnBinding]], Awaitable[ModelResponse]],
    ) -> ModelResponse:
        binding = request.runtime.context
        request = request.override(
            model=binding.model,
            system_message=SystemMessage(binding.system_prompt),
            messages=window(request.messages, self.history_limit),
        )
        with current_stages().timed("model"):
            # Failover in the same layer: each middleware layer costs a LangSmith span setup.
            return await binding.failover.call(request, handler)

    async def awrap_tool_call(
        self,
        request: ToolCallRequest,
        handler: Callable[[ToolCallRequest], Awaitable[ToolMessage | Command[Any]]],
    ) -> ToolMessage | Command[Any]:
        binding = cast(TurnBinding, request.runtime.context)
        token = _tool_context.set(binding.tools)
        started = time.perf_counter()
        try:
            with current_stages().timed("tools"):
                message = await handler(request)
        except asyncio.CancelledError:
            # The summary line lists the tools whose result came: this one's never did (a
            # tool that hangs until TURN_TIMEOUT_S, or the turn interrupted meanwhile).
            log.info(
                "tool %s cut short after %.0f ms, its turn cancelled or past TURN_TIMEOUT_S",
                request.tool_call.get("name", "?"),
                (time.perf_counter() - started) * 1000,
            )
            raise
        finally:
            _tool_context.reset(token)
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


class _ReturnDirect(TurnMiddleware):
    """A return_direct tool ends the run only when it succeeded and its result is final (so
    failures reach the model). Only for tool sets with such a tool: the hook is a graph node
    run before every model call."""

    @hook_config(can_jump_to=["end"])
    def before_model(self, state: AgentState, runtime: Any) -> dict[str, Any] | None:
        last = state["messages"][-1] if state["messages"] else None
        if isinstance(last, ToolMessage) and ends_turn(last):
            return {"jump_to": "end"}
        return None


class _Unbound(BaseChatModel):
    """The model a shared structure is compiled with: every call gets the request's model
    instead (`TurnMiddleware`), so this one is never called."""

    @property
    def _llm_type(self) -> str:
        return "aircoach-unbound"

    def bind_tools(self, tools: Sequence[Any], *, tool_choice: Any = None, **kwargs: Any) -> Any:
        return self

    def _generate(
        self, messages: Any, stop: Any = None, run_manager: Any = None, **kw: Any
    ) -> ChatResult:
        raise RuntimeError("the agent ran without a TurnBinding: no model is bound")


def build_tool(spec: ToolSpec) -> StructuredTool:
    """A tool the structures share: its context is the calling request's (`_tool_context`)."""
    handler = load_handler(spec)

    async def run(**arguments: Any) -> tuple[str, _Result]:
        try:
            arguments = check_arguments(spec.parameters, arguments)
        except InvalidArguments as exc:  # the model reads what to fix and may call again
            log.warning("tool %s refused its arguments: %s", spec.name, exc)
            raise ToolException(f"[Tool {spec.name}: invalid arguments: {exc}]") from None
        try:
            output = await handler(_tool_context.get(), **arguments)
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


def build_structure(
    tools: Sequence[ToolSpec], *, checkpointer: BaseCheckpointSaver | None, history_limit: int
) -> CompiledStateGraph[Any, TurnBinding, Any, Any]:
    """The compiled agent for a tool set, with nothing of a request in it."""
    return_direct = frozenset(t.name for t in tools if t.return_direct)
    middleware_class = _ReturnDirect if return_direct else TurnMiddleware
    return create_agent(
        _Unbound(),
        [build_tool(spec) for spec in tools],
        middleware=[middleware_class(history_limit, return_direct)],
        context_schema=TurnBinding,
        checkpointer=checkpointer,
    )


class AgentShapes:
    """Compiled structures by (prompt version, tool set), least recently used dropped past
    `max_shapes`. Tool specs come from the prompt version's `tools.json`, so the version and
    the tools' names identify them."""

    def __init__(
        self,
        *,
        checkpointer: BaseCheckpointSaver | None,
        history_limit: int,
        max_shapes: int = MAX_SHAPES,
    ):
        self.checkpointer = checkpointer
        self.history_limit = history_limit
        self.max_shapes = max_shapes
        self._shapes: OrderedDict[
            tuple[str, tuple[str, ...]], CompiledStateGraph[Any, TurnBinding, Any, Any]
        ] = OrderedDict()
        self.builds = 0

    def __len__(self) -> int:
        return len(self._shapes)

    def get(
        self, version: str, tools: Sequence[ToolSpec]
    ) -> CompiledStateGraph[Any, TurnBinding, Any, Any]:
        key = (version, tuple(spec.name for spec in tools))
        graph = self._shapes.get(key)
        if graph is None:
            graph = build_structure(
                tools, checkpointer=self.checkpointer, history_limit=self.history_limit
            )
            self.builds += 1
            self._shapes[key] = graph
            while len(self._shapes) > self.max_shapes:
                self._shapes.popitem(last=False)
        self._shapes.move_to_end(key)
        return graph


@dataclass(frozen=True)
class TurnAgent:
    """A shared structure bound to one request: runs like the compiled graph it wraps."""

    graph: CompiledStateGraph[Any, TurnBinding, Any, Any]
    binding: TurnBinding
    labels: Mapping[str, str] = field(default_factory=dict)  # tool name -> its display label

    def astream(
        self, payload: Any, config: RunnableConfig | None = None, **kwargs: Any
    ) -> AsyncIterator[Any]:
        return self.graph.astream(payload, config, context=self.binding, **kwargs)

    async def ainvoke(self, payload: Any, config: RunnableConfig, **kwargs: Any) -> Any:
        return await self.graph.ainvoke(payload, config, context=self.binding, **kwargs)

    async def aupdate_state(self, config: RunnableConfig, values: Any, **kwargs: Any) -> Any:
        return await self.graph.aupdate_state(config, values, **kwargs)

    async def aget_state(self, config: RunnableConfig) -> Any:
        return await self.graph.aget_state(config)


def build_agent(
    *,
    model: BaseChatModel,
    tools: list[ToolSpec],
    ctx: ToolContext,
    system_prompt: str,
    checkpointer: BaseCheckpointSaver | None,
    history_limit: int,
    failover: ModelFailover | None = None,
    shapes: AgentShapes | None = None,
    version: str = "",
) -> TurnAgent:
    """The turn's agent: the structure for `tools` (from `shapes` when given, keyed by the
    prompt `version`, else built for this call) bound to this request's parts."""
    if shapes is None:
        graph = build_structure(tools, checkpointer=checkpointer, history_limit=history_limit)
    else:
        graph = shapes.get(version, tools)
    binding = TurnBinding(model, system_prompt, ctx, failover or ModelFailover())
    return TurnAgent(graph, binding, {spec.name: spec.display_label for spec in tools})
