"""What the app needs from a store. Implementations raise `StoreUnavailable` when their
backend fails, and return JSON-safe values only (no ObjectId, no datetime)."""

from __future__ import annotations

from typing import Any, Protocol

from aircoach.models import Turn

Question = dict[str, Any]

# Fields a quiz question may be filtered on (`campo` of domanda_teoria); nothing else is queried.
QUESTION_FIELDS = ("capitolo", "numero", "argomento", "difficolta", "corretta")


class ChatStore(Protocol):
    async def append_turn(self, turn: Turn) -> None: ...

    async def recent_turns(self, user_id: str, limit: int) -> list[Turn]:
        """The user's last `limit` turns by turn id (the order they were asked in), oldest
        first. Turn ids are unique and time-ordered: exact for turns a microsecond apart."""
        ...

    async def latest_turn_ids(self, user_id: str, limit: int = 2) -> list[str]:
        """The ids of the user's last `limit` turns by turn id, newest first (one indexed
        read)."""
        ...

    async def history(self, user_id: str, *, limit: int, before: str | None) -> list[Turn]:
        """The user's turns newest first, older than the `before` timestamp when given."""
        ...


class QuizStore(Protocol):
    async def count(self) -> int: ...

    async def upsert_questions(self, questions: list[Question]) -> int:
        """Insert or replace by (capitolo, numero); returns how many were written."""
        ...

    async def random_question(self) -> Question | None: ...

    async def random_by_field(self, field: str, value: Any) -> Question | None: ...

    async def by_chapter_and_number(self, capitolo: int, numero: int) -> Question | None: ...

    async def search_text(self, text: str, limit: int = 5) -> list[Question]:
        """Case-insensitive substring search in the question text."""
        ...
