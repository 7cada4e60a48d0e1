"""Fixtures of the load and fault tests: real servers in subprocesses, dev-issuer tokens."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from functools import cache
from pathlib import Path

import pytest

from aircoach.auth.tokens import DevIssuer
from aircoach.settings import Settings
from tests.load.harness import ServerProcess


@pytest.fixture
def serve(tmp_path: Path, data_dir: Path) -> Iterator[Callable[..., ServerProcess]]:
    """Start `python -m aircoach serve` with these settings (as environment variables) on top
    of DATA_DIR=data_dir; at teardown the server must still be running (it stayed up)."""
    started: list[ServerProcess] = []

    def start(**env: str) -> ServerProcess:
        server = ServerProcess(
            tmp_path / f"server{len(started)}", {"DATA_DIR": str(data_dir), **env}
        )
        started.append(server)
        return server.start()

    yield start
    died = [s for s in started if not s.alive]
    for server in started:
        server.stop()
    assert not died, "the server died under load:\n" + "\n".join(s.log() for s in died)


@pytest.fixture
def dev_token(issuer: DevIssuer, settings: Settings) -> Callable[[str], str]:
    """A dev-issuer token per user, minted once (RS256 signing is not free at 1,000 turns)."""

    @cache
    def mint(sub: str) -> str:
        return issuer.mint(sub, audience=settings.auth0_audience)

    return mint
