"""What the turn log costs a turn (issue 30): store calls per turn, and process CPU per turn
with the real SQLite turn log against a turn log that does nothing (no claim, no event
written, no cancel poll), in process (ASGI transport), the fixed-reply model (44 chunks), each
turn by a new user. Prints figures; it is not a timed test.

    .venv/bin/python bench/bench_turn_log.py --turns 300
"""

from __future__ import annotations

import argparse
import asyncio
import tempfile
import time
from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import httpx

from aircoach.turn.log import LoggedEvent, RunningTurn, TurnLogStore
from bench.bench_turn_stages import QUERY, WARM_UP
from bench.fixed_model import FixedModels


class CountedLog:
    """A turn log that counts the calls made to it (each one is a store round trip)."""

    def __init__(self, inner: TurnLogStore):
        self.inner = inner
        self.calls: Counter[str] = Counter()

    def __getattr__(self, name: str) -> Any:
        method = getattr(self.inner, name)

        async def counted(*args: Any, **kwargs: Any) -> Any:
            self.calls[name] += 1
            return await method(*args, **kwargs)

        return counted


class NoLog:
    """A turn log that keeps nothing: the turn as it ran before issue 30."""

    async def append(
        self, user_id: str, turn_id: str, events: Sequence[LoggedEvent], *, expires_at: float
    ) -> None:
        return None

    async def read(
        self, user_id: str, turn_id: str, *, after: int = 0, limit: int = 500
    ) -> list[LoggedEvent]:
        return []

    async def claim(
        self, user_id: str, thread: str, turn_id: str, *, now: float, expires_at: float
    ) -> RunningTurn | None:
        return None

    async def take_over(self, *args: Any, **kwargs: Any) -> bool:
        return True

    async def release(self, user_id: str, thread: str, turn_id: str) -> None:
        return None

    async def renew(self, user_id: str, turn_id: str, *, expires_at: float) -> None:
        return None

    async def running(self, user_id: str, turn_id: str, *, now: float) -> RunningTurn | None:
        return None

    async def request_cancel(self, user_id: str, turn_id: str, *, now: float) -> bool:
        return False

    async def cancel_requested(self, turn_id: str) -> bool:
        return False


async def _run(turns: int, stream: bool, logged: bool) -> tuple[float, Counter[str]]:
    from aircoach.app import create_app
    from aircoach.auth.tokens import DevIssuer
    from aircoach.services import Services, build_turn_log
    from aircoach.settings import Settings

    data_dir = Path(tempfile.mkdtemp(prefix="aircoach-turnlog-"))
    settings = Settings(_env_file=None, data_dir=data_dir, log_level="WARNING")
    counted = CountedLog(build_turn_log(settings) if logged else NoLog())
    app = create_app(
        services=Services.build(settings, models=FixedModels(), turn_log=counted)  # type: ignore[arg-type]
    )
    issuer = DevIssuer(data_dir)
    tokens = [
        issuer.mint(f"log-{i}", audience=settings.auth0_audience, ttl_s=7200)
        for i in range(turns + WARM_UP)
    ]
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://bench") as client:
        cpu = 0.0
        for i, token in enumerate(tokens):
            if i == WARM_UP:
                counted.calls.clear()
                cpu = time.process_time()
            response = await client.post(
                "/api/stream_query",
                json={"query": QUERY, "stream": stream},
                headers={"Authorization": f"Bearer {token}"},
            )
            assert response.status_code == 200, response.text[:300]
        cpu = time.process_time() - cpu
    return cpu / turns * 1000, counted.calls


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--turns", type=int, default=300)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    for stream in (True, False):
        with_log: list[float] = []
        without: list[float] = []
        calls: Counter[str] = Counter()
        for _ in range(args.rounds):  # interleaved: the machine's load falls on both
            cpu, calls = asyncio.run(_run(args.turns, stream, logged=True))
            with_log.append(cpu)
            cpu, _ = asyncio.run(_run(args.turns, stream, logged=False))
            without.append(cpu)
        a, b = sorted(with_log)[len(with_log) // 2], sorted(without)[len(without) // 2]
        per_turn = {name: n / args.turns for name, n in sorted(calls.items())}
        print(f"{'SSE' if stream else 'JSON'}: {args.turns} turns x {args.rounds} rounds")
        print(f"  store calls per turn (turn log): {per_turn}")
        print(f"  CPU per turn: {a:.2f} ms with the turn log, {b:.2f} ms without")
        print(f"  the log adds {a - b:.2f} ms ({(a - b) / b * 100:.1f}% of the turn)")


if __name__ == "__main__":
    main()
