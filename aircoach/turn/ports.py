"""What the chat turn needs from its stores (adapters in `aircoach.store` implement these).
Implementations raise `StoreUnavailable` when their backend fails, and return JSON-safe
values only (no ObjectId, no datetime)."""

from __future__ import annotations

from enum import Enum
from typing import Protocol

from aircoach.grounding.feedback import Feedback, Voto
from aircoach.memory.ports import DEFAULT_CONVERSATION
from aircoach.turn.records import ConversationSummary, Turn

# The name the long-term memory gives the default conversation (a request without an id): a
# client's conversation of that name would share its memory, and deleting it would forget
# the default conversation's too. No client id may take it; turns a client stored under it
# before it was reserved are the default conversation's.
RESERVED_CONVERSATION_ID = DEFAULT_CONVERSATION


class ConversationScope(Enum):
    """Whose turns `ChatStore.history` reads when not one named conversation's."""

    EVERY = "every"  # every conversation's, the default one's included
    DEFAULT = "default"  # the default conversation's: no conversation id, or the reserved one


class ChatStore(Protocol):
    async def append_turn(self, turn: Turn) -> None:
        """Store the turn; a turn whose `turn_id` is stored already is left as it is, so a
        write retried after a timeout (or a dead letter replayed twice) is stored once."""
        ...

    async def recent_turns(
        self, user_id: str, limit: int, *, conversation: str | None = None
    ) -> list[Turn]:
        """The last `limit` turns of the user's `conversation` (None: the default one, turns
        without a conversation id) by turn id (the order they were asked in), oldest first.
        Turn ids are unique and time-ordered: exact for turns a microsecond apart."""
        ...

    async def latest_turn_ids(
        self, user_id: str, limit: int = 2, *, conversation: str | None = None
    ) -> list[str]:
        """The ids of the last `limit` turns of the user's `conversation` (None: the default
        one) by turn id, newest first (one indexed read)."""
        ...

    async def get_turn(self, user_id: str, turn_id: str) -> Turn | None:
        """One of the user's turns; None when it does not exist or is someone else's."""
        ...

    async def history(
        self,
        user_id: str,
        *,
        limit: int,
        before: str | None = None,
        before_turn: str | None = None,
        conversation: str | ConversationScope = ConversationScope.EVERY,
    ) -> list[Turn]:
        """The user's turns newest first (by turn id: exact even within a second), older
        than the turn `before_turn` and than the `before` timestamp (deprecated) when given;
        those of `conversation`: one conversation's (by id), the default conversation's
        (`ConversationScope.DEFAULT`, with those stored under `RESERVED_CONVERSATION_ID`) or
        every conversation's (`ConversationScope.EVERY`)."""
        ...

    async def conversations(
        self, user_id: str, *, limit: int, before_turn: str | None = None
    ) -> list[ConversationSummary]:
        """The user's named conversations, the most recently active first (by the id of
        their newest turn); `before_turn`: only those whose newest turn id is lower."""
        ...

    async def delete_turn(self, user_id: str, turn_id: str) -> bool:
        """Remove one of the user's turns; False when it does not exist (or is someone
        else's, or another request removed it first)."""
        ...

    async def conversation_turn_ids(self, user_id: str, conversation: str) -> list[str]:
        """The ids of the turns of the user's `conversation` (none: it does not exist)."""
        ...

    async def delete_conversation(self, user_id: str, conversation: str) -> list[str]:
        """Remove the turns of the user's `conversation`; the ids of the turns removed (none:
        the conversation does not exist)."""
        ...

    async def set_feedback(self, user_id: str, turn_id: str, feedback: Feedback) -> bool:
        """Keep `feedback` with the user's turn `turn_id` (replacing an earlier one); False
        when the user has no such turn."""
        ...

    async def feedback(self, *, voto: Voto | None, limit: int, before: str | None) -> list[Turn]:
        """Turns with a feedback (of `voto`, when given), newest feedback first; `before`:
        only feedback given before this time."""
        ...
