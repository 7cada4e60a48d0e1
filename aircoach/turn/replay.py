"""A stored turn sent again, for a repeated `client_message_id`: the same events a client got
the first time, built from the client data only (never a tool's `text`), without running the
model."""

from __future__ import annotations

from collections.abc import AsyncGenerator

from aircoach.logs import current_request_id
from aircoach.turn.events import AgentMessage, Done, ToolResult, TurnEvent
from aircoach.turn.records import Turn


async def replayed_events(turn: Turn) -> AsyncGenerator[TurnEvent, None]:
    """`tool_result`s, the answer in one `agent_message`, then `done` (`context_turns` is
    not stored: 0)."""
    calls = turn.tools
    for n, call in enumerate(calls):
        # Only a return_direct tool that ended the turn leaves no text after it.
        final = n == len(calls) - 1 and not turn.system and call.status == "success"
        yield ToolResult(tool_name=call.tool_name, data=call.data, final=final)
    if turn.system:
        yield AgentMessage(content=turn.system)
    yield Done(
        turn_id=turn.turn_id,
        prompt_version=turn.prompt_version,
        model=turn.model,
        context_turns=0,
        request_id=current_request_id() or "",
    )
