"""A user's conversations: the claim key of a conversation's running turn, and what deleting
a conversation removes (its running turn cancelled first, then its turns' event logs and
idempotency records, its turns, its threads in this process's memory, and whatever the
features that keep per-conversation data registered as forgetters: the long-term memory
derived from it).

A delete removes nothing while a turn of the conversation still runs: a turn frees its thread
only after its store write (or its spooling, when the store refused it), so once the thread
is free no turn of the conversation can store itself later and bring it back. A turn that
does not let go within `cancel_wait_s` (10 s) of its cancel (a store slow to take its write)
makes the delete a 409 the client retries. Then the dead-letter spool, where any instance
may have left turns of the conversation, is moved into the store, so that they are removed
with the rest instead of coming back at the next replay; the conversation's turns the store
refuses leave the spool (a conversation held only there is deleted too). A spool that cannot
be read makes the delete a 503, again with nothing removed; one that fails half-way through
removing the conversation's entries, a 503 that a retry finishes."""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Annotated

import anyio
from pydantic import AfterValidator, Field, StringConstraints
from pydantic_core import PydanticCustomError

from aircoach.errors import TurnInProgress
from aircoach.turn.dead_letters import DeadLetters
from aircoach.turn.guards import ReservationStore
from aircoach.turn.log import TurnLogStore
from aircoach.turn.ports import RESERVED_CONVERSATION_ID, ChatStore
from aircoach.turn.records import ConversationSummary
from aircoach.turn.run import RunningTurns

if TYPE_CHECKING:
    from aircoach.turn.memory import Memory

log = logging.getLogger(__name__)

CONVERSATION_ID_PATTERN = r"^[A-Za-z0-9_-]{1,64}$"
MAX_CONVERSATION_ID = 64
# How long a delete waits for the conversation's cancelled turn to stop (on this instance it
# stops at once; on another it reads its cancel flag every `TICK_S` and stops within about a
# second) before it gives up.
_CANCEL_WAIT_S = 10.0
_CANCEL_POLL_S = 0.25
_BUSY_RETRY_S = 2

# Removes what a feature keeps of (user_id, conversation_id); it must not fail when there is
# nothing to remove.
ConversationForgetter = Callable[[str, str], Awaitable[None]]


def _not_reserved(conversation_id: str) -> str:
    if conversation_id == RESERVED_CONVERSATION_ID:
        raise PydanticCustomError(
            "conversation_id_reserved",
            f"{RESERVED_CONVERSATION_ID!r} names the default conversation (send no id for "
            "it): choose another id",
        )
    return conversation_id


# A client's conversation id, wherever one is accepted (a body field, a path or query
# parameter): the pattern, and never the reserved name (said in the schema too).
ConversationIdText = Annotated[
    str,
    StringConstraints(
        min_length=1, max_length=MAX_CONVERSATION_ID, pattern=CONVERSATION_ID_PATTERN
    ),
    Field(json_schema_extra={"not": {"const": RESERVED_CONVERSATION_ID}}),
    AfterValidator(_not_reserved),
]


def shown_conversation_id(stored: str | None) -> str | None:
    """The conversation id a client is shown for a stored turn's: one stored under the
    reserved id (a client named a conversation so before it was reserved) is the default
    conversation's, None, as its long-term memory always was; no route takes that id."""
    return None if stored == RESERVED_CONVERSATION_ID else stored


async def listed_conversations(
    chats: ChatStore, user_id: str, *, limit: int, before_turn: str | None = None
) -> tuple[list[ConversationSummary], bool]:
    """At most `limit` of the user's conversations that a client can open and delete by id,
    the most recently active first (`before_turn`: after the one whose newest turn has that
    id), and whether more follow: one stored under the reserved id is the default
    conversation (see `shown_conversation_id`), which is not listed."""
    # One more than the page tells whether more follow; one more again for a reserved one.
    found = await chats.conversations(user_id, limit=limit + 2, before_turn=before_turn)
    listed = [c for c in found if c.conversation_id != RESERVED_CONVERSATION_ID]
    return listed[:limit], len(listed) > limit


def thread_owner(user_id: str) -> str:
    """A token subject as a checkpointer thread id's first part (`turn.prepare`'s
    `memory_thread_id`): `%` and `:` percent-encoded, so that the subject `alice:c1`'s default
    thread is not `alice`'s conversation `c1` (Auth0's subjects, `auth0|123`, hold neither:
    their threads keep their ids)."""
    return user_id.replace("%", "%25").replace(":", "%3A")


def conversation_thread(user_id: str, conversation_id: str | None) -> str:
    """The key of the claim one running turn holds (per user): the user's id for the default
    conversation (as before conversations existed), `conversation:<id>` for another."""
    if conversation_id is None:
        return user_id
    return f"conversation:{conversation_id}"


@dataclass(frozen=True)
class ConversationEraser:
    chats: ChatStore
    dead_letters: DeadLetters
    turn_log: TurnLogStore
    reservations: ReservationStore
    memory: Memory | None
    clock: Callable[[], float]
    running: RunningTurns
    forgetters: Sequence[ConversationForgetter] = ()
    cancel_wait_s: float = _CANCEL_WAIT_S

    async def erase(self, user_id: str, conversation_id: str) -> bool:
        """Delete the user's conversation: False when there was none (nothing stored, nothing
        spooled, nothing running); `TurnInProgress` (nothing removed) when its running turn,
        cancelled, has not let go of the conversation within `cancel_wait_s`;
        `StoreUnavailable` when the store fails, or the dead-letter spool cannot be read (it
        may hold the conversation's turns: they would come back later). The conversation's
        turns the store refuses leave the spool last (`DeadLetters.conversation_turns`),
        after their event log and idempotency records: a delete that fails half-way leaves
        them in the spool, where the retry finds them again and finishes the delete. The
        stored turns go in the same order: their log and records first, the turns after."""
        running = await self._stop_running(user_id, conversation_id)
        spooled = await self.dead_letters.conversation_turns(self.chats, user_id, conversation_id)
        stored = await self.chats.conversation_turn_ids(user_id, conversation_id)
        await self._forget_turns(user_id, stored + spooled)
        removed = await self.chats.delete_conversation(user_id, conversation_id)
        # A turn stored since the listing (a message sent during the delete) goes too.
        await self._forget_turns(user_id, sorted(set(removed) - set(stored)))
        for turn_id in spooled:
            await self.dead_letters.remove(turn_id)
        turn_ids = sorted({*stored, *removed, *spooled})
        if running is not None:
            await self.turn_log.forget(user_id, [running])
        if self.memory is not None:
            self.memory.forget_prefix(f"{thread_owner(user_id)}:{conversation_id}:v")
        for forget in self.forgetters:
            await forget(user_id, conversation_id)
        log.info("conversation %r of %r deleted: %d turns", conversation_id, user_id, len(turn_ids))
        return bool(turn_ids) or running is not None

    async def _forget_turns(self, user_id: str, turn_ids: list[str]) -> None:
        """The turns' event logs and idempotency records, before the turns themselves: a
        delete that fails here removed no turn, and its retry finds them all again."""
        if turn_ids:
            await self.turn_log.forget(user_id, turn_ids)
            await self.reservations.forget_turns(user_id, turn_ids)

    async def _stop_running(self, user_id: str, conversation_id: str) -> str | None:
        """Cancel the conversation's running turn and wait until it has let go of the
        conversation (after its store write), so that its stored turn is removed too; its id,
        or None. `TurnInProgress` when it still holds the conversation after
        `cancel_wait_s`."""
        thread = conversation_thread(user_id, conversation_id)
        held = await self.turn_log.holder(user_id, thread, now=self.clock())
        if held is None:
            return None
        await self.turn_log.request_cancel(user_id, held.turn_id, now=self.clock())
        self.running.stop(held.turn_id)
        with anyio.move_on_after(self.cancel_wait_s):
            if (run := self.running.get(held.turn_id)) is not None:
                await run.ended.wait()  # its last write, which lets go of the thread
            # Another instance may run it: its claim in the store is all there is to watch.
            while True:
                if await self.turn_log.holder(user_id, thread, now=self.clock()) is None:
                    return held.turn_id
                await anyio.sleep(_CANCEL_POLL_S)
        log.warning(
            "conversation %r of %r not deleted: its turn %s did not stop in %gs",
            conversation_id,
            user_id,
            held.turn_id,
            self.cancel_wait_s,
        )
        raise TurnInProgress(
            "conversation_busy",
            turn_id=held.turn_id,
            fields={"turn_id": held.turn_id},
            headers={"Retry-After": str(_BUSY_RETRY_S)},
        )
