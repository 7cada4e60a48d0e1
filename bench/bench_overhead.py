"""Turn overhead against a real uvicorn server on 127.0.0.1 pinned to one core, at concurrency
1 and 32: (a) bare SSE, (b0) a bare LangGraph `create_agent`, (b) our agent, (c) the full
`/api/stream_query` path as SSE and (d) as JSON. Prints p50, p95, requests/s and the server's
CPU per request (its user + system time over the run, /proc/PID/stat), which the load of other
processes on the machine disturbs far less than wall-clock figures.

    python bench/bench_overhead.py [--model fixed offline] [--rounds 3] [--root DIR ...]

`--model fixed` is the trivial model of `bench/fixed_model.py` (a fixed 323-character reply in
44 chunks: equal work for the platform comparison); `offline` the offline model. Several
`--root` trees (e.g. a `git archive` of an earlier commit with this `bench/` copied in) are
measured in interleaved rounds (each round runs every tree once), for before/after figures;
the figures printed are the medians over the rounds. Quota off, SQLite store, every request
of the full path by one of 64 users; `--env NAME=VALUE` passes settings to the servers (e.g.
`GROUNDING_CAVEAT=false GROUNDING_REGENERATE=false`).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.common import ROOT, ServerURL, pct, process_cpu_s, server
from bench.overhead_server import QUERY

REQUESTS = {1: 150, 32: 640}
USERS = 64
VARIANTS = (
    ("a bare SSE", "/bench/bare", True),
    ("b0 create_agent", "/bench/create_agent", True),
    ("b our agent", "/bench/agent", True),
    ("c full SSE", "/api/stream_query", True),
    ("d full JSON", "/api/stream_query", False),
)


async def run(
    url: ServerURL, path: str, stream: bool, concurrency: int, tokens: list[str]
) -> tuple[float, float, float, float]:
    """p50 and p95 latency (ms), requests/s, server CPU per request (ms)."""
    latencies: list[float] = []
    queue: asyncio.Queue[int] = asyncio.Queue()
    for i in range(REQUESTS[concurrency]):
        queue.put_nowait(i)
    body = {"query": QUERY, "stream": stream}

    async def worker(client: httpx.AsyncClient) -> None:
        while not queue.empty():
            i = queue.get_nowait()
            headers = {"Authorization": f"Bearer {tokens[i % len(tokens)]}"}
            start = time.perf_counter()
            async with client.stream("POST", url + path, json=body, headers=headers) as r:
                data = b"".join([chunk async for chunk in r.aiter_bytes()])
            done = b"event: done" in data if stream else b'"turn_id"' in data
            assert r.status_code == 200 and done, (r.status_code, data[-300:])
            latencies.append(time.perf_counter() - start)

    limits = httpx.Limits(max_connections=concurrency, max_keepalive_connections=concurrency)
    async with httpx.AsyncClient(timeout=60, limits=limits) as client:
        for _ in range(min(10, concurrency * 2)):  # warm-up
            await client.post(
                url + path, json=body, headers={"Authorization": f"Bearer {tokens[0]}"}
            )
        cpu = process_cpu_s(url.pid)
        start = time.perf_counter()
        await asyncio.gather(*(worker(client) for _ in range(concurrency)))
        elapsed = time.perf_counter() - start
        cpu = process_cpu_s(url.pid) - cpu
    n = len(latencies)
    return pct(latencies, 50) * 1000, pct(latencies, 95) * 1000, n / elapsed, cpu / n * 1000


def main() -> None:
    from aircoach.auth.tokens import DevIssuer
    from aircoach.settings import Settings

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", nargs="+", choices=("fixed", "offline"), default=["fixed"])
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--root", type=Path, nargs="+", default=[ROOT], help="trees to serve")
    parser.add_argument("--cpu", type=int, default=None, help="core to pin the servers to")
    parser.add_argument("--concurrency", type=int, nargs="+", default=[1, 32])
    parser.add_argument(
        "--requests", type=int, nargs=2, default=[REQUESTS[1], REQUESTS[32]], metavar=("C1", "C32")
    )
    parser.add_argument(
        "--variants", nargs="+", default=[v[0].split()[0] for v in VARIANTS], help="a b0 b c d"
    )
    parser.add_argument(
        "--env", nargs="*", default=[], metavar="NAME=VALUE", help="settings for the servers"
    )
    args = parser.parse_args()
    REQUESTS[1], REQUESTS[32] = args.requests
    settings_env = dict(item.split("=", 1) for item in args.env)
    variants = [v for v in VARIANTS if v[0].split()[0] in args.variants]
    cpus = {args.cpu if args.cpu is not None else max(os.sched_getaffinity(0))}

    data_dir = Path(tempfile.mkdtemp(prefix="aircoach-bench-"))
    settings = Settings(_env_file=None, data_dir=data_dir)
    issuer = DevIssuer(data_dir)
    tokens = [
        issuer.mint(f"bench-{i}", audience=settings.auth0_audience, ttl_s=7200)
        for i in range(USERS)
    ]
    figures: dict[tuple[str, str, str, int], list[tuple[float, ...]]] = {}
    for model in args.model:
        print(f"== model {model}, server pinned to CPU {sorted(cpus)}", flush=True)
        for round_ in range(args.rounds):
            for root in args.root:
                # A data dir per tree and model (its own store), with the key the tokens need.
                tree_dir = data_dir / f"{root.name}-{args.root.index(root)}-{model}"
                if not tree_dir.exists():
                    tree_dir.mkdir(parents=True)
                    shutil.copy(issuer.key_path, tree_dir / issuer.key_path.name)
                env = {**settings_env, "DATA_DIR": str(tree_dir), "BENCH_MODEL": model}
                with server("bench.overhead_server", env, root=root, cpus=cpus) as url:
                    for concurrency in args.concurrency:
                        for name, path, stream in variants:
                            row = asyncio.run(run(url, path, stream, concurrency, tokens))
                            figures.setdefault((model, str(root), name, concurrency), []).append(
                                row
                            )
                            print(
                                f"  round {round_ + 1} {root.name:<10} c={concurrency:<2} "
                                f"{name:<16} p50 {row[0]:7.2f} ms  p95 {row[1]:7.2f} ms  "
                                f"{row[2]:7.1f} req/s  server CPU {row[3]:6.2f} ms/req",
                                flush=True,
                            )
    print(f"\nmedians over {args.rounds} round(s):")
    print(
        f"{'model':<8} {'tree':<12} {'c':>2} {'variant':<16} {'p50 ms':>8} {'p95 ms':>8} "
        f"{'req/s':>7} {'CPU ms/req':>10} {'req/s/core':>10}"
    )
    for (model, root, name, concurrency), rows in figures.items():
        p50, p95, rps, cpu = (statistics.median(column) for column in zip(*rows, strict=True))
        print(
            f"{model:<8} {Path(root).name:<12} {concurrency:>2} {name:<16} {p50:8.2f} {p95:8.2f} "
            f"{rps:7.1f} {cpu:10.2f} {1000 / cpu if cpu else 0:10.0f}"
        )


if __name__ == "__main__":
    main()
