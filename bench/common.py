"""Helpers shared by the benchmarks: a uvicorn server in a subprocess, timing, percentiles."""

from __future__ import annotations

import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from contextlib import contextmanager
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class ServerURL(str):
    """A running server's base URL; `pid` is its process, for its CPU time."""

    pid: int


@contextmanager
def server(
    module: str,
    env: dict[str, str] | None = None,
    *,
    root: Path = ROOT,
    cpus: set[int] | None = None,
):
    """Run `python -m module --port P` from source tree `root` until the block ends, pinned to
    `cpus` when given; yields the base URL (a `ServerURL`)."""
    port = free_port()
    # Its log goes to a file: a pipe nobody reads fills up after about 500 access lines, and
    # the server then blocks on its next log line.
    with tempfile.TemporaryFile() as log:
        proc = subprocess.Popen(
            [sys.executable, "-m", module, "--port", str(port)],
            cwd=root,
            env={**os.environ, "PYTHONPATH": str(root), "LOG_LEVEL": "WARNING", **(env or {})},
            stdout=subprocess.DEVNULL,
            stderr=log,
        )
        if cpus:
            os.sched_setaffinity(proc.pid, cpus)
        try:
            deadline = time.monotonic() + 60
            while time.monotonic() < deadline:
                try:
                    with socket.create_connection(("127.0.0.1", port), timeout=0.2):
                        break
                except OSError:
                    if proc.poll() is not None:
                        log.seek(0)
                        raise RuntimeError(log.read()[-4000:].decode(errors="replace")) from None
                    time.sleep(0.05)
            url = ServerURL(f"http://127.0.0.1:{port}")
            url.pid = proc.pid
            yield url
        finally:
            proc.terminate()
            proc.wait(10)


def process_cpu_s(pid: int) -> float:
    """User + system CPU seconds of process `pid` so far (all its threads)."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def pct(values: list[float], p: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(p / 100 * (len(ordered) - 1)))]


def median(values: list[float]) -> float:
    return statistics.median(values)


def rss_mb() -> float:
    with open("/proc/self/statm") as f:
        pages = int(f.read().split()[1])
    return pages * os.sysconf("SC_PAGE_SIZE") / 2**20
