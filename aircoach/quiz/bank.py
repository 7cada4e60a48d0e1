"""The demo question bank shipped with the app, loaded into the quiz store on first use, and
the course's chapter titles."""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

import anyio

from aircoach.quiz.ports import Question, QuizStore

log = logging.getLogger(__name__)

DEMO_QUESTIONS = Path(__file__).parent.parent / "data" / "quiz_questions.json"
CHAPTERS = range(1, 11)


async def _load_bank() -> dict[str, Any]:
    return json.loads(await anyio.Path(DEMO_QUESTIONS).read_text("utf-8"))


async def load_demo_questions() -> list[Question]:
    return (await _load_bank())["questions"]


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
