"""What the cyclic garbage collector costs a turn at two thresholds of its young generation:
Python 3.11's and 3.12's default (700) and the one `aircoach/startup.py` sets (2,000, the
default of 3.13). In process (the app behind httpx's ASGI transport, the offline model,
SQLite), the peer benchmark's request with a new user each time; the collector's own CPU is
timed by its callbacks (the thread's CPU time from its start to its stop).

Run: `taskset -c 1 .venv/bin/python bench/bench_gc.py [--turns 1000] [--runs 3]`; each run is
a fresh process per threshold, interleaved; it prints a Markdown table (medians over runs).
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.common import median

THRESHOLDS = (700, 2000)
WARM_UP = 20


async def _turns(threshold: int, turns: int) -> dict[str, float]:
    import httpx

    from aircoach.app import create_app
    from aircoach.auth.tokens import DevIssuer
    from aircoach.settings import Settings
    from bench.bench_turn_stages import PEER_REQUEST

    spent = [0.0, 0.0, 0.0]
    count = [0, 0, 0]
    started = [0.0]

    def timed(phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            started[0] = time.thread_time()
        else:
            spent[info["generation"]] += time.thread_time() - started[0]
            count[info["generation"]] += 1

    data_dir = Path(tempfile.mkdtemp(prefix="aircoach-gc-"))
    settings = Settings(_env_file=None, data_dir=data_dir, log_level="WARNING")
    issuer = DevIssuer(data_dir)
    app = create_app(settings)
    tokens = [
        issuer.mint(f"gc-{n}", audience=settings.auth0_audience, ttl_s=3600)
        for n in range(WARM_UP + turns)
    ]
    body = {**PEER_REQUEST, "stream": True}
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://bench") as client:
        for n, token in enumerate(tokens):
            if n == WARM_UP:  # after the first chat, which sets the app's threshold
                gc.set_threshold(threshold, *gc.get_threshold()[1:])
                gc.callbacks.append(timed)
                cpu = time.process_time()
            response = await client.post(
                "/api/stream_query", json=body, headers={"Authorization": f"Bearer {token}"}
            )
            assert response.status_code == 200 and '"type":"done"' in response.text
    return {
        "turn_ms": (time.process_time() - cpu) / turns * 1000,
        "gc_ms": sum(spent) / turns * 1000,
        "young": count[0] / turns * 1000,
        "middle": count[1] / turns * 1000,
        "full": count[2] / turns * 1000,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--turns", type=int, default=1000)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--one", type=int, help=argparse.SUPPRESS)  # a child: one threshold
    args = parser.parse_args()
    if args.one is not None:
        figures = asyncio.run(_turns(args.one, args.turns))
        figures["rss_mb"] = int(Path("/proc/self/statm").read_text().split()[1]) * 4096 / 2**20
        print(json.dumps(figures))
        return
    results: dict[int, list[dict[str, float]]] = {t: [] for t in THRESHOLDS}
    for run in range(args.runs):
        for threshold in THRESHOLDS if run % 2 == 0 else THRESHOLDS[::-1]:
            child = [sys.executable, __file__, "--one", str(threshold), "--turns", str(args.turns)]
            out = subprocess.run(child, check=True, capture_output=True, text=True).stdout
            results[threshold].append(json.loads(out.splitlines()[-1]))
            print(f"run {run}: {threshold} {results[threshold][-1]}", file=sys.stderr)
    print(f"\n{args.turns} streamed turns per run, median of {args.runs} runs\n")
    print(
        "| young threshold | collector CPU ms per turn | collections per 1,000 turns "
        "(young, middle, full) | process CPU ms per turn | RSS MB |"
    )
    print("|---|---|---|---|---|")
    for threshold, runs in results.items():

        def m(key: str, runs: list[dict[str, float]] = runs) -> float:
            return median([r[key] for r in runs])

        print(
            f"| {threshold} | {m('gc_ms'):.3f} | {m('young'):.0f}, {m('middle'):.0f}, "
            f"{m('full'):.0f} | {m('turn_ms'):.2f} | {m('rss_mb'):.1f} |"
        )


if __name__ == "__main__":
    main()
