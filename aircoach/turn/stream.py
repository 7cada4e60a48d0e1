"""The agent's LangGraph stream as the turn's events: text deltas of the model's answer, and
each tool call with its result (for the client) and its record (for the store)."""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass
from typing import Any

from langchain_core.messages import AIMessage, AIMessageChunk, HumanMessage, ToolMessage
from langchain_core.runnables import RunnableConfig

from aircoach import messages
from aircoach.messages import DEFAULT_LANGUAGE, Language
from aircoach.turn.agent import TurnAgent, ends_turn
from aircoach.turn.events import AgentMessage, ToolResult
from aircoach.turn.records import ToolCall, question_message_id


@dataclass(frozen=True)
class ToolStep:
    """One tool call of the turn: `event` is what the client gets, `call` what the store
    keeps (with the text the model was given, which the client never sees). Results arrive
    as tools finish; `order` (model call, place among its tool calls) is the order the
    model made the calls in, which is the order the thread holds them in."""

    event: ToolResult
    call: ToolCall
    order: tuple[int, int]


@dataclass(frozen=True)
class _Asked:
    name: str
    arguments: dict[str, Any]
    step: int
    position: int
    offset: int


async def agent_events(
    agent: TurnAgent,
    query: str,
    *,
    thread_id: str,
    turn_id: str,
    stream: bool = True,
    language: Language = DEFAULT_LANGUAGE,
) -> AsyncIterator[AgentMessage | ToolStep]:
    """Run the agent on `query` in thread `thread_id` and yield what the client sees: with
    `stream`, the answer as it is written; without (a JSON turn, read only at its end), each
    model call's text once the call has ended. The question keeps turn `turn_id`'s id in the
    thread, as in a thread rebuilt from the store. The model streams from its provider either
    way (the configured clients are built with `streaming=True`): what `stream=False` saves
    is LangGraph's per-chunk callback, queue and hand-off, and ours. A failed tool's result
    says so to the student in `language`."""
    config: RunnableConfig = {"configurable": {"thread_id": thread_id}}
    payload = {"messages": [HumanMessage(query, id=question_message_id(turn_id))]}
    written = 0  # characters of the answer streamed so far
    steps = 0  # model calls that have ended
    asked: dict[str, _Asked] = {}  # tool call id -> the call, until its result arrives
    chunk: Any  # ((message, metadata) for "messages", {node: update} for "updates")
    async for mode, chunk in agent.astream(
        payload,
        config,
        stream_mode=["messages", "updates"] if stream else ["updates"],
        # One checkpoint per turn, at its end: the store, not the checkpointer, is what must
        # survive a crash, so intermediate steps need not be saved.
        durability="exit",
    ):
        if mode == "messages":
            message, meta = chunk
            is_answer = (
                isinstance(message, AIMessageChunk) and meta.get("langgraph_node") == "model"
            )
            if is_answer and (text := message.text):
                written += len(text)
                yield AgentMessage(content=text)
            continue
        for update in chunk.values():
            messages = update.get("messages", []) if isinstance(update, dict) else []
            for message in messages:
                if isinstance(message, AIMessage):
                    if not stream and (text := message.text):
                        written += len(text)
                        yield AgentMessage(content=text)
                    # The model call ended: its text is answer[:written] since the last one.
                    for position, call in enumerate(message.tool_calls):
                        if call_id := call.get("id"):
                            asked[call_id] = _Asked(
                                call["name"], call["args"], steps, position, written
                            )
                    steps += 1
                elif isinstance(message, ToolMessage):
                    asked_for = asked.pop(message.tool_call_id, None)
                    yield tool_step(message, asked_for, steps, agent.labels, language)


def tool_step(
    message: ToolMessage,
    asked: _Asked | None,
    steps: int,
    labels: Mapping[str, str] | None = None,
    language: Language = DEFAULT_LANGUAGE,
) -> ToolStep:
    """The client's view of a tool message (its data, or its error, and whether it ends the
    turn) and the store's record of the call. A failure's `error` is the text the model
    reads, in English; `messaggio` says to the student, in `language`, which tool failed
    (by its `labels` entry, the name the tool list shows)."""
    name = message.name or (asked.name if asked else "tool")
    failed = message.status == "error"
    if isinstance(message.artifact, dict):
        data: dict[str, Any] = message.artifact
    elif failed:
        data = {"error": message.text}
    else:
        data = {"content": message.text}
    if failed and "messaggio" not in data:
        label = (labels or {}).get(name) or name
        data = {**data, "messaggio": messages.text("tool_failed", language, label=label)}
    arguments = asked.arguments if asked else {}
    event = ToolResult(tool_name=name, arguments=arguments, data=data, final=ends_turn(message))
    step = asked.step if asked else max(steps - 1, 0)
    call = ToolCall(
        tool_name=name,
        call_id=message.tool_call_id,
        arguments=arguments,
        text=message.text,
        data=data,
        status="error" if failed else "success",
        step=step,
        offset=asked.offset if asked else 0,
    )
    return ToolStep(event, call, (step, asked.position if asked else 0))
