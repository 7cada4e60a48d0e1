"""The embedded SQLite file shared by several processes on one machine (issue 27): a server with
turns in flight while other processes open, write and close the same file (the seed commands,
a second server). Every turn that answered 200 must still be there once the server has
stopped, and the file must pass `PRAGMA integrity_check`.

What broke it: a store's set-up did `os.close(os.open(path))` on the live file; closing any
descriptor drops every POSIX lock the process holds on the file, SQLite's included. A seed
command then believed it was the last connection, checkpointed and deleted the WAL under the
server, whose later commits went to a deleted file (12 turns answered 200, 3 left after the
restart)."""

from __future__ import annotations

import os
import sqlite3
import subprocess
import sys
import threading
from collections.abc import Callable
from contextlib import closing
from pathlib import Path

import httpx
import pytest

from aircoach.settings import ROOT
from tests.load.harness import ServerProcess

pytestmark = pytest.mark.integration

TURN_TIMEOUT_S = 60.0
COMMAND_TIMEOUT_S = 120.0


class TurnSender:
    """Sends stored turns one after another from a thread until stopped; keeps the ids of those
    that answered 200."""

    def __init__(self, url: str, token: str, name: str):
        self.url, self.token, self.name = url, token, name
        self.answered: list[str] = []
        self.failures: list[str] = []
        self._changed = threading.Condition()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        with httpx.Client(base_url=self.url, timeout=TURN_TIMEOUT_S) as client:
            n = 0
            while not self._stop.is_set():
                n += 1
                response = client.post(
                    "/api/stream_query",
                    json={"query": f"cos'è lo stallo? ({self.name} {n})", "stream": False},
                    headers={"Authorization": f"Bearer {self.token}"},
                )
                with self._changed:
                    if response.status_code == 200:
                        self.answered.append(response.json()["turn_id"])
                    else:
                        self.failures.append(f"{response.status_code} {response.text[:200]}")
                    self._changed.notify_all()

    def wait_answered(self, count: int) -> None:
        """Until `count` turns answered 200 (a failure ends the wait: the test reports it)."""
        with self._changed:
            self._changed.wait_for(
                lambda: len(self.answered) >= count or bool(self.failures), TURN_TIMEOUT_S
            )
        assert len(self.answered) >= count, self.failures or "no answer in time"

    def __enter__(self) -> TurnSender:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(TURN_TIMEOUT_S)


def run_command(workdir: Path, env: dict[str, str], *args: str) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "aircoach", *args],
        cwd=workdir,
        env={**os.environ, "PYTHONPATH": str(ROOT), **env},
        capture_output=True,
        text=True,
        timeout=COMMAND_TIMEOUT_S,
    )
    assert done.returncode == 0, done.stderr[-2000:]


def test_turns_survive_other_processes_writing_the_same_file(
    tmp_path: Path, data_dir: Path, token: Callable[[str], str]
):
    env = {"DATA_DIR": str(data_dir)}
    db = data_dir / "aircoach.sqlite3"
    server = ServerProcess(tmp_path / "server", env).start()
    other = ServerProcess(tmp_path / "other", env)
    senders: list[TurnSender] = []
    try:
        with TurnSender(server.url, token("ada"), "ada") as ada:
            senders.append(ada)
            ada.wait_answered(1)
            # Each opens the file, writes and closes it while the server's turns go on.
            for command in ("seed-quiz", "seed-contacts", "seed-quiz"):
                run_command(tmp_path, env, command)
            other.start()
            with TurnSender(other.url, token("bob"), "bob") as bob:
                senders.append(bob)
                bob.wait_answered(3)
            other.stop()
            run_command(tmp_path, env, "seed-quiz")
            # Turns after the last writer closed: the ones the broken set-up lost.
            ada.wait_answered(len(ada.answered) + 3)
    finally:
        server.stop()
        other.stop()

    for sender in senders:
        assert sender.failures == [], sender.failures
    answered = [turn_id for sender in senders for turn_id in sender.answered]
    with closing(sqlite3.connect(db)) as conn:
        assert conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
        stored = {row[0] for row in conn.execute("SELECT turn_id FROM chats")}
    missing = [turn_id for turn_id in answered if turn_id not in stored]
    assert missing == [], f"{len(missing)} of {len(answered)} turns answered 200 are gone"
