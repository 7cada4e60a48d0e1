"""Fixtures for the deploy tests: the Lambda bundle built once per run, python3.12 (what
Lambda runs) first on PATH, and the pinned npm tools.

Building the bundle downloads python3.12 manylinux wheels from the package index (pip, in a
subprocess), as `make bundle` does: these tests are integration tests."""

from __future__ import annotations

import fcntl
import os
import time
from pathlib import Path

import pytest

from aircoach.settings import ROOT
from deploy import bundle

NODE_BIN = ROOT / "node_modules" / ".bin"


@pytest.fixture(scope="session")
def python312_first(tmp_path_factory: pytest.TempPathFactory) -> str:
    """A PATH whose `python3` is python3.12, as on Lambda's python3.12 runtime."""
    folder = tmp_path_factory.mktemp("python312-bin")
    (folder / "python3").symlink_to(bundle.python312())
    return f"{folder}{os.pathsep}/usr/local/bin{os.pathsep}/usr/bin{os.pathsep}/bin"


@pytest.fixture(scope="session")
def lambda_bundle(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The zip `make bundle` builds, built once for every xdist worker of this run (a file lock:
    the first worker builds, the other waits for it)."""
    base = tmp_path_factory.getbasetemp()
    shared = base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base
    target = shared / "aircoach-lambda.zip"
    with (shared / "aircoach-lambda.lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not target.exists():
            started = time.monotonic()
            bundle.build(target)
            print(f"\nbuilt the Lambda bundle in {time.monotonic() - started:.0f} s")
    return target


def npm_tool(name: str) -> Path:
    tool = NODE_BIN / name
    assert tool.exists(), f"{tool} is missing: run `npm ci` (make test does)"
    return tool
