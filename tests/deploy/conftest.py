"""Fixtures for the deploy tests: the Lambda bundle built once per run, python3.12 (what
Lambda runs) first on PATH, and the pinned npm tools.

Building the bundle downloads python3.12 manylinux wheels from the package index (pip, in a
subprocess), as `make bundle` does: these tests are integration tests."""

from __future__ import annotations

import fcntl
import glob
import os
import shutil
import stat
import subprocess
import time
import zipfile
from pathlib import Path

import pytest

from aircoach.settings import ROOT
from deploy import bundle

NODE_BIN = ROOT / "node_modules" / ".bin"


def python312() -> Path:
    """The real python3.12 binary: from PATH or pyenv's versions. A pyenv shim will not do: put
    first on PATH as `python3`, it would run pyenv's global version instead."""
    pyenv_root = Path(os.environ.get("PYENV_ROOT", Path.home() / ".pyenv"))
    candidates = [shutil.which("python3.12")]
    candidates += sorted(glob.glob(str(pyenv_root / "versions" / "3.12*" / "bin" / "python3.12")))
    for candidate in filter(None, candidates):
        asked = subprocess.run(
            [candidate, "-c", "import sys; print(sys.version_info[:2] == (3, 12), sys.executable)"],
            capture_output=True,
            text=True,
        )
        is_312, _, executable = asked.stdout.strip().partition(" ")
        if asked.returncode == 0 and is_312 == "True":
            return Path(executable)
    raise AssertionError("python3.12 is not installed (not on PATH, not in pyenv): Lambda runs it")


@pytest.fixture(scope="session")
def python312_first(tmp_path_factory: pytest.TempPathFactory) -> str:
    """A PATH whose `python3` is python3.12, as on Lambda's python3.12 runtime."""
    folder = tmp_path_factory.mktemp("python312-bin")
    (folder / "python3").symlink_to(python312())
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


def unzip_as_lambda(archive: Path, folder: Path) -> Path:
    """Extract like Lambda does: with each file's mode from the zip (zipfile drops it)."""
    with zipfile.ZipFile(archive) as zipped:
        for info in zipped.infolist():
            path = Path(zipped.extract(info, folder))
            mode = info.external_attr >> 16
            if not info.is_dir() and mode:
                path.chmod(stat.S_IMODE(mode))
    return folder


def npm_tool(name: str) -> Path:
    tool = NODE_BIN / name
    assert tool.exists(), f"{tool} is missing: run `npm ci` (make test does)"
    return tool
