"""The demo question bank shipped with the app, loaded into the quiz store on first use."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import anyio

from aircoach.store.base import Question, QuizStore

log = logging.getLogger(__name__)

DEMO_QUESTIONS = Path(__file__).parent.parent / "data" / "quiz_questions.json"
CHAPTERS = range(1, 11)


async def load_demo_questions() -> list[Question]:
    raw = await anyio.Path(DEMO_QUESTIONS).read_text("utf-8")
    return json.loads(raw)["questions"]


async def seed_demo_questions(quiz: QuizStore, *, only_if_empty: bool = True) -> int:
    """Load the shipped questions; idempotent (upsert by capitolo + numero)."""
    if only_if_empty and await quiz.count() > 0:
        return 0
    written = await quiz.upsert_questions(await load_demo_questions())
    log.info("loaded %d demo quiz questions", written)
    return written
