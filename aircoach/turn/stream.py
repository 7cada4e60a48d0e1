"""The agent's LangGraph stream as the turn's events: text deltas of the model's answer and the
results of its tool calls."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

from langchain_core.messages import AIMessageChunk, ToolMessage
from langchain_core.runnables import RunnableConfig
from langgraph.graph.state import CompiledStateGraph

from aircoach.turn.events import AgentMessage, ToolResult


async def agent_events(
    agent: CompiledStateGraph,
    query: str,
    *,
    thread_id: str,
    return_direct: frozenset[str],
) -> AsyncIterator[AgentMessage | ToolResult]:
    """Run the agent on `query` in thread `thread_id` and yield what the client sees."""
    config: RunnableConfig = {"configurable": {"thread_id": thread_id}}
    payload = {"messages": [{"role": "user", "content": query}]}
    chunk: Any  # ((message, metadata) for "messages", {node: update} for "updates")
    async for mode, chunk in agent.astream(
        payload,
        config,
        stream_mode=["messages", "updates"],
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
                yield AgentMessage(content=text)
        elif mode == "updates":
            for update in chunk.values():
                messages = update.get("messages", []) if isinstance(update, dict) else []
                for message in messages:
                    if isinstance(message, ToolMessage):
                        yield tool_result(message, return_direct)


def tool_result(message: ToolMessage, return_direct: frozenset[str]) -> ToolResult:
    """The client's view of a tool message: its data (or its error), and whether it ends the
    turn (a return_direct tool that succeeded)."""
    name = message.name or "tool"
    failed = message.status == "error"
    if failed:
        data: dict[str, Any] = {"error": message.text}
    elif isinstance(message.artifact, dict):
        data = message.artifact
    else:
        data = {"content": message.text}
    return ToolResult(tool_name=name, data=data, final=name in return_direct and not failed)
