"""Process memory of conversations: a bounded, self-correcting cache in front of the store.

The checkpointer holds at most `max_threads` threads (least recently used evicted). Before each
turn one indexed read (the user's latest stored turn id) tells whether the thread has seen
everything the store holds; if not (cold start, eviction, another instance answered), the
thread is rebuilt from the last stored turns. The store is the source of truth.
"""

from __future__ import annotations

import json
import logging
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any

from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, ToolMessage
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.graph.state import CompiledStateGraph

from aircoach.models import Turn
from aircoach.store.base import ChatStore

log = logging.getLogger(__name__)


@dataclass
class _ThreadMark:
    last_turn_id: str | None
    turns: int


def messages_from_turns(turns: list[Turn]) -> list[BaseMessage]:
    """Rebuild a conversation from stored turns, tool results included."""
    messages: list[BaseMessage] = []
    for turn in turns:
        messages.append(HumanMessage(turn.human, id=f"{turn.turn_id}-h"))
        if turn.tool is not None:
            call_id = f"{turn.turn_id}-t"
            messages.append(
                AIMessage(
                    "",
                    id=f"{turn.turn_id}-c",
                    tool_calls=[{"name": turn.tool.tool_name, "args": {}, "id": call_id}],
                )
            )
            messages.append(
                ToolMessage(
                    json.dumps(turn.tool.data, ensure_ascii=False),
                    tool_call_id=call_id,
                    name=turn.tool.tool_name,
                    artifact=turn.tool.data,
                    id=f"{turn.turn_id}-r",
                )
            )
        if turn.system:
            messages.append(AIMessage(turn.system, id=f"{turn.turn_id}-a"))
    return messages


class Memory:
    def __init__(self, *, max_threads: int, reseed_turns: int):
        self.checkpointer = InMemorySaver()
        self.max_threads = max_threads
        self.reseed_turns = reseed_turns
        self._threads: OrderedDict[str, _ThreadMark] = OrderedDict()
        self.reseeds = 0

    def __len__(self) -> int:
        return len(self._threads)

    @staticmethod
    def config(thread_id: str) -> dict[str, Any]:
        return {"configurable": {"thread_id": thread_id}}

    async def ensure_thread(
        self, agent: CompiledStateGraph, thread_id: str, user_id: str, store: ChatStore
    ) -> int:
        """Make the thread hold the user's stored history; returns how many turns it holds.
        Raises `StoreUnavailable` when the store cannot be read (before anything streams)."""
        latest = await store.latest_turn_id(user_id)
        mark = self._threads.get(thread_id)
        if mark is not None and mark.last_turn_id == latest:
            self._threads.move_to_end(thread_id)
            return mark.turns
        turns = await store.recent_turns(user_id, self.reseed_turns) if latest else []
        await self.checkpointer.adelete_thread(thread_id)
        if turns:
            await agent.aupdate_state(
                self.config(thread_id), {"messages": messages_from_turns(turns)}, as_node="model"
            )
            self.reseeds += 1
            log.info("thread %s reseeded from %d stored turns", thread_id, len(turns))
        self._remember(thread_id, _ThreadMark(latest, len(turns)))
        return len(turns)

    def record_turn(self, thread_id: str, turn_id: str) -> None:
        """The thread has now seen the turn just stored."""
        mark = self._threads.get(thread_id)
        if mark is not None:
            mark.last_turn_id, mark.turns = turn_id, mark.turns + 1

    def forget(self, thread_id: str) -> None:
        """Drop a thread whose state can no longer be trusted (a turn failed to persist)."""
        if self._threads.pop(thread_id, None) is not None:
            self.checkpointer.delete_thread(thread_id)

    def _remember(self, thread_id: str, mark: _ThreadMark) -> None:
        self._threads[thread_id] = mark
        self._threads.move_to_end(thread_id)
        while len(self._threads) > self.max_threads:
            evicted, _ = self._threads.popitem(last=False)
            self.checkpointer.delete_thread(evicted)

    def checkpointed_threads(self) -> int:
        return len(self.checkpointer.storage)
