"""Storing a turn: exactly one document per request, and process memory kept consistent with
what the store holds (the store is the source of truth)."""

from __future__ import annotations

import hashlib
import logging

from aircoach.models import Turn
from aircoach.store.base import ChatStore
from aircoach.turn.events import ErrorEvent
from aircoach.turn.memory import Memory

log = logging.getLogger(__name__)

PERSIST_FAILED = ErrorEvent(
    code="persist_failed", message="Your answer could not be saved to your history."
)


class TurnRecorder:
    """Writes the turn and updates the thread's memory mark.

    `thread_id` is the user's conversation thread; `memory_thread` is the checkpointer thread
    the agent ran in: the same one, or a throwaway thread for a turn that must not see (or
    join) the history (`chat_history: false`), deleted once the turn is recorded.
    """

    def __init__(self, chats: ChatStore, memory: Memory, *, thread_id: str, memory_thread: str):
        self.chats = chats
        self.memory = memory
        self.thread_id = thread_id
        self.memory_thread = memory_thread
        self.attempted = False  # record() ran (it runs once per turn)
        self.stored = False  # and the store took the turn

    @property
    def joins_history(self) -> bool:
        return self.memory_thread == self.thread_id

    async def record(self, turn: Turn) -> ErrorEvent | None:
        """Store the turn; on failure, the `error` event for the stream (nothing is lost
        silently: the log line names the turn and its content hash)."""
        self.attempted = True
        try:
            await self.chats.append_turn(turn)
        except Exception:
            digest = hashlib.sha256(turn.model_dump_json().encode()).hexdigest()[:16]
            log.exception(
                "persist_failed turn_id=%s user=%r content_sha256=%s",
                turn.turn_id,
                turn.userId,
                digest,
            )
            # The thread now holds a turn the store does not: rebuild it from the store.
            self.memory.forget(self.thread_id)
            return PERSIST_FAILED
        else:
            self.stored = True
            if self.joins_history:
                if turn.status == "ok":
                    self.memory.record_turn(self.thread_id, turn.turn_id)
                else:
                    # A failed or cut-short run leaves a partial thread; the store has the turn.
                    self.memory.forget(self.thread_id)
            return None
        finally:
            if not self.joins_history:
                await self.memory.checkpointer.adelete_thread(self.memory_thread)
