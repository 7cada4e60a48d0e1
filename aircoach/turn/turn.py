"""One chat turn, once prepared: run the agent, stream its events, store the turn.

`ChatTurn.events()` yields the events of the SSE contract and always records exactly one turn
before its `done`, also when the model fails or the client leaves.
"""

from __future__ import annotations

import asyncio
import logging
import os
import time
import uuid
from collections.abc import AsyncGenerator, AsyncIterator, Awaitable, Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Literal, Protocol

import anyio
from langchain_core.messages import HumanMessage, SystemMessage

from aircoach.auth.tokens import Principal
from aircoach.errors import AppError, ModelUnavailable, PersistFailed, TurnTimeout
from aircoach.grounding.context import TurnGrounding
from aircoach.grounding.guard import ContextIndex, caveat
from aircoach.grounding.models import GroundingResult, Retrieved
from aircoach.grounding.retrieval import log_entries, retrieved
from aircoach.logs import current_request, current_request_id, current_stages, log_fields
from aircoach.messages import DEFAULT_LANGUAGE, Language
from aircoach.stages import Stages
from aircoach.turn.agent import TurnAgent, window
from aircoach.turn.answer import FALLBACK_ANSWER
from aircoach.turn.chat_models import TurnModels
from aircoach.turn.events import (
    AgentMessage,
    Done,
    DoneStatus,
    ErrorEvent,
    Grounding,
    TurnEvent,
)
from aircoach.turn.providers import model_label
from aircoach.turn.recorder import TurnRecorder
from aircoach.turn.records import ToolCall, ToolRecord, Turn, TurnStatus
from aircoach.turn.stream import ToolStep, agent_events

log = logging.getLogger(__name__)


class TurnCancelled(Exception):
    """The turn was stopped on request while it waited for a model, a tool or a search."""


class TurnRequest(Protocol):
    """What a turn reads of the client's message (the HTTP body `MessageRequest` is one)."""

    @property
    def query(self) -> str: ...

    @property
    def chat_history(self) -> bool: ...

    @property
    def user_data(self) -> bool: ...

    @property
    def stream(self) -> bool: ...

    @property
    def tools(self) -> Mapping[str, bool] | None: ...

    @property
    def stile(self) -> Literal["breve", "dettagliato"] | None: ...

    @property
    def conversation_id(self) -> str | None: ...


def new_turn_id() -> str:
    """Time-ordered and unique across instances: sorts like the timestamp it was made at."""
    return f"{time.time_ns():x}{os.urandom(4).hex()}"


@dataclass
class ChatTurn:
    principal: Principal
    request: TurnRequest
    agent: TurnAgent
    models: TurnModels
    recorder: TurnRecorder
    prompt_version: str
    context_turns: int
    timeout_s: float  # TURN_TIMEOUT_S: the whole agent run, every model and tool call
    language: Language = DEFAULT_LANGUAGE  # of the `error` events' and tool failures' messages
    turn_id: str = field(default_factory=new_turn_id)
    request_id: str = field(default_factory=lambda: current_request_id() or uuid.uuid4().hex)
    answer: list[str] = field(default_factory=list)
    steps: list[ToolStep] = field(default_factory=list)
    status: TurnStatus = "ok"
    tools_used: list[str] = field(default_factory=list)
    error_codes: list[str] = field(default_factory=list)  # the `error` events' codes
    error_reasons: list[str] = field(default_factory=list)  # their message keys, one per code
    started: float = field(default_factory=time.monotonic)
    grounding: TurnGrounding | None = None  # None: no citation guard (a test's bare turn)
    checked: GroundingResult | None = None  # the guard's verdict on the answer
    regenerated: bool = False  # the answer is the second one, written after a correction
    withheld: bool = False  # unverified sentences were left out (GROUNDING_POLICY=withhold)
    caveat: str = ""  # the note sent after the answer when a citation is unverified
    stages: Stages = field(default_factory=current_stages)
    cancelled: bool = False  # someone stopped it (`cancel`): stored `interrupted`
    _waiting: anyio.CancelScope | None = field(default=None, repr=False)  # see `_wait`
    _timer: asyncio.Timeout | None = field(default=None, repr=False)  # see `_next_event`
    # Awaited first once the turn runs, which is once it holds its thread (a request refused as
    # busy never gets here): the memory's write, or a request to forget and the coach's reply
    # to it, which is then the answer and the agent is not run.
    begin: Callable[[], Awaitable[str | None]] | None = None

    def cancel(self) -> None:
        """Stop the turn (a cancel from any instance, a newer message that interrupts it, a
        delete of its conversation): its current wait on the agent, the citation guard or the
        rewrite ends now, and the turn stores what it has."""
        self.cancelled = True
        if self._waiting is not None:
            self._waiting.cancel()
        if self._timer is not None and not self._timer.expired():
            # A time past: it expires at the loop's next turn. (One that expired already
            # refuses a new time; the wait then ends as cancelled all the same.)
            self._timer.reschedule(0)

    @property
    def done_status(self) -> DoneStatus:
        return "cancelled" if self.cancelled else self.status

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
            "reasons": self.error_reasons,
            "stored": self.recorder.outcome,
            "context_turns": self.context_turns,
            "stream": self.request.stream,
            "followup": bool(self.grounding and self.grounding.followup),
            "retrieved": log_entries(self.retrieved),
            "cited": [c.key for c in self.checked.citations] if self.checked else [],
            "unverified": len(self.checked.unverified) if self.checked else 0,
            "regenerated": self.regenerated,
            **self.stages.fields(),
        }

    @property
    def retrieved(self) -> list[Retrieved]:
        """What each tool returned (ids or titles), beside what the answer cited."""
        return retrieved(self.tools)

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
            reply = await self.begin() if self.begin is not None else None
            stream = (
                _said(reply)
                if reply is not None
                else agent_events(
                    self.agent,
                    self.request.query,
                    thread_id=self.recorder.memory_thread,
                    turn_id=self.turn_id,
                    stream=self.request.stream,
                    language=self.language,
                )
            )
            deadline = anyio.current_time() + self.timeout_s
            try:
                while True:
                    # The deadline covers each wait for the agent, never our own `yield`
                    # (a timeout must not span a yield of this generator).
                    waited = time.perf_counter()
                    try:
                        event = await self._next_event(stream, deadline)
                    finally:
                        self.stages.add("agent_run", time.perf_counter() - waited)
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
            except TurnCancelled:
                self._interrupted("the agent")
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
            if not self.text.strip() and not ended_by_tool and not self.cancelled:
                self.answer = [FALLBACK_ANSWER]
                yield AgentMessage(content=FALLBACK_ANSWER)
            async for verdict in self._grounded(deadline):
                yield verdict
            if not await self.recorder.record(self._stored_turn()):
                yield self._error(PersistFailed())
            elif (self.regenerated or self.withheld) and self.recorder.joins_history:
                # The thread holds the first answer, the store the second: reseed from the store.
                self.recorder.memory.forget(self.recorder.thread_id)
            yield Done(
                status=self.done_status,
                turn_id=self.turn_id,
                prompt_version=self.prompt_version,
                model=self.model,
                context_turns=self.context_turns,
                request_id=self.request_id,
            )
            # After `done`, still inside the request (nothing may run once the response ends).
            await self.recorder.replay_dead_letters()
        except BaseException:
            # The client left (cancellation) or the generator was closed: keep what was said,
            # as a turn cut short unless it had failed already (it is stored as the failure
            # it was, with its error's code).
            if not self.recorder.attempted:
                if self.status != "error":
                    self.status = "interrupted"
                with anyio.CancelScope(shield=True):
                    await self.recorder.record(self._stored_turn())
            raise
        finally:
            await self.models.aclose()
            log_fields(log, "turn", self.summary())

    async def _next_event(
        self, stream: AsyncIterator[AgentMessage | ToolStep], deadline: float
    ) -> AgentMessage | ToolStep | None:
        """The agent's next event (None at its end), waited for as `_wait` waits: until
        `deadline` (`TurnTimeout`), or `TurnCancelled` at once when the turn is cancelled.
        This wait comes once per streamed chunk: it uses asyncio's own timeout (on the loop's
        clock, anyio's `current_time` on asyncio), as an anyio cancel scope in its place cost
        0.2 ms more CPU in a 20-chunk turn (docs/performance.md)."""
        if self.cancelled:
            raise TurnCancelled()
        timer = asyncio.timeout_at(deadline)
        try:
            async with timer:
                self._timer = timer
                try:
                    return await anext(stream, None)
                finally:
                    self._timer = None
        except TimeoutError:
            if not timer.expired():
                raise  # the agent's own (a tool's, a client's): a failure of the agent
            raise TurnCancelled() if self.cancelled else TurnTimeout() from None

    @contextmanager
    def _wait(self, deadline: float) -> Iterator[anyio.CancelScope]:
        """One wait of the turn on a model, a tool or a search: it ends at `deadline` (the
        caller reads the scope's `cancelled_caught`), or at once with `TurnCancelled` when the
        turn is cancelled (`cancel`), also before it began. Never around a `yield` of
        `events()`: a cancel scope must not span one."""
        with anyio.CancelScope(deadline=deadline) as scope:
            self._waiting = scope
            if self.cancelled:
                scope.cancel()
            try:
                yield scope
            finally:
                self._waiting = None
        if scope.cancelled_caught and self.cancelled:
            raise TurnCancelled()

    def _interrupted(self, phase: str) -> None:
        self.status = "interrupted"
        log.info("turn %s for %r cancelled in %s", self.turn_id, self.principal.sub, phase)

    def _error(self, exc: Exception) -> ErrorEvent:
        """The `error` event of a failure, in the request's language (any failure that is not
        ours to name is the model's: `model_unavailable`). The summary line keeps its message
        key beside the code: the reason an operator reads (`turn_timeout`: our deadline cut
        the turn; `model_unavailable`, `model_failed`: the provider or the agent failed)."""
        error = exc if isinstance(exc, AppError) else ModelUnavailable("model_failed")
        self.error_codes.append(error.code)
        self.error_reasons.append(error.key)
        return ErrorEvent(code=error.code, message=error.message_in(self.language))

    async def _grounded(self, deadline: float) -> AsyncGenerator[TurnEvent, None]:
        """The guard's verdict on the answer (`grounding`) and, when a citation is not in the
        context, the caveat. A JSON answer (`stream: false`) is first rewritten once with a
        correction. A failure of the guard never fails the turn.

        The guard runs within the turn's deadline (`TURN_TIMEOUT_S`): past it, the turn ends
        as when the agent runs past it (`error`, the answer kept, no verdict). A rewrite, and
        the check of the rewritten answer, that would end past it leave the first answer and
        its verdict. A cancel ends the turn `interrupted` with the answer it had (the first
        one, during a rewrite) and no verdict."""
        guard = self.grounding
        if guard is None or self.status != "ok" or not self.text.strip():
            return
        try:
            with self.stages.timed("grounding"):
                with self._wait(deadline) as budget:
                    result, context = await guard.check(self.text, self.tools)
                if budget.cancelled_caught:
                    raise TurnTimeout()
                if result and result.unverified and guard.regenerate and not self.request.stream:
                    with self._wait(deadline):
                        rewritten = await self._rewrite(guard, result, context)
                        if rewritten:
                            checked = await guard.check(rewritten, self.tools)
                            self.answer, self.regenerated = [rewritten], True
                            result, context = checked
                if result and result.unverified and guard.withhold and not self.request.stream:
                    with self._wait(deadline):
                        kept, result = await guard.withheld(self.text, result, self.tools)
                        self.answer, self.withheld = [kept], True
        except TurnCancelled:
            self._interrupted("the citation guard")
            return
        except TurnTimeout as exc:
            self.status = "error"
            log.warning(
                "turn %s for %r: the citation guard cut off after TURN_TIMEOUT_S=%s",
                self.turn_id,
                self.principal.sub,
                self.timeout_s,
            )
            yield self._error(exc)
            return
        except Exception:
            log.exception("turn %s: the citation guard failed; answer sent unchecked", self.turn_id)
            return
        self.checked = result
        if result is None:
            return
        yield Grounding(**result.model_dump())
        if result.unverified and guard.caveat:
            self.caveat = caveat(result)
            yield AgentMessage(content=self.caveat)

    async def _rewrite(
        self, guard: TurnGrounding, result: GroundingResult, context: ContextIndex
    ) -> str:
        """The model's second answer: what it was shown, its first answer and the correction."""
        state = await self.agent.aget_state(
            {"configurable": {"thread_id": self.recorder.memory_thread}}
        )
        messages = window(list(state.values.get("messages", [])), guard.history_limit)
        prompt = [
            SystemMessage(guard.prompt),
            *messages,
            HumanMessage(guard.correction(result, context)),
        ]
        # The model that wrote the first answer (the fallback one, if the primary failed).
        model = next(
            (m for m in self.models.models if model_label(m) == self.model), self.models.primary
        )
        parts: list[str] = []
        try:
            # Streamed, as the agent calls the model (a provider may answer only streams).
            async for chunk in model.astream(prompt):
                parts.append(chunk.text)
        except Exception:
            log.warning(
                "turn %s: the correction call failed; first answer kept",
                self.turn_id,
                exc_info=True,
            )
            return ""
        return "".join(parts).strip()

    def _stored_turn(self) -> Turn:
        return Turn(
            userId=self.principal.sub,
            human=self.request.query,
            system=self.text,
            tool=self.tool,
            # A second answer was written after every tool call: none of it came before one.
            tools=[t.model_copy(update={"offset": 0}) for t in self.tools]
            if self.regenerated
            else self.tools,
            grounding=self.checked,
            retrieved=self.retrieved,
            timestamp=datetime.now(UTC).isoformat(),
            prompt_version=self.prompt_version,
            model=self.model,
            thread_id=self.recorder.thread_id,
            turn_id=self.turn_id,
            conversation_id=self.request.conversation_id,
            status=self.status,
            # The first failure is the turn's; the error codes are a fixed vocabulary (one per
            # `AppError` class), never a message that could hold an input or a secret.
            error_code=self.error_codes[0] if self.status == "error" and self.error_codes else None,
        )


async def _said(reply: str) -> AsyncGenerator[AgentMessage, None]:
    yield AgentMessage(content=reply)


def _ms_since(started: float) -> int:
    return round((time.monotonic() - started) * 1000)
