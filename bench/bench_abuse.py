"""Figures of two findings of the hardening issue, against a real `python -m aircoach serve`:

1. the 422 for a `tools` map of N unknown names (each error used to carry the whole map);
2. 8 concurrent anonymous 100 MB bodies (they used to be read and parsed before the 401).

Prints, per case, the status, the answer's size, the time and the server's memory (RSS after,
and its peak). `--root DIR` runs the server from another source tree (e.g. a `git archive` of
an older commit), so the same script gives before and after figures:

    python bench/bench_abuse.py                       # this tree
    python bench/bench_abuse.py --root /tmp/before --sizes 1000 2000 4000
"""

from __future__ import annotations

import argparse
import json
import os
import select
import socket
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from aircoach.auth.tokens import DevIssuer
from bench.common import ROOT, free_port

MB = 1024 * 1024


class Server:
    def __init__(self, root: Path, data: Path, **env: str):
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "aircoach", "serve", "--port", str(self.port)],
            cwd=data,
            env={
                **os.environ,
                "PYTHONPATH": str(root),
                "DATA_DIR": str(data),
                "PROMPT_DOCS_DIR": str(root / "prompt_docs"),
                "MODEL_PROVIDER": "offline",
                "MONGODB_URI": "",
                "AUTH0_DOMAIN": "",
                "PROMPT_BUCKET": "",
                "LOG_LEVEL": "WARNING",
                **env,
            },
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            try:
                if httpx.get(f"{self.url}/api/health", timeout=1).status_code == 200:
                    return
            except httpx.TransportError:
                time.sleep(0.1)
        raise RuntimeError("server did not start")

    def memory_mb(self) -> tuple[float, float]:
        fields = {}
        for line in Path(f"/proc/{self.proc.pid}/status").read_text().splitlines():
            name, _, value = line.partition(":")
            if name in ("VmRSS", "VmHWM"):
                fields[name] = int(value.split()[0]) / 1024
        return fields["VmRSS"], fields["VmHWM"]

    def stop(self) -> None:
        self.proc.terminate()
        self.proc.wait(30)


def unknown_tools(server: Server, token: str, sizes: list[int]) -> None:
    for n in sizes:
        tools = {f"strumento_{i:05d}": True for i in range(n)}
        body = json.dumps({"query": "ciao", "tools": tools}).encode()
        started = time.perf_counter()
        response = httpx.post(
            f"{server.url}/api/stream_query",
            content=body,
            headers={"Authorization": f"Bearer {token}", "Content-Type": "application/json"},
            timeout=1200,
        )
        elapsed = time.perf_counter() - started
        rss, peak = server.memory_mb()
        print(
            f"  {n:>6} unknown tools ({len(body) / 1024:.0f} KB body): {response.status_code}, "
            f"answer {_size(len(response.content))} in {elapsed:.2f} s; "
            f"server RSS {rss:.0f} MB (peak {peak:.0f} MB)",
            flush=True,
        )


def _size(n: int) -> str:
    return f"{n / MB:.1f} MB" if n >= MB else f"{n:,} bytes"


def _post_large(url: str, total: int) -> tuple[int | None, int]:
    """POST `total` bytes with a Content-Length, stopping when the server answers."""
    host, port = url.removeprefix("http://").split(":")
    head = (
        f"POST /api/stream_query HTTP/1.1\r\nHost: {host}\r\nContent-Type: application/json\r\n"
        f"Content-Length: {total}\r\n\r\n"
    ).encode()
    chunk, sent = b"x" * (256 * 1024), 0
    with socket.create_connection((host, int(port)), timeout=600) as sock:
        sock.sendall(head)
        while sent < total and not select.select([sock], [], [], 0)[0]:
            try:
                sock.sendall(chunk[: total - sent])
            except OSError:
                break
            sent += min(len(chunk), total - sent)
        try:
            answer = sock.recv(1024)
        except OSError:
            answer = b""
    status = int(answer.split(b" ")[1]) if answer.startswith(b"HTTP/1.1 ") else None
    return status, sent


def large_bodies(server: Server, count: int, size_mb: int) -> None:
    rss_before, _ = server.memory_mb()
    started = time.perf_counter()
    with ThreadPoolExecutor(count) as pool:
        results = list(pool.map(lambda _: _post_large(server.url, size_mb * MB), range(count)))
    elapsed = time.perf_counter() - started
    rss, peak = server.memory_mb()
    statuses = sorted({str(status) for status, _ in results})
    sent = sum(s for _, s in results) / MB
    print(
        f"  {count} concurrent anonymous {size_mb} MB bodies: {', '.join(statuses)} in "
        f"{elapsed:.2f} s; the clients wrote {sent:.1f} MB before the answer came; "
        f"server RSS {rss_before:.0f} -> {rss:.0f} MB (peak {peak:.0f} MB)",
        flush=True,
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--root", type=Path, default=ROOT, help="source tree to serve")
    parser.add_argument("--sizes", type=int, nargs="+", default=[1000, 2000, 10_000])
    parser.add_argument("--bodies", type=int, default=8)
    parser.add_argument("--body-mb", type=int, default=100)
    args = parser.parse_args()
    print(f"server from {args.root}")
    with tempfile.TemporaryDirectory() as tmp:
        data = Path(tmp)
        token = DevIssuer(data).mint("bench", audience="https://api.aircoach.dev")
        server = Server(args.root, data)
        try:
            print("unknown tools (default body limit):")
            unknown_tools(server, token, args.sizes)
            print("large bodies:")
            large_bodies(server, args.bodies, args.body_mb)
        finally:
            server.stop()
        if args.root == ROOT:
            server = Server(args.root, data, MAX_BODY_BYTES=str(4 * MB))
            try:
                print("unknown tools, MAX_BODY_BYTES raised to 4 MB (the 422 itself):")
                unknown_tools(server, token, args.sizes)
            finally:
                server.stop()


if __name__ == "__main__":
    main()
