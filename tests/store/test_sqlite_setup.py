"""A new SQLite file set up by several stores at once (the chat, quiz, guard stores of one
app, and a second app on the same file): switching a file to WAL answers "database is locked"
at once to all but one of them, without waiting. (Reproduced: 8 threads on a fresh file, 10
errors in 200 rounds.) Every store must come up."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

from aircoach.store.sqlite import _Sqlite

STORES = 8
ROUNDS = 100


@pytest.mark.integration  # a race reproduced: 800 threads on 100 new files, about 1 s
def test_stores_setting_up_one_new_file_at_once_all_come_up(tmp_path: Path):
    errors: list[BaseException] = []
    for n in range(ROUNDS):
        path = tmp_path / f"r{n}" / "aircoach.sqlite3"
        start = threading.Barrier(STORES)

        def one_store(path: Path = path, start: threading.Barrier = start) -> None:
            store = _Sqlite(path, schema="CREATE TABLE IF NOT EXISTS t (k TEXT PRIMARY KEY);")
            start.wait(timeout=30)
            try:
                store._ensure_schema()  # what a store's first operation does, in its thread
            except BaseException as exc:
                errors.append(exc)

        threads = [threading.Thread(target=one_store) for _ in range(STORES)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
    assert errors == []
