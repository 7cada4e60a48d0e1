"""What the app needs from a store. Implementations raise `StoreUnavailable` when their
backend fails, and return JSON-safe values only (no ObjectId, no datetime)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol

from aircoach.grounding.feedback import Feedback, Voto
from aircoach.models import Turn
from aircoach.quiz.models import Attempt, ChapterStats
from aircoach.tasks.records import Contact, ReviewItem, ReviewStatus, TaskRun

Question = dict[str, Any]
QuestionKey = tuple[int, int]  # (capitolo, numero)

# Fields a quiz question may be filtered on (`campo` of domanda_teoria); nothing else is queried.
QUESTION_FIELDS = ("capitolo", "numero", "argomento", "difficolta", "corretta")


class ChatStore(Protocol):
    async def append_turn(self, turn: Turn) -> None:
        """Store the turn; a turn whose `turn_id` is stored already is left as it is, so a
        write retried after a timeout (or a dead letter replayed twice) is stored once."""
        ...

    async def recent_turns(self, user_id: str, limit: int) -> list[Turn]:
        """The user's last `limit` turns by turn id (the order they were asked in), oldest
        first. Turn ids are unique and time-ordered: exact for turns a microsecond apart."""
        ...

    async def latest_turn_ids(self, user_id: str, limit: int = 2) -> list[str]:
        """The ids of the user's last `limit` turns by turn id, newest first (one indexed
        read)."""
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
    ) -> list[Turn]:
        """The user's turns newest first (by turn id: exact even within a second), older
        than the turn `before_turn` and than the `before` timestamp (deprecated) when given."""
        ...

    async def set_feedback(self, user_id: str, turn_id: str, feedback: Feedback) -> bool:
        """Keep `feedback` with the user's turn `turn_id` (replacing an earlier one); False
        when the user has no such turn."""
        ...

    async def feedback(self, *, voto: Voto | None, limit: int, before: str | None) -> list[Turn]:
        """Turns with a feedback (of `voto`, when given), newest feedback first; `before`:
        only feedback given before this time."""
        ...


class QuizStore(Protocol):
    async def count(self) -> int: ...

    async def chapter_counts(self) -> dict[int, int]:
        """How many questions each chapter holds."""
        ...

    async def upsert_questions(self, questions: list[Question]) -> int:
        """Insert or replace by (capitolo, numero), with their search terms; returns how many
        were written."""
        ...

    async def random_question(self) -> Question | None: ...

    async def random_by_field(self, field: str, value: Any) -> Question | None: ...

    async def sample(self, size: int, *, capitolo: int | None = None) -> list[Question]:
        """Up to `size` distinct questions drawn at random (of one chapter when given)."""
        ...

    async def by_chapter_and_number(self, capitolo: int, numero: int) -> Question | None: ...

    async def by_keys(self, keys: Sequence[QuestionKey]) -> list[Question]:
        """The questions of `keys` that exist, in the order of `keys`."""
        ...

    async def list_questions(self, *, capitolo: int | None, limit: int) -> list[Question]:
        """Questions in chapter and number order (of one chapter when given)."""
        ...

    async def search_text(
        self, text: str, *, capitolo: int | None = None, limit: int = 5
    ) -> list[Question]:
        """The forgiving search of `aircoach.quiz.search`: best matches first."""
        ...


class AttemptStore(Protocol):
    """Graded answers (`quiz_attempts`): written once, read per user."""

    async def add_attempt(self, attempt: Attempt) -> None: ...

    async def chapter_stats(self, user_id: str) -> list[ChapterStats]:
        """The user's answers and right answers per chapter, in chapter order."""
        ...

    async def recent_attempts(self, user_id: str, limit: int) -> list[Attempt]:
        """The user's last `limit` attempts, newest first."""
        ...


# --- tasks (aircoach.tasks): runs, the review queue, contacts -----------------------------------


class TaskRunStore(Protocol):
    """`task_runs`: every run of a task, valid output or dead letter."""

    async def insert_run(self, run: TaskRun) -> None: ...

    async def get_run(self, run_id: str) -> TaskRun | None: ...


class ReviewQueueStore(Protocol):
    """`task_review_queue`: inputs the fallback chain could not turn into a valid output."""

    async def enqueue(self, item: ReviewItem) -> None: ...

    async def get_item(self, review_id: str) -> ReviewItem | None: ...

    async def list_items(
        self, *, status: ReviewStatus, task: str | None, limit: int, after: str | None
    ) -> list[ReviewItem]:
        """Items with `status` (of `task` when given), oldest first, after the `after` id."""
        ...

    async def resolve(self, review_id: str, *, run_id: str, by: str, at: str) -> bool:
        """Mark an open item resolved by `run_id`; False when it was not open (atomic: two
        reviewers cannot both resolve it)."""
        ...

    async def reopen(self, review_id: str) -> None:
        """Undo `resolve` (its run could not be stored)."""
        ...


class ContactStore(Protocol):
    """`contacts`: known senders, by `Contact.key` (`email:<address>` or `domain:<domain>`)."""

    async def upsert_contacts(self, contacts: list[Contact]) -> int: ...

    async def find_contact(self, key: str) -> Contact | None: ...
