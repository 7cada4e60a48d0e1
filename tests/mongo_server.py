"""A real MongoDB wire-protocol server for tests: `nx-27017` (MongoDB on SQLite) as a
subprocess on a free loopback port, driven by the real PyMongo async driver."""

from __future__ import annotations

import shutil
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from tests.loopback import free_port

if TYPE_CHECKING:
    from aircoach.settings import Settings

_START_TIMEOUT_S = 15.0


def _executable() -> str:
    found = shutil.which("nx-27017") or str(Path(sys.executable).parent / "nx-27017")
    if not Path(found).exists():
        raise RuntimeError("nx-27017 is not installed: pip install -r requirements-dev.txt")
    return found


class MongoServer:
    """`nx-27017` on 127.0.0.1; `stop()` and `start()` again keep the same port (and, with a
    file database, the same data), as a MongoDB restart would."""

    def __init__(self, workdir: Path, db: str = "memory"):
        self.workdir = workdir
        self.db = db
        self.port = free_port()
        self._process: subprocess.Popen[bytes] | None = None

    @property
    def uri(self) -> str:
        return f"mongodb://127.0.0.1:{self.port}"

    def start(self) -> None:
        assert self._process is None, "already running"
        self.workdir.mkdir(parents=True, exist_ok=True)
        log = (self.workdir / "nx-27017.out").open("ab")
        # The log and pid files default to fixed paths in /tmp; parallel servers must not share.
        self._process = subprocess.Popen(
            [
                _executable(),
                "--db",
                self.db,
                "--host",
                "127.0.0.1",
                "-p",
                str(self.port),
                "--log-file",
                str(self.workdir / "nx-27017.log"),
                "--pid-file",
                str(self.workdir / "nx-27017.pid"),
            ],
            stdout=log,
            stderr=subprocess.STDOUT,
        )
        log.close()
        self._wait_until_accepting()

    def _wait_until_accepting(self) -> None:
        deadline = time.monotonic() + _START_TIMEOUT_S
        while time.monotonic() < deadline:
            assert self._process is not None
            if self._process.poll() is not None:
                raise RuntimeError(
                    f"nx-27017 exited with {self._process.returncode}; see {self.workdir}"
                )
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=0.2).close()
                return
            except OSError:
                time.sleep(0.02)  # a subprocess gives no event to wait on; poll its port
        self.stop()
        raise RuntimeError(f"nx-27017 did not accept connections within {_START_TIMEOUT_S}s")

    def stop(self) -> None:
        if self._process is None:
            return
        self._process.kill()
        self._process.wait(timeout=10)
        self._process = None


@pytest.fixture(scope="session")
def mongo_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[MongoServer]:
    """One in-memory server for the session; tests isolate themselves by database name."""
    server = MongoServer(tmp_path_factory.mktemp("nx-27017"))
    server.start()
    yield server
    server.stop()


@pytest.fixture
def restartable_mongo(tmp_path: Path) -> Iterator[MongoServer]:
    """A server of this test's own, on a database file, for tests that stop and restart it."""
    server = MongoServer(tmp_path / "nx-27017", db=str(tmp_path / "mongo.db"))
    server.start()
    yield server
    server.stop()


def mongo_settings(server: MongoServer, base: Settings, **overrides: Any) -> Settings:
    """`base` pointed at `server`, on a database of its own (tests share one server)."""
    return base.model_copy(
        update={
            "mongodb_uri": server.uri,
            "mongodb_db": f"t{uuid.uuid4().hex[:12]}",
            # Generous: a deadline only for operations that should succeed (a test of a
            # store that fails sets its own, after warming the database up).
            "store_timeout_s": 30.0,
            **overrides,
        }
    )


@pytest.fixture(params=["sqlite", "mongo"])
def store_settings(request: pytest.FixtureRequest, settings: Settings) -> Settings:
    """The test's settings on each store in turn: SQLite, then MongoDB (nx-27017)."""
    if request.param == "sqlite":
        return settings
    return mongo_settings(request.getfixturevalue("mongo_server"), settings)


@pytest.fixture
def bank_settings(store_settings: Settings, request: pytest.FixtureRequest) -> Settings:
    """`store_settings` with the demo bank in the store already on SQLite (a copy of a file
    seeded once per session, `bank_file` in tests/conftest.py); on MongoDB the app loads it
    on the first read, as it does on an empty store."""
    if store_settings.mongodb_uri is not None:
        return store_settings
    return store_settings.model_copy(update={"sqlite_path": request.getfixturevalue("bank_file")})
