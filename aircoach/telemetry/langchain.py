"""Model and tool spans from LangChain's callbacks, after the OpenTelemetry GenAI semantic
conventions: `chat {model}` (gen_ai.request.model, usage tokens, finish reasons, time to first
token) and `execute_tool {tool}` (the tool's name and outcome, never its arguments).

Registered process-wide with LangChain's configure hook (as `llm/failover.py` does), so every
model and tool call gets it without a change where the agent runs; it records only inside a
request (or run) whose telemetry is on, and returns at once otherwise. Imported by
`otel.OtelTelemetry.hook_langchain` once LangChain is loaded.

LangChain reports no end for a call whose task is cancelled (TURN_TIMEOUT_S, a cancel: its
`agenerate` awaits a gather that is cancelled with it), so a call still open when the span it
started under ends (its stage, `model` or `tools`, or a `task_attempt`) ends with it
(`end_runs_under`).
"""

from __future__ import annotations

import time
from collections import OrderedDict
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any
from uuid import UUID

from langchain_core.callbacks import BaseCallbackHandler
from langchain_core.messages import BaseMessage
from langchain_core.outputs import ChatGeneration, LLMResult
from langchain_core.tracers.context import register_configure_hook
from opentelemetry.trace import Span, SpanKind, StatusCode, get_current_span

from aircoach.telemetry.context import _active

# Runs whose end never came (a cancelled turn) are ended past this many open ones.
MAX_OPEN_RUNS = 256


@dataclass
class _Run:
    span: Span
    telemetry: Any  # the OtelTelemetry recording this run
    started: float
    parent: int  # the span id of the span current when the call started
    model: str = ""
    tool: str = ""
    first_token: float | None = None


class GenAICallbacks(BaseCallbackHandler):
    """One handler for the process; a run's span is parented to the span current when the
    call starts (the turn's, or a task attempt's)."""

    run_inline = True  # called on the loop, in the caller's context: no thread hop per token
    raise_error = False

    def __init__(self) -> None:
        self._runs: OrderedDict[UUID, _Run] = OrderedDict()

    def _start(self, run_id: UUID, name: str, attributes: dict[str, Any], **run: Any) -> None:
        telemetry = _active.get()
        tracer = getattr(telemetry, "tracer", None)  # only the OpenTelemetry recorder has one
        if tracer is None:
            return
        parent = get_current_span().get_span_context().span_id
        span = tracer.start_span(name, kind=SpanKind.CLIENT, attributes=attributes)
        self._runs[run_id] = _Run(span, telemetry, time.perf_counter(), parent, **run)
        while len(self._runs) > MAX_OPEN_RUNS:
            _, stale = self._runs.popitem(last=False)
            stale.span.set_attribute("error.type", "abandoned")
            stale.span.end()

    def end_runs_under(self, parent: int, error: str) -> None:
        """End, as failed with `error`, the calls still open under span `parent`, which ends."""
        for run_id in [key for key, run in self._runs.items() if run.parent == parent]:
            run = self._runs[run_id]
            if run.tool:
                self._end_tool(run_id, "error", error)
            else:
                self._fail_model(self._runs.pop(run_id), error)

    # --- models -----------------------------------------------------------------------------

    def on_chat_model_start(
        self,
        serialized: dict[str, Any],
        messages: list[list[BaseMessage]],
        *,
        run_id: UUID,
        metadata: dict[str, Any] | None = None,
        **kwargs: Any,
    ) -> None:
        meta = metadata or {}
        model = str(meta.get("ls_model_name") or "unknown")
        attributes = {
            "gen_ai.operation.name": "chat",
            "gen_ai.provider.name": str(meta.get("ls_provider") or "unknown"),
            "gen_ai.request.model": model,
        }
        self._start(run_id, f"chat {model}", attributes, model=model)

    def on_llm_new_token(self, token: Any, *, run_id: UUID, **kwargs: Any) -> None:
        run = self._runs.get(run_id)
        if run is not None and run.first_token is None:
            run.first_token = time.perf_counter() - run.started
            run.span.set_attribute("gen_ai.response.time_to_first_token", run.first_token)

    def on_llm_end(self, response: LLMResult, *, run_id: UUID, **kwargs: Any) -> None:
        run = self._runs.pop(run_id, None)
        if run is None:
            return
        span, labels = run.span, {"gen_ai.request.model": run.model}
        generation = (
            response.generations[0][0] if response.generations and response.generations[0] else None
        )
        reasons: list[str] = []
        if isinstance(generation, ChatGeneration):
            message = generation.message
            usage = getattr(message, "usage_metadata", None) or {}
            for kind in ("input", "output"):
                count = usage.get(f"{kind}_tokens")
                if isinstance(count, int):
                    span.set_attribute(f"gen_ai.usage.{kind}_tokens", count)
                    run.telemetry.tokens.record(count, {**labels, "gen_ai.token.type": kind})
            info = {**(generation.generation_info or {}), **message.response_metadata}
            if reason := info.get("finish_reason") or info.get("stop_reason"):
                reasons.append(str(reason))
            if isinstance(response_model := info.get("model_name"), str):
                span.set_attribute("gen_ai.response.model", response_model[:200])
            if getattr(message, "tool_calls", None) and not reasons:
                reasons.append("tool_calls")
        span.set_attribute("gen_ai.response.finish_reasons", reasons or ["stop"])
        run.telemetry.model_duration.record(time.perf_counter() - run.started, labels)
        span.end()

    def on_llm_error(self, error: BaseException, *, run_id: UUID, **kwargs: Any) -> None:
        run = self._runs.pop(run_id, None)
        if run is not None:
            self._fail_model(run, type(error).__qualname__)

    @staticmethod
    def _fail_model(run: _Run, error: str) -> None:
        run.span.set_attribute("error.type", error)
        run.span.set_status(StatusCode.ERROR)
        run.telemetry.model_duration.record(
            time.perf_counter() - run.started,
            {"gen_ai.request.model": run.model, "error.type": error},
        )
        run.span.end()

    # --- tools ------------------------------------------------------------------------------

    def on_tool_start(
        self, serialized: dict[str, Any], input_str: str, *, run_id: UUID, **kwargs: Any
    ) -> None:
        name = str((serialized or {}).get("name") or "tool")
        attributes = {"gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": name}
        self._start(run_id, f"execute_tool {name}", attributes, tool=name)

    def on_tool_end(self, output: Any, *, run_id: UUID, **kwargs: Any) -> None:
        # A tool's failure comes back as a ToolMessage with status "error" (handle_tool_error).
        self._end_tool(run_id, "error" if getattr(output, "status", None) == "error" else "ok")

    def on_tool_error(self, error: BaseException, *, run_id: UUID, **kwargs: Any) -> None:
        self._end_tool(run_id, "error", type(error).__qualname__)

    def _end_tool(self, run_id: UUID, outcome: str, error: str | None = None) -> None:
        run = self._runs.pop(run_id, None)
        if run is None:
            return
        run.span.set_attribute("aircoach.tool.status", outcome)
        if outcome == "error":
            run.span.set_attribute("error.type", error or "tool_error")
            run.span.set_status(StatusCode.ERROR)
        run.telemetry.tool_calls.add(1, {"gen_ai.tool.name": run.tool, "outcome": outcome})
        run.span.end()


HANDLER = GenAICallbacks()
# The hook's variable always holds the handler: it records only where telemetry is active.
_hook: ContextVar[GenAICallbacks | None] = ContextVar("aircoach_genai_spans", default=HANDLER)
register_configure_hook(_hook, inheritable=True)
