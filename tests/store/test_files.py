"""Local files hold everyone's conversations and the dev signing key: nobody else may read
them; and the process keeps few descriptors open on them."""

from __future__ import annotations

import asyncio
import os
import sqlite3
import stat
import time
from collections.abc import Iterator
from contextlib import closing
from pathlib import Path

import pytest

from aircoach.auth.tokens import DevIssuer
from aircoach.services import Services
from aircoach.store.sqlite import SqliteChatStore
from aircoach.tasks.records import Contact
from aircoach.turn.records import Turn


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


@pytest.fixture(autouse=True)
def permissive_umask() -> Iterator[None]:
    """The usual 022: files would be created 0644 unless created private."""
    previous = os.umask(0o022)
    yield
    os.umask(previous)


def turn() -> Turn:
    return Turn(
        userId="u",
        human="h",
        system="s",
        timestamp="2025-03-01T10:00:00+00:00",
        prompt_version="v",
        model="m",
        thread_id="u:vv",
        turn_id="t1",
    )


async def test_the_database_and_its_folder_are_created_private(tmp_path):
    data = tmp_path / "fresh" / "data"
    store = SqliteChatStore(data / "aircoach.sqlite3")
    await store.append_turn(turn())
    assert mode(data) == 0o700
    files = [p for p in data.iterdir() if p.name.startswith("aircoach.sqlite3")]
    assert {p.name for p in files} >= {"aircoach.sqlite3", "aircoach.sqlite3-wal"}
    assert all(mode(p) == 0o600 for p in files), {p.name: oct(mode(p)) for p in files}


async def test_an_existing_readable_database_is_tightened(tmp_path):
    db = tmp_path / "old.sqlite3"
    with closing(sqlite3.connect(db)) as conn:
        conn.execute("CREATE TABLE x (a)")
    db.chmod(0o644)
    store = SqliteChatStore(db)
    await store.append_turn(turn())
    assert mode(db) == 0o600
    assert (await store.recent_turns("u", 1))[0].turn_id == "t1"


def test_the_dev_key_and_its_folder_are_private(tmp_path):
    issuer = DevIssuer(tmp_path / "new-data")
    issuer.private_key  # noqa: B018 - creates the key
    assert mode(tmp_path / "new-data") == 0o700
    assert mode(issuer.key_path) == 0o600


def _open_on(path: Path) -> int:
    """This process's file descriptors open on `path`."""
    return sum(
        1 for fd in Path("/proc/self/fd").iterdir() if os.path.realpath(fd) == str(path.resolve())
    )


async def test_the_stores_on_one_file_share_its_connections(settings):
    services = Services.build(settings)
    anna = Contact(email="anna@example.it", name="Anna")
    now = time.time()
    for _ in range(3):  # several at once: each worker thread takes some
        await asyncio.gather(
            *(services.chats.latest_turn_ids("u", 1) for _ in range(8)),
            *(services.attempts.chapter_stats("u") for _ in range(8)),
            services.quiz.count(),
            services.task_stores.contacts.upsert_contacts([anna]),
            services.guards.quotas.hit("u", "w", limit=5, now=now, expires_at=now + 60),
            services.exams.get("u", "e"),
            services.reviews.due("u", "2026-01-01T00:00:00+00:00", 1),
        )
    # Seven stores, four worker threads: a connection per thread and the anchor (with a
    # connection per store and thread, and an anchor each, 21 or more here).
    assert _open_on(settings.sqlite_file) <= 5
