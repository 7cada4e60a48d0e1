"""Process memory of conversations: a bounded, self-correcting cache in front of the store.

The checkpointer holds at most `max_threads` threads (least recently used evicted). Before each
turn one indexed read (the ids of the user's two newest stored turns) tells whether the thread has
seen everything the store holds; if not (cold start, eviction, another instance answered), the
thread is rebuilt from the last stored turns. The store is the source of truth.

Each thread keeps only its latest checkpoint (`PrunableSaver`), and a thread that grew past
twice the reseed window is rebuilt from the store too, so a warm conversation stays small.
"""

from __future__ import annotations

import itertools
import json
import logging
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, ToolMessage
from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.memory import InMemorySaver

from aircoach.turn.ports import ChatStore
from aircoach.turn.records import ToolCall, Turn, question_message_id

if TYPE_CHECKING:
    from aircoach.turn.agent import TurnAgent

log = logging.getLogger(__name__)

# What a turn stored before `tools` existed gives the model of its tool's data (it kept only
# the client data, which for an HTTP tool may be megabytes).
LEGACY_TOOL_TEXT_CHARS = 4000


@dataclass
class _ThreadMark:
    """What the thread reflects: the ids of the user's two newest stored turns (newest first)
    and how many turns it holds. Two ids, not one: if another instance stores a turn while this
    one answers, this instance's own turn becomes the newest and would hide the other; the
    second id exposes it."""

    seen: tuple[str, ...]
    turns: int


def messages_from_turns(turns: list[Turn]) -> list[BaseMessage]:
    """Rebuild a conversation from stored turns into the messages the warm thread held: per
    turn, the human message; for each model call that used tools, the AI message with its
    text and tool calls (ids, arguments) and then each tool message with the text the model
    was given; and the answer's last part. Turns stored before `tools` existed are rebuilt
    from their single `tool` (its data as capped JSON: they kept no model text)."""
    messages: list[BaseMessage] = []
    for turn in turns:
        messages.append(HumanMessage(turn.human, id=question_message_id(turn.turn_id)))
        calls = turn.tools or _legacy_calls(turn)
        written = 0
        for step, group in itertools.groupby(calls, key=lambda c: c.step):
            made = list(group)
            offset = max(written, made[0].offset)
            messages.append(
                AIMessage(
                    turn.system[written:offset],
                    id=f"{turn.turn_id}-c{step}",
                    tool_calls=[
                        {"name": c.tool_name, "args": c.arguments, "id": c.call_id} for c in made
                    ],
                )
            )
            written = offset
            messages.extend(
                ToolMessage(
                    c.text,
                    tool_call_id=c.call_id,
                    name=c.tool_name,
                    status=c.status,
                    artifact=c.data,
                    id=f"{turn.turn_id}-r{step}-{i}",
                )
                for i, c in enumerate(made)
            )
        if rest := turn.system[written:]:
            messages.append(AIMessage(rest, id=f"{turn.turn_id}-a"))
    return messages


def _legacy_calls(turn: Turn) -> list[ToolCall]:
    if turn.tool is None:
        return []
    text = json.dumps(turn.tool.data, ensure_ascii=False)
    if len(text) > LEGACY_TOOL_TEXT_CHARS:
        text = text[: LEGACY_TOOL_TEXT_CHARS - 1] + "…"
    return [
        ToolCall(
            tool_name=turn.tool.tool_name,
            call_id=f"{turn.turn_id}-t",
            text=text,
            data=turn.tool.data,
        )
    ]


class PrunableSaver(InMemorySaver):
    """`InMemorySaver` with `prune`, so a thread keeps one checkpoint instead of all of them.

    InMemorySaver keeps every checkpoint of a thread, and each step of a turn stores the whole
    message list again: a warm conversation would grow quadratically. `keep_latest` drops all
    but the newest checkpoint of each namespace, with the blobs and pending writes only they
    referenced. Safe for the agent's state: its `messages` channel is a plain aggregate (every
    checkpoint holds the whole value), not a `DeltaChannel` whose value lives in its ancestors.
    """

    def prune(self, thread_ids: Sequence[str], *, strategy: str = "keep_latest") -> None:
        if strategy == "delete":
            for thread_id in thread_ids:
                self.delete_thread(thread_id)
            return
        if strategy != "keep_latest":
            raise ValueError(f"unknown prune strategy {strategy!r}; valid: keep_latest, delete")
        for thread_id in thread_ids:
            for namespace, checkpoints in self.storage.get(thread_id, {}).items():
                if len(checkpoints) > 1:
                    self._keep_latest(thread_id, namespace, checkpoints)

    async def aprune(self, thread_ids: Sequence[str], *, strategy: str = "keep_latest") -> None:
        self.prune(thread_ids, strategy=strategy)

    def _keep_latest(self, thread_id: str, namespace: str, checkpoints: dict[str, Any]) -> None:
        # Checkpoint ids are time-ordered (uuid6), as InMemorySaver.get_tuple relies on too.
        latest_id = max(checkpoints)
        saved, metadata, _parent = checkpoints[latest_id]
        kept = set(self.serde.loads_typed(saved)["channel_versions"].items())
        for checkpoint_id in [c for c in checkpoints if c != latest_id]:
            old = self.serde.loads_typed(checkpoints.pop(checkpoint_id)[0])
            # Every blob was written with the versions of the checkpoint that introduced it.
            for channel, version in old["channel_versions"].items():
                if (channel, version) not in kept:
                    self.blobs.pop((thread_id, namespace, channel, version), None)
            self.writes.pop((thread_id, namespace, checkpoint_id), None)
        # The parent is gone: do not leave a reference to it.
        checkpoints[latest_id] = (saved, metadata, None)

    def delete_thread(self, thread_id: str) -> None:
        # InMemorySaver scans every blob and write of every thread to find this thread's;
        # its checkpoints name them all (see `_keep_latest`), so look only there.
        for namespace, checkpoints in self.storage.pop(thread_id, {}).items():
            for checkpoint_id, (saved, _metadata, _parent) in checkpoints.items():
                versions = self.serde.loads_typed(saved)["channel_versions"]
                for channel, version in versions.items():
                    self.blobs.pop((thread_id, namespace, channel, version), None)
                self.writes.pop((thread_id, namespace, checkpoint_id), None)

    async def adelete_thread(self, thread_id: str) -> None:
        self.delete_thread(thread_id)


class Memory:
    """The process-wide checkpointer and the marks that say what each thread has seen.

    Bounded twice: at most `max_threads` threads (least recently used evicted), and each
    thread holds one checkpoint (pruned after every turn) of at most `2 * reseed_turns` turns
    (then it is rebuilt from the store's last `reseed_turns`).
    """

    def __init__(self, *, max_threads: int, reseed_turns: int):
        self.checkpointer = PrunableSaver()
        self.max_threads = max_threads
        self.reseed_turns = reseed_turns
        self.max_held_turns = max(2 * reseed_turns, 1)
        self._threads: OrderedDict[str, _ThreadMark] = OrderedDict()

    def __len__(self) -> int:
        return len(self._threads)

    @staticmethod
    def config(thread_id: str) -> RunnableConfig:
        return {"configurable": {"thread_id": thread_id}}

    async def ensure_thread(
        self,
        agent: TurnAgent,
        thread_id: str,
        user_id: str,
        store: ChatStore,
        *,
        conversation_id: str | None = None,
    ) -> int:
        """Make the thread hold the stored history of the user's conversation (None: the
        default one); returns how many turns it holds. Raises `StoreUnavailable` when the
        store cannot be read (before anything streams)."""
        latest = tuple(await store.latest_turn_ids(user_id, 2, conversation=conversation_id))
        mark = self._threads.get(thread_id)
        if mark is not None and mark.seen == latest and mark.turns < self.max_held_turns:
            self._threads.move_to_end(thread_id)
            return mark.turns
        # Cold, evicted, behind the store (another instance answered) or grown too long.
        turns = (
            await store.recent_turns(user_id, self.reseed_turns, conversation=conversation_id)
            if latest
            else []
        )
        await self.checkpointer.adelete_thread(thread_id)
        if turns:
            await agent.aupdate_state(
                self.config(thread_id), {"messages": messages_from_turns(turns)}, as_node="model"
            )
            log.info("thread %r reseeded from %d stored turns", thread_id, len(turns))
        self._remember(thread_id, _ThreadMark(latest, len(turns)))
        return len(turns)

    def record_turn(self, thread_id: str, turn_id: str) -> None:
        """The thread has now seen the turn just stored; only its latest checkpoint is kept."""
        mark = self._threads.get(thread_id)
        if mark is None:
            # Evicted while the turn ran: the agent's writes re-created part of the thread
            # behind the LRU's back. Drop it; it reseeds from the store next time.
            self.checkpointer.delete_thread(thread_id)
            return
        # What the store's newest two will be if no other instance wrote in between.
        mark.seen, mark.turns = (turn_id, *mark.seen[:1]), mark.turns + 1
        self.checkpointer.prune([thread_id])

    def forget(self, thread_id: str) -> None:
        """Drop a thread whose state can no longer be trusted (the turn failed, was cut short,
        or was not stored): the next turn rebuilds it from the store."""
        self._threads.pop(thread_id, None)
        self.checkpointer.delete_thread(thread_id)

    def forget_prefix(self, prefix: str) -> int:
        """Drop every thread whose id starts with `prefix` (a deleted conversation's, under
        every prompt version); how many."""
        gone = [
            thread_id for thread_id in self.checkpointer.storage if thread_id.startswith(prefix)
        ]
        gone += [t for t in self._threads if t.startswith(prefix) and t not in gone]
        for thread_id in gone:
            self.forget(thread_id)
        return len(gone)

    def _remember(self, thread_id: str, mark: _ThreadMark) -> None:
        self._threads[thread_id] = mark
        self._threads.move_to_end(thread_id)
        while len(self._threads) > self.max_threads:
            evicted, _ = self._threads.popitem(last=False)
            self.checkpointer.delete_thread(evicted)

    def checkpointed_threads(self) -> int:
        return len(self.checkpointer.storage)
