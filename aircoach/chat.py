"""One chat turn: prepare (may fail before streaming), stream events, store the turn.

`prepare_turn` does everything that can fail with an HTTP status (prompt, history); the
`ChatTurn.events()` generator then yields the SSE events of DESIGN.md and always stores
exactly one turn before its `done`, also when the model fails or the client leaves.
"""

from __future__ import annotations

import hashlib
import logging
import os
import time
from collections.abc import AsyncGenerator, AsyncIterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import anyio
from langchain_core.messages import AIMessageChunk, ToolMessage
from langchain_core.runnables import RunnableConfig
from langgraph.graph.state import CompiledStateGraph

from aircoach.agent import build_agent
from aircoach.auth import Principal
from aircoach.errors import AppError, StoreUnavailable
from aircoach.failover import ModelFailover
from aircoach.llm import aclose_model, model_label, warm_up
from aircoach.models import MessageRequest, ToolRecord, Turn, TurnStatus
from aircoach.prompts import PromptSnapshot
from aircoach.runtime import Runtime
from aircoach.tools import ToolContext, ToolSpec
from aircoach.userdata import user_data_section

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
    runtime: Runtime
    principal: Principal
    request: MessageRequest
    agent: CompiledStateGraph
    thread_id: str
    memory_thread: str
    prompt_version: str
    model: str
    tools: dict[str, ToolSpec]
    context_turns: int
    failover: ModelFailover = field(default_factory=ModelFailover)
    clients: list[Any] = field(default_factory=list)  # models to close when the turn ends
    turn_id: str = field(default_factory=new_turn_id)
    answer: list[str] = field(default_factory=list)
    tool: ToolRecord | None = None
    status: TurnStatus = "ok"
    stored: bool = False

    async def events(self) -> AsyncGenerator[dict[str, Any], None]:
        direct_result = False
        try:
            try:
                async for event in self._agent_events():
                    if event["type"] == "agent_message":
                        self.answer.append(event["content"])
                    elif event["type"] == "tool_result":
                        direct_result = direct_result or event["final"]
                    yield event
            except Exception as exc:
                self.status = "error"
                log.exception(
                    "turn %s for %s failed in the model or agent", self.turn_id, self.principal.sub
                )
                code = exc.code if isinstance(exc, AppError) else "model_unavailable"
                yield {"type": "error", "code": code, "message": _user_message(exc)}
            self.model = self.failover.answered_by or self.model
            if not "".join(self.answer).strip() and not direct_result:
                self.answer = [FALLBACK_ANSWER]
                yield {"type": "agent_message", "content": FALLBACK_ANSWER}
            persist_error = await self._persist()
            if persist_error is not None:
                yield persist_error
            yield {
                "type": "done",
                "turn_id": self.turn_id,
                "prompt_version": self.prompt_version,
                "model": self.model,
                "context_turns": self.context_turns,
            }
        except BaseException:
            # The client left (cancellation) or the generator was closed: keep what was said.
            if not self.stored:
                self.status = "interrupted"
                self.model = self.failover.answered_by or self.model
                with anyio.CancelScope(shield=True):
                    await self._persist()
            raise
        finally:
            with anyio.CancelScope(shield=True), anyio.move_on_after(2):
                for model in self.clients:
                    await aclose_model(model)

    async def _agent_events(self) -> AsyncIterator[dict[str, Any]]:
        config: RunnableConfig = {"configurable": {"thread_id": self.memory_thread}}
        payload = {"messages": [{"role": "user", "content": self.request.query}]}
        chunk: Any  # ((message, metadata) for "messages", {node: update} for "updates")
        async for mode, chunk in self.agent.astream(
            # One checkpoint per turn, at its end: the store, not the checkpointer, is what
            # must survive a crash, so intermediate steps need not be saved.
            payload,
            config,
            stream_mode=["messages", "updates"],
            durability="exit",
        ):
            if mode == "messages":
                message, meta = chunk
                is_answer = (
                    isinstance(message, AIMessageChunk) and meta.get("langgraph_node") == "model"
                )
                if is_answer and (text := message.text):
                    yield {"type": "agent_message", "content": text}
            elif mode == "updates":
                for update in chunk.values():
                    messages = update.get("messages", []) if isinstance(update, dict) else []
                    for message in messages:
                        if isinstance(message, ToolMessage):
                            yield self._tool_event(message)

    def _tool_event(self, message: ToolMessage) -> dict[str, Any]:
        name = message.name or "tool"
        failed = message.status == "error"
        if failed:
            data: dict[str, Any] = {"error": message.text}
        elif isinstance(message.artifact, dict):
            data = message.artifact
        else:
            data = {"content": message.text}
        spec = self.tools.get(name)
        final = bool(spec and spec.return_direct and not failed)
        self.tool = ToolRecord(tool_name=name, data=data)
        return {"type": "tool_result", "tool_name": name, "data": data, "final": final}

    async def _persist(self) -> dict[str, Any] | None:
        """Store the turn; on failure, an `error` event for the stream (nothing lost silently)."""
        turn = Turn(
            userId=self.principal.sub,
            human=self.request.query,
            system="".join(self.answer),
            tool=self.tool,
            timestamp=datetime.now(UTC).isoformat(),
            prompt_version=self.prompt_version,
            model=self.model,
            thread_id=self.thread_id,
            turn_id=self.turn_id,
            status=self.status,
        )
        memory = self.runtime.memory
        try:
            await self.runtime.chats.append_turn(turn)
        except Exception:
            digest = hashlib.sha256(turn.model_dump_json().encode()).hexdigest()[:16]
            log.exception(
                "persist_failed turn_id=%s user=%s content_sha256=%s",
                self.turn_id,
                self.principal.sub,
                digest,
            )
            memory.forget(self.thread_id)
            return {
                "type": "error",
                "code": "persist_failed",
                "message": "Your answer could not be saved to your history.",
            }
        finally:
            self.stored = True
            if self.memory_thread != self.thread_id:
                await memory.checkpointer.adelete_thread(self.memory_thread)
        if self.request.chat_history:
            if self.status == "ok":
                memory.record_turn(self.thread_id, self.turn_id)
            else:
                # A failed or cut-short run leaves a partial thread; the store has the turn.
                memory.forget(self.thread_id)
        return None


def _user_message(exc: Exception) -> str:
    if isinstance(exc, AppError):
        return exc.message
    return "The assistant could not complete this answer; please try again."


async def prepare_turn(
    runtime: Runtime,
    principal: Principal,
    request: MessageRequest,
    snapshot: PromptSnapshot | None = None,
) -> ChatTurn:
    """Everything that can fail with a status code happens here, before the stream starts.
    `snapshot`: the one the route already validated the tool switches against."""
    settings = runtime.settings
    snapshot = snapshot or await runtime.prompts.current()
    registry = runtime.tools_for(snapshot)
    enabled = registry.enabled(request.tools)
    log.info(registry.log_line(request.tools))
    system_prompt = registry.system_prompt(snapshot.text, enabled)
    if request.user_data:
        # Never fails the turn; the version (and thread) stays the base prompt's.
        section = await user_data_section(
            runtime.user_data,
            principal.sub,
            fields=settings.user_data_fields,
            timeout_s=settings.user_data_timeout_s,
        )
        if section:
            system_prompt = f"{system_prompt}\n\n{section}"
    ctx = ToolContext(settings=settings, quiz=await runtime.quiz_store(), user_id=principal.sub)
    await warm_up(settings)
    model = runtime.build_model(enabled)
    fallback = runtime.build_fallback_model(enabled)
    failover = ModelFailover([fallback] if fallback is not None else [])
    agent = build_agent(
        model=model,
        tools=enabled,
        ctx=ctx,
        system_prompt=system_prompt,
        checkpointer=runtime.memory.checkpointer,
        history_limit=settings.history_limit,
        failover=failover,
    )
    thread_id = f"{principal.sub}:v{snapshot.version}"
    turn_id = new_turn_id()
    if request.chat_history:
        try:
            held = await runtime.memory.ensure_thread(
                agent, thread_id, principal.sub, runtime.chats
            )
        except StoreUnavailable:
            raise
        except Exception as exc:
            raise StoreUnavailable() from exc
        memory_thread, context_turns = thread_id, min(held, settings.history_limit)
    else:
        memory_thread, context_turns = f"{thread_id}:once:{turn_id}", 0
    return ChatTurn(
        runtime=runtime,
        principal=principal,
        request=request,
        agent=agent,
        thread_id=thread_id,
        memory_thread=memory_thread,
        prompt_version=snapshot.version,
        model=model_label(model),
        tools={spec.name: spec for spec in enabled},
        context_turns=context_turns,
        failover=failover,
        clients=[m for m in (model, fallback) if m is not None],
        turn_id=turn_id,
    )
