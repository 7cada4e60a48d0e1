"""Local files hold everyone's conversations and the dev signing key: nobody else may read them."""

from __future__ import annotations

import os
import sqlite3
import stat
from collections.abc import Iterator
from contextlib import closing
from pathlib import Path

import pytest

from aircoach.auth.tokens import DevIssuer
from aircoach.store.sqlite import SqliteChatStore
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
