"""A demo bank seeded once per session: each test gets a copy of its SQLite file (seeding it
again, search terms included, would cost every test a tenth of a second)."""

from __future__ import annotations

import asyncio
import shutil
import sqlite3
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from aircoach.quiz.bank import seed_demo_questions
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
