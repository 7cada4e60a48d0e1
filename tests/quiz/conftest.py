"""A demo bank seeded once per session: each test gets a copy of its SQLite file (seeding it
again, search terms included, would cost every test a tenth of a second)."""

from __future__ import annotations

import asyncio
import shutil
import sqlite3
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from aircoach.quiz.bank import chapter_titles, seed_demo_questions
from aircoach.quiz.service import QuizService
from aircoach.services import build_review_store, open_stores
from aircoach.settings import QuizSettings, Settings
from aircoach.store.sqlite import SqliteQuizStore


@pytest.fixture(scope="session")
def _seeded_bank(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("bank") / "quiz.sqlite3"
    # In a thread of its own: an async test may be the first to ask, with its loop running.
    with ThreadPoolExecutor(1) as thread:
        seeded = thread.submit(asyncio.run, seed_demo_questions(SqliteQuizStore(path)))
        assert seeded.result() == 373
    with sqlite3.connect(path) as conn:  # everything into the main file, which is copied
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    conn.close()
    return path


@pytest.fixture
def bank_file(_seeded_bank: Path, tmp_path: Path) -> Path:
    """A SQLite file of this test's own holding the 373 demo questions."""
    copy = tmp_path / "quiz.sqlite3"
    shutil.copy(_seeded_bank, copy)
    return copy


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
async def scheduled_quiz(
    store_settings: Settings, request: pytest.FixtureRequest, wall
) -> QuizService:
    if store_settings.mongodb_uri is None:
        store_settings = store_settings.model_copy(
            update={"sqlite_path": request.getfixturevalue("bank_file")}
        )
    stores = open_stores(store_settings)
    await seed_demo_questions(stores.quiz)
    return QuizService(
        stores.quiz,
        stores.attempts,
        await chapter_titles(),
        reviews=build_review_store(store_settings),
        settings=QuizSettings(quiz_repeat_window_s=300),
        now=wall,
    )
