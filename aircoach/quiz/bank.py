"""The demo question bank shipped with the app, loaded into the quiz store on first use, and
the course's chapter titles."""

from __future__ import annotations

import json
import logging
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import anyio

from aircoach.quiz.ports import Question, QuestionKey, QuizStore

log = logging.getLogger(__name__)

DEMO_QUESTIONS = Path(__file__).parent.parent / "data" / "quiz_questions.json"
CHAPTERS = range(1, 11)


_bank: dict[str, Any] | None = None  # the shipped file, parsed once per process


async def _load_bank() -> dict[str, Any]:
    global _bank
    if _bank is None:
        _bank = json.loads(await anyio.Path(DEMO_QUESTIONS).read_text("utf-8"))
    return _bank


async def load_demo_questions() -> list[Question]:
    """The shipped questions, each a copy: a caller may change what it gets."""
    return [dict(q) for q in (await _load_bank())["questions"]]


async def chapter_titles() -> dict[int, str]:
    """The title of each chapter of the course (`GET /api/quiz/chapters`, progress)."""
    return {int(number): title for number, title in (await _load_bank())["chapters"].items()}


async def seed_demo_questions(quiz: QuizStore, *, only_if_empty: bool = True) -> int:
    """Load the shipped questions; idempotent (upsert by capitolo + numero)."""
    if only_if_empty and await quiz.count() > 0:
        return 0
    written = await quiz.upsert_questions(await load_demo_questions())
    log.info("loaded %d demo quiz questions", written)
    return written


class SeededBank:
    """A quiz store that loads the demo questions (when it is empty) the first time a
    question is read, not when the quiz service is made: a turn that reads no question (a
    theory answer; the progress of a student who never answered) never checks the bank."""

    def __init__(self, store: QuizStore):
        self.store = store
        self._seeded = False

    async def _ready(self) -> QuizStore:
        if not self._seeded:
            await seed_demo_questions(self.store)  # idempotent: two first uses both may call it
            self._seeded = True
        return self.store

    async def count(self) -> int:
        return await (await self._ready()).count()

    async def chapter_counts(self) -> dict[int, int]:
        return await (await self._ready()).chapter_counts()

    async def upsert_questions(self, questions: list[Question]) -> int:
        return await (await self._ready()).upsert_questions(questions)

    async def random_question(self) -> Question | None:
        return await (await self._ready()).random_question()

    async def random_by_field(self, field: str, value: Any) -> Question | None:
        return await (await self._ready()).random_by_field(field, value)

    async def sample(self, size: int, *, capitolo: int | None = None) -> list[Question]:
        return await (await self._ready()).sample(size, capitolo=capitolo)

    async def by_chapter_and_number(self, capitolo: int, numero: int) -> Question | None:
        return await (await self._ready()).by_chapter_and_number(capitolo, numero)

    async def by_keys(self, keys: Sequence[QuestionKey]) -> list[Question]:
        return await (await self._ready()).by_keys(keys)

    async def list_questions(self, *, capitolo: int | None, limit: int) -> list[Question]:
        return await (await self._ready()).list_questions(capitolo=capitolo, limit=limit)

    async def search_text(
        self, text: str, *, capitolo: int | None = None, limit: int = 5
    ) -> list[Question]:
        return await (await self._ready()).search_text(text, capitolo=capitolo, limit=limit)
