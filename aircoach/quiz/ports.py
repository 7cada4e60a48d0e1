"""What the quiz needs from its stores (adapters in `aircoach.store` implement these), and
what a stored question is found by. Implementations raise `StoreUnavailable` when their
backend fails, and return JSON-safe values only."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Protocol

from aircoach import text
from aircoach.quiz.exam_models import ExamRecord
from aircoach.quiz.models import Attempt, ChapterStats, DayStats, ReviewRecord

Question = dict[str, Any]
QuestionKey = tuple[int, int]  # (capitolo, numero)

# Fields a quiz question may be filtered on (`campo` of domanda_teoria); nothing else is queried.
QUESTION_FIELDS = ("capitolo", "numero", "argomento", "difficolta", "corretta")


def index_terms(question: Mapping[str, Any]) -> list[str]:
    """The terms a question is found by: the stems of its text and topic, sorted, unique.
    Stores keep them with the question, tagged with `text.TERMS_VERSION`."""
    return text.terms(f"{question.get('testo', '')} {question.get('argomento') or ''}")


class QuizStore(Protocol):
    async def count(self) -> int: ...

    async def chapter_counts(self) -> dict[int, int]:
        """How many questions each chapter holds."""
        ...

    async def upsert_questions(self, questions: list[Question]) -> int:
        """Insert or replace by (capitolo, numero), with their search terms (a question named
        twice: its last version); returns how many were written."""
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
        """The forgiving search of `aircoach.text` (terms of `index_terms`): best matches first."""
        ...


class AttemptStore(Protocol):
    """Graded answers (`quiz_attempts`): written once, read per user; removed only when the
    chat turn that graded them is regenerated."""

    async def add_attempt(self, attempt: Attempt) -> None:
        """Store it; an attempt of a mock exam (`exam_id`) replaces the one already stored
        for that exam and question (a resubmission after a failure half-way), so it counts
        once."""
        ...

    async def chapter_stats(self, user_id: str) -> list[ChapterStats]:
        """The user's answers and right answers per chapter, in chapter order."""
        ...

    async def daily_stats(self, user_id: str, since: str) -> list[DayStats]:
        """The user's answers and right answers per day (the timestamp's first 10
        characters) and chapter, of the attempts at or after `since` (`YYYY-MM-DD`)."""
        ...

    async def recent_attempts(self, user_id: str, limit: int) -> list[Attempt]:
        """The user's last `limit` attempts, newest first."""
        ...

    async def question_attempts(self, user_id: str, key: QuestionKey) -> list[Attempt]:
        """The user's attempts of one question, oldest first."""
        ...

    async def forget_turn(self, user_id: str, turn_id: str) -> list[QuestionKey]:
        """Remove the attempts chat turn `turn_id` graded outside a mock exam (`exam_id`
        None); the questions they answered, each once, in no set order."""
        ...


class ReviewStore(Protocol):
    """Per user and question: when it was last asked and its FSRS schedule
    (`quiz_reviews`, one record per user and question, so at most the bank's size per user)."""

    async def get(self, user_id: str, key: QuestionKey) -> ReviewRecord | None: ...

    async def save_schedule(self, record: ReviewRecord) -> None:
        """Insert or update the record's schedule fields (`card`, `due`, `reviewed_at`,
        `reviews`, `last_right`), leaving `asked_at` as it is."""
        ...

    async def mark_asked(self, user_id: str, keys: Sequence[QuestionKey], at: str) -> None:
        """Set `asked_at` of these questions (records created as needed)."""
        ...

    async def due(self, user_id: str, now: str, limit: int) -> list[ReviewRecord]:
        """Records due at `now` (`due <= now`), most overdue first."""
        ...

    async def records(self, user_id: str, *, capitolo: int | None = None) -> list[ReviewRecord]:
        """Every record of the user (of one chapter when given), in chapter and number order."""
        ...


class ExamStore(Protocol):
    """Mock exams (`quiz_exams`), read per user."""

    async def create(self, exam: ExamRecord) -> None: ...

    async def get(self, user_id: str, exam_id: str) -> ExamRecord | None: ...

    async def list_for(
        self, user_id: str, limit: int, *, before: tuple[str, str] | None = None
    ) -> list[ExamRecord]:
        """The user's exams, newest first (by `creato`, then `id`); only those listed after
        `before` (`(creato, id)` of the last exam of the page before) when given."""
        ...

    async def claim(
        self, user_id: str, exam_id: str, at: str, *, previous: str | None = None
    ) -> bool:
        """Mark the exam submitted at `at` if its submission time is still `previous` (None:
        never submitted); whether this call did."""
        ...

    async def finish(self, user_id: str, exam_id: str, esito: dict[str, Any]) -> None: ...
