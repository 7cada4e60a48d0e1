"""The student's long-term memory as a turn uses it: the prompt section for a question, the
items a message leaves, and the request to forget. A memory that cannot be read or written
never fails the turn: it is logged, and the turn goes on without it."""

from __future__ import annotations

import logging
from collections.abc import Collection
from dataclasses import dataclass
from datetime import UTC, datetime

from aircoach.memory.extract import ForgetRequest, forget_request
from aircoach.memory.ports import DEFAULT_CONVERSATION, MemoryItem, MemoryStore
from aircoach.memory.recall import memory_section, read_items, relevant
from aircoach.text import terms

log = logging.getLogger(__name__)

FORGOTTEN = (
    "Fatto: ho dimenticato quello che mi avevi detto di te e gli argomenti che ricordavo delle "
    "nostre conversazioni. Da qui riparto da zero; le conversazioni restano nella cronologia."
)
FORGOTTEN_ABOUT = (
    "Fatto: ho dimenticato quello che ricordavo su «{about}». Il resto lo ricordo ancora."
)
NOTHING_ABOUT = "Non ricordo niente su «{about}»: la memoria resta com'è."
PARTLY_FORGOTTEN = (
    "Ho dimenticato solo una parte di quello che ricordavo su «{about}»: riprova tra poco per "
    "il resto, oppure cancellalo dalle impostazioni."
)
NOT_FORGOTTEN = (
    "Non sono riuscito a cancellare la memoria in questo momento: riprova tra poco, oppure "
    "cancellala dalle impostazioni."
)


@dataclass(frozen=True)
class UserMemory:
    """`max_items`: kept per user (MEMORY_MAX_ITEMS); `prompt_items`, `prompt_chars`: the
    most the prompt section shows (MEMORY_PROMPT_ITEMS, MEMORY_PROMPT_CHARS)."""

    store: MemoryStore
    max_items: int
    prompt_items: int
    prompt_chars: int

    async def items(self, user_id: str) -> list[MemoryItem]:
        """Every item kept for the user, newest first (`GET /api/memory`)."""
        return await self.store.items(user_id, limit=self.max_items)

    async def section(
        self, user_id: str, question: str, *, shown_turns: Collection[str] = ()
    ) -> str:
        """The "Memoria dell'utente" section for this question, without the topics of
        `shown_turns` (the turns the model sees in its history); "" when nothing is relevant
        or the store cannot be read."""
        try:
            items = await self.store.items(user_id, limit=self.max_items)
        except Exception as exc:
            _warn("read", user_id, exc)
            return ""
        chosen = relevant(items, question, max_items=self.prompt_items, shown_turns=shown_turns)
        return memory_section(chosen, max_chars=self.prompt_chars)

    async def remember(
        self,
        user_id: str,
        message: str,
        *,
        turn_id: str,
        conversation_id: str = DEFAULT_CONVERSATION,
    ) -> int:
        """Keep what `message` says about the student and its topic; how many items (0 when
        the store failed)."""
        items = read_items(
            message,
            turn_id=turn_id,
            conversation_id=conversation_id,
            created_at=datetime.now(UTC).isoformat(),
        )
        try:
            await self.store.add(user_id, items, keep=self.max_items)
        except Exception as exc:
            _warn("write", user_id, exc)
            return 0
        return len(items)

    def forget_request(self, message: str) -> ForgetRequest | None:
        """Whether `message` asks the coach to forget, and what (a turn that changes the
        memory, with `forget`'s answer instead of the agent's)."""
        return forget_request(message)

    async def forget(self, user_id: str, about: str | None = None) -> str:
        """Forget on the user's request in the chat: everything, or the items `about` a topic
        (those with every term of it: "sul QNH" takes the questions about the QNH, not the
        goal). The coach's answer, in Italian, also when the store failed."""
        removed = 0
        try:
            if about is None:
                removed = await self.store.clear(user_id)
            else:
                wanted = set(terms(about))
                items = await self.store.items(user_id, limit=self.max_items)
                chosen = [item for item in items if wanted <= set(terms(item.text))]
                for item in chosen:  # one at a time: a failure may come half-way
                    await self.store.delete(user_id, item.id)
                    removed += 1
        except Exception as exc:
            _warn("clear", user_id, exc)
            return PARTLY_FORGOTTEN.format(about=about) if removed else NOT_FORGOTTEN
        log.info(
            "memory of %r: %d items forgotten on request in the chat%s",
            user_id,
            removed,
            "" if about is None else f" (about {about!r})",
        )
        if about is None:
            return FORGOTTEN
        return (FORGOTTEN_ABOUT if removed else NOTHING_ABOUT).format(about=about)


def _warn(what: str, user_id: str, exc: Exception) -> None:
    reason = exc.__cause__ or exc
    log.warning(
        "memory %s failed for %r; the turn goes on without it (%s: %s)",
        what,
        user_id,
        type(reason).__name__,
        reason,
    )
