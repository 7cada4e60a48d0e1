"""A new SQLite file set up by several at once (processes on one file; in one process its
stores share one `_File`, so each `_File` here stands for a process): switching a file to WAL
answers "database is locked" at once to all but one of them, without waiting. (Reproduced: 8
threads on a fresh file, 10 errors in 200 rounds.) Every one must come up."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

from aircoach.store.sqlite import BUSY_TIMEOUT_S, _File

STORES = 8
ROUNDS = 100


@pytest.mark.integration  # a race reproduced: 800 threads on 100 new files, about 1 s
def test_stores_setting_up_one_new_file_at_once_all_come_up(tmp_path: Path):
    errors: list[BaseException] = []
    for n in range(ROUNDS):
        path = tmp_path / f"r{n}" / "aircoach.sqlite3"
        start = threading.Barrier(STORES)

        def one_store(path: Path = path, start: threading.Barrier = start) -> None:
            file = _File(path, BUSY_TIMEOUT_S)
            start.wait(timeout=30)
            try:
                # What a store's first operation does, in its thread.
                file.set_up("CREATE TABLE IF NOT EXISTS t (k TEXT PRIMARY KEY);")
            except BaseException as exc:
                errors.append(exc)

        threads = [threading.Thread(target=one_store) for _ in range(STORES)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
    assert errors == []
