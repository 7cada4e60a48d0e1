"""One chat turn, once prepared: run the agent, stream its events, store the turn.

`ChatTurn.events()` yields the events of the SSE contract and always records exactly one turn
before its `done`, also when the model fails or the client leaves.
"""

from __future__ import annotations

import logging
import os
import time
import uuid
from collections.abc import AsyncGenerator
from dataclasses import dataclass, field
from datetime import UTC, datetime

import anyio
from langgraph.graph.state import CompiledStateGraph

from aircoach.auth.tokens import Principal
from aircoach.errors import AppError, ModelUnavailable, PersistFailed, TurnTimeout
from aircoach.logs import current_request, current_request_id, log_fields
from aircoach.messages import DEFAULT_LANGUAGE, Language
from aircoach.models import MessageRequest, ToolCall, ToolRecord, Turn, TurnStatus
from aircoach.turn.chat_models import TurnModels
from aircoach.turn.events import AgentMessage, Done, ErrorEvent, TurnEvent
from aircoach.turn.recorder import TurnRecorder
from aircoach.turn.stream import ToolStep, agent_events

log = logging.getLogger(__name__)

FALLBACK_ANSWER = (
    "Mi dispiace, non sono riuscito a preparare una risposta questa volta. "
    "Riprova tra poco o riformula la domanda."
)


def new_turn_id() -> str:
    """Time-ordered and unique across instances: sorts like the timestamp it was made at."""
    return f"{time.time_ns():x}{os.urandom(4).hex()}"


@dataclass
class ChatTurn:
    principal: Principal
    request: MessageRequest
    agent: CompiledStateGraph
    models: TurnModels
    recorder: TurnRecorder
    prompt_version: str
    context_turns: int
    timeout_s: float  # TURN_TIMEOUT_S: the whole agent run, every model and tool call
    language: Language = DEFAULT_LANGUAGE  # of the `error` events' messages
    turn_id: str = field(default_factory=new_turn_id)
    request_id: str = field(default_factory=lambda: current_request_id() or uuid.uuid4().hex)
    answer: list[str] = field(default_factory=list)
    steps: list[ToolStep] = field(default_factory=list)
    status: TurnStatus = "ok"
    tools_used: list[str] = field(default_factory=list)
    error_codes: list[str] = field(default_factory=list)
    started: float = field(default_factory=time.monotonic)

    @property
    def model(self) -> str:
        return self.models.label

    @property
    def text(self) -> str:
        return "".join(self.answer)

    def summary(self) -> dict[str, object]:
        """The fields of the turn's summary log line: no query text, no answer, no token.
        A feature that wants its outcome in the line adds one entry here."""
        request = current_request()
        return {
            "user": self.principal.sub,
            "turn_id": self.turn_id,
            "prompt_version": self.prompt_version,
            "model": self.model,
            "tools": self.tools_used,
            "latency_ms": request.elapsed_ms() if request else _ms_since(self.started),
            "outcome": self.status,
            "errors": self.error_codes,
            "stored": self.recorder.outcome,
            "context_turns": self.context_turns,
            "stream": self.request.stream,
        }

    @property
    def tools(self) -> list[ToolCall]:
        """Every tool call of the turn, in the order the model made them."""
        return [step.call for step in sorted(self.steps, key=lambda step: step.order)]

    @property
    def tool(self) -> ToolRecord | None:
        """The last tool result the client got, as clients that predate `tools` read it."""
        if not self.steps:
            return None
        last = self.steps[-1].event
        return ToolRecord(tool_name=last.tool_name, data=last.data)

    async def events(self) -> AsyncGenerator[TurnEvent, None]:
        ended_by_tool = False
        try:
            stream = agent_events(
                self.agent, self.request.query, thread_id=self.recorder.memory_thread
            )
            deadline = anyio.current_time() + self.timeout_s
            try:
                while True:
                    # The deadline covers each wait for the agent, never our own `yield`
                    # (a cancel scope must not span a yield of this generator).
                    with anyio.move_on_after(deadline - anyio.current_time()) as budget:
                        event = await anext(stream, None)
                    if budget.cancelled_caught:
                        raise TurnTimeout()
                    if event is None:
                        break
                    if isinstance(event, ToolStep):
                        self.steps.append(event)
                        self.tools_used.append(event.event.tool_name)
                        ended_by_tool = ended_by_tool or event.event.final
                        yield event.event
                    else:
                        self.answer.append(event.content)
                        yield event
            except TurnTimeout as exc:
                self.status = "error"
                log.warning(
                    "turn %s for %r cut off after TURN_TIMEOUT_S=%s",
                    self.turn_id,
                    self.principal.sub,
                    self.timeout_s,
                )
                yield self._error(exc)
            except Exception as exc:
                self.status = "error"
                log.exception(
                    "turn %s for %r failed in the model or agent", self.turn_id, self.principal.sub
                )
                yield self._error(exc)
            if not self.text.strip() and not ended_by_tool:
                self.answer = [FALLBACK_ANSWER]
                yield AgentMessage(content=FALLBACK_ANSWER)
            if not await self.recorder.record(self._stored_turn()):
                yield self._error(PersistFailed())
            yield Done(
                turn_id=self.turn_id,
                prompt_version=self.prompt_version,
                model=self.model,
                context_turns=self.context_turns,
                request_id=self.request_id,
            )
            # After `done`, still inside the request (nothing may run once the response ends).
            await self.recorder.replay_dead_letters()
        except BaseException:
            # The client left (cancellation) or the generator was closed: keep what was said.
            if not self.recorder.attempted:
                self.status = "interrupted"
                with anyio.CancelScope(shield=True):
                    await self.recorder.record(self._stored_turn())
            raise
        finally:
            await self.models.aclose()
            log_fields(log, "turn", self.summary())

    def _error(self, exc: Exception) -> ErrorEvent:
        """The `error` event of a failure, in the request's language (any failure that is not
        ours to name is the model's: `model_unavailable`)."""
        error = exc if isinstance(exc, AppError) else ModelUnavailable("model_failed")
        self.error_codes.append(error.code)
        return ErrorEvent(code=error.code, message=error.message_in(self.language))

    def _stored_turn(self) -> Turn:
        return Turn(
            userId=self.principal.sub,
            human=self.request.query,
            system=self.text,
            tool=self.tool,
            tools=self.tools,
            timestamp=datetime.now(UTC).isoformat(),
            prompt_version=self.prompt_version,
            model=self.model,
            thread_id=self.recorder.thread_id,
            turn_id=self.turn_id,
            status=self.status,
        )


def _ms_since(started: float) -> int:
    return round((time.monotonic() - started) * 1000)
