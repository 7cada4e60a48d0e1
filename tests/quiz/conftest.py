"""The quiz service on the demo bank (`bank_settings`), with a wall clock of the test's own."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from aircoach.quiz.bank import chapter_titles, seed_demo_questions
from aircoach.quiz.service import QuizService
from aircoach.services import build_review_store, open_stores
from aircoach.settings import QuizSettings, Settings


class WallClock:
    def __init__(self) -> None:
        self.now = datetime(2026, 3, 1, 9, 0, tzinfo=UTC)

    def __call__(self) -> datetime:
        return self.now

    def advance(self, **delta: float) -> None:
        self.now += timedelta(**delta)


@pytest.fixture
def wall() -> WallClock:
    return WallClock()


@pytest.fixture
async def scheduled_quiz(bank_settings: Settings, wall) -> QuizService:
    stores = open_stores(bank_settings)
    await seed_demo_questions(stores.quiz)  # a no-op on SQLite's copy
    return QuizService(
        stores.quiz,
        stores.attempts,
        await chapter_titles(),
        reviews=build_review_store(bank_settings),
        settings=QuizSettings(quiz_repeat_window_s=300),
        now=wall,
    )
