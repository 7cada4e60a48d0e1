"""Storing a turn: exactly one document per request, and process memory kept consistent with
what the store holds (the store is the source of truth). A turn the store refuses goes to the
dead-letter spool, and the spool is replayed once the store takes a turn again."""

from __future__ import annotations

import hashlib
import logging
from typing import Literal

from aircoach.logs import current_stages
from aircoach.turn.dead_letters import DeadLetters
from aircoach.turn.memory import Memory
from aircoach.turn.ports import ChatStore
from aircoach.turn.records import Turn

log = logging.getLogger(__name__)


class TurnRecorder:
    """Writes the turn and updates the thread's memory mark.

    `thread_id` is the user's conversation thread; `memory_thread` is the checkpointer thread
    the agent ran in: the same one, or a throwaway thread for a turn that must not see (or
    join) the history (`chat_history: false`), deleted once the turn is recorded.
    """

    def __init__(
        self,
        chats: ChatStore,
        memory: Memory,
        dead_letters: DeadLetters,
        *,
        thread_id: str,
        memory_thread: str,
    ):
        self.chats = chats
        self.memory = memory
        self.dead_letters = dead_letters
        self.thread_id = thread_id
        self.memory_thread = memory_thread
        self.attempted = False  # record() ran (it runs once per turn)
        self.outcome: Literal["pending", "stored", "spooled", "lost"] = "pending"

    @property
    def stored(self) -> bool:
        """The store took the turn."""
        return self.outcome == "stored"

    @property
    def joins_history(self) -> bool:
        return self.memory_thread == self.thread_id

    async def record(self, turn: Turn) -> bool:
        """Store the turn; whether the store took it. On failure the turn is spooled as a
        dead letter (nothing is lost silently: the log line names the turn, its content hash
        and where it went) and the stream says `persist_failed`."""
        self.attempted = True
        try:
            with current_stages().timed("persist"):
                await self.chats.append_turn(turn)
        except Exception:
            kept = await self.dead_letters.keep(turn)
            self.outcome = "spooled" if kept else "lost"
            digest = hashlib.sha256(turn.model_dump_json().encode()).hexdigest()[:16]
            log.exception(
                "persist_failed turn_id=%s user=%r content_sha256=%s dead_letter=%s",
                turn.turn_id,
                turn.userId,
                digest,
                self.dead_letters.spool.kind if kept else "lost",
            )
            # The thread now holds a turn the store does not: rebuild it from the store.
            self.memory.forget(self.thread_id)
            return False
        else:
            self.outcome = "stored"
            if self.joins_history:
                if turn.status == "ok":
                    self.memory.record_turn(self.thread_id, turn.turn_id)
                else:
                    # A failed or cut-short run leaves a partial thread; the store has the turn.
                    self.memory.forget(self.thread_id)
            return True
        finally:
            if not self.joins_history:
                await self.memory.checkpointer.adelete_thread(self.memory_thread)

    async def replay_dead_letters(self) -> None:
        """Once the store took this turn, move turns it refused earlier into it."""
        if self.stored:
            await self.dead_letters.replay(self.chats, store_is_up=True)
