"""Memory: resident memory after 10,000 distinct users' turns in one process with the default
MEMORY_MAX_THREADS, measured against the process right after its first turn."""

from __future__ import annotations

import asyncio
import gc
import sys
import tempfile
import time
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.common import rss_mb

USERS = 10_000


async def main() -> None:
    from aircoach.app import create_app
    from aircoach.auth.tokens import DevIssuer
    from aircoach.settings import Settings

    data_dir = Path(tempfile.mkdtemp(prefix="aircoach-mem-"))
    settings = Settings(_env_file=None, data_dir=data_dir, log_level="WARNING")
    app = create_app(settings)
    issuer = DevIssuer(data_dir)
    async with httpx.AsyncClient(
        transport=httpx.ASGITransport(app=app), base_url="http://t", timeout=60
    ) as client:

        async def turn(i: int) -> None:
            token = issuer.mint(f"user-{i}", audience=settings.auth0_audience)
            r = await client.post(
                "/api/stream_query",
                json={"query": "Come si regola l'altimetro?"},
                headers={"Authorization": f"Bearer {token}"},
            )
            assert r.status_code == 200 and "event: done" in r.text

        await turn(0)
        gc.collect()
        first = rss_mb()
        start = time.perf_counter()
        for i in range(1, USERS):
            await turn(i)
            if i % 2500 == 0:
                print(f"  {i:>6} users  rss {rss_mb():7.1f} MB", flush=True)
        elapsed = time.perf_counter() - start
        gc.collect()
        last = rss_mb()
        memory = app.state.services.memory
        print(
            f"rss after first turn {first:.1f} MB, after {USERS} users {last:.1f} MB: "
            f"growth {last - first:.1f} MB (target < 50 MB)"
        )
        print(
            f"threads in memory {len(memory)} (max {settings.memory_max_threads}); "
            f"{USERS / elapsed:.0f} turns/s in-process"
        )


if __name__ == "__main__":
    asyncio.run(main())
