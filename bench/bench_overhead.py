"""Turn overhead: (a) bare SSE, (b) bare agent, (c) the full /api/stream_query path, against a
real uvicorn server on 127.0.0.1, at concurrency 1 and 32. Prints p50, p95 and requests/s."""

from __future__ import annotations

import asyncio
import sys
import tempfile
import time
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.common import pct, server
from bench.overhead_server import QUERY

REQUESTS = {1: 150, 32: 640}
USERS = 64


async def run(
    url: str, path: str, concurrency: int, tokens: list[str]
) -> tuple[list[float], float]:
    latencies: list[float] = []
    queue: asyncio.Queue[int] = asyncio.Queue()
    for i in range(REQUESTS[concurrency]):
        queue.put_nowait(i)

    async def worker(client: httpx.AsyncClient) -> None:
        while not queue.empty():
            i = queue.get_nowait()
            headers = {"Authorization": f"Bearer {tokens[i % len(tokens)]}"}
            start = time.perf_counter()
            async with client.stream(
                "POST", url + path, json={"query": QUERY}, headers=headers
            ) as r:
                body = b"".join([chunk async for chunk in r.aiter_bytes()])
            assert r.status_code == 200 and b"event: done" in body, (r.status_code, body[-300:])
            latencies.append(time.perf_counter() - start)

    limits = httpx.Limits(max_connections=concurrency, max_keepalive_connections=concurrency)
    async with httpx.AsyncClient(timeout=60, limits=limits) as client:
        for _ in range(min(10, concurrency * 2)):  # warm-up
            await client.post(
                url + path, json={"query": QUERY}, headers={"Authorization": f"Bearer {tokens[0]}"}
            )
        start = time.perf_counter()
        await asyncio.gather(*(worker(client) for _ in range(concurrency)))
        elapsed = time.perf_counter() - start
    return latencies, len(latencies) / elapsed


def main() -> None:
    from aircoach.auth.tokens import DevIssuer
    from aircoach.settings import Settings

    data_dir = Path(tempfile.mkdtemp(prefix="aircoach-bench-"))
    settings = Settings(_env_file=None, data_dir=data_dir)
    issuer = DevIssuer(data_dir)
    tokens = [
        issuer.mint(f"bench-{i}", audience=settings.auth0_audience, ttl_s=7200)
        for i in range(USERS)
    ]
    results: dict[tuple[str, int], tuple[float, float, float]] = {}
    with server("bench.overhead_server", {"DATA_DIR": str(data_dir)}) as url:
        for concurrency in (1, 32):
            for name, path in (
                ("a bare SSE", "/bench/bare"),
                ("b bare agent", "/bench/agent"),
                ("c full path", "/api/stream_query"),
            ):
                lat, rps = asyncio.run(run(url, path, concurrency, tokens))
                results[(name[0], concurrency)] = (pct(lat, 50) * 1000, pct(lat, 95) * 1000, rps)
                print(
                    f"concurrency {concurrency:>2}  {name:<13} p50 {pct(lat, 50) * 1000:7.2f} ms  "
                    f"p95 {pct(lat, 95) * 1000:7.2f} ms  {rps:7.1f} req/s  (n={len(lat)})",
                    flush=True,
                )
    b1, c1 = results[("b", 1)], results[("c", 1)]
    b32, c32 = results[("b", 32)], results[("c", 32)]
    print(
        f"agent runtime cost (b-a) p50 at c=1: {b1[0] - results[('a', 1)][0]:.2f} ms; ours (c-b): {c1[0] - b1[0]:.2f} ms"
    )
    print(f"ratio c/b p50 at concurrency 1: {c1[0] / b1[0]:.2f}x (target <= 1.30x)")
    print(f"ratio c/b throughput at concurrency 32: {c32[2] / b32[2]:.0%} (target >= 75%)")


if __name__ == "__main__":
    main()
