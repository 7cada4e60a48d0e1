"""What the store's thread hops cost a turn, one request at a time and 32 at once: the server's
CPU and context switches per streamed chat request with the whole turn, with every store
operation run on the event loop instead of a thread (`bench/without.py`'s `hops` lesion: a
measurement, never a way to run), and with every part the peer's service lacks taken out
(`all`). The request is the peer benchmark's (a new user each time); the server is pinned to
one core, as in the peer benchmark, and the client to the other.

A hop to a store thread and back wakes a sleeping thread on the server's one core, and the
two threads then take the GIL from each other: context switches, each with its CPU. With one
request at a time every hop pays them; with 32 at once the threads find work waiting.

Run: `.venv/bin/python bench/bench_hops.py [--rounds 2] [--requests 400] [--json]`; it prints
a Markdown table (median over rounds). Needs two cores.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import httpx

from bench.bench_turn_stages import PEER_REQUEST
from bench.common import median, process_cpu_s, server

WARM_UP = 40
VARIANTS = {"": "the whole turn", "hops": "store operations on the loop", "all": "every part out"}


def _switches(pid: int) -> tuple[int, int]:
    """Voluntary and involuntary context switches of every thread of `pid` so far."""
    counts = [0, 0]
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            for line in (task / "status").read_text().splitlines():
                if line.startswith("voluntary_ctxt_switches"):
                    counts[0] += int(line.split()[1])
                elif line.startswith("nonvoluntary_ctxt_switches"):
                    counts[1] += int(line.split()[1])
        except FileNotFoundError:  # a thread that ended meanwhile
            continue
    return counts[0], counts[1]


async def _load(url: str, tokens: list[str], concurrency: int, stream: bool) -> None:
    body = {**PEER_REQUEST, "stream": stream}
    waiting = list(tokens)
    limits = httpx.Limits(max_connections=concurrency)
    async with httpx.AsyncClient(base_url=url, timeout=60, limits=limits) as client:

        async def one_at_a_time() -> None:
            while waiting:
                token = waiting.pop()
                response = await client.post(
                    "/api/stream_query", json=body, headers={"Authorization": f"Bearer {token}"}
                )
                assert response.status_code == 200, response.text[:300]
                assert ('"type":"done"' in response.text) if stream else response.json()["answer"]

        await asyncio.gather(*(one_at_a_time() for _ in range(concurrency)))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--requests", type=int, default=400)
    parser.add_argument("--json", action="store_true", help="stream: false (a JSON answer)")
    args = parser.parse_args()
    from aircoach.auth.tokens import DevIssuer
    from aircoach.settings import Settings

    if len(os.sched_getaffinity(0)) < 2:
        raise SystemExit("needs two cores: the server on one, the client on the other")
    os.sched_setaffinity(0, {0})
    stream, n = not args.json, args.requests
    rows: dict[tuple[str, int], list[tuple[float, float, float]]] = {}
    with tempfile.TemporaryDirectory(prefix="aircoach-hops-") as tmp:
        for round_ in range(args.rounds):
            for variant in VARIANTS:
                data_dir = Path(tmp) / f"{variant or 'whole'}-{round_}"
                env = {"DATA_DIR": str(data_dir), "WITHOUT": variant}
                with server("bench.without", env, cpus={1}) as url:
                    settings = Settings(_env_file=None, data_dir=data_dir)
                    issuer = DevIssuer(data_dir)
                    tokens = [
                        issuer.mint(f"hops-{i}", audience=settings.auth0_audience, ttl_s=3600)
                        for i in range(WARM_UP + 2 * n)
                    ]
                    asyncio.run(_load(url, tokens[:WARM_UP], 1, stream))
                    for concurrency, batch in ((1, tokens[WARM_UP:-n]), (32, tokens[-n:])):
                        cpu, (vol, invol) = process_cpu_s(url.pid), _switches(url.pid)
                        asyncio.run(_load(url, batch, concurrency, stream))
                        vol2, invol2 = _switches(url.pid)
                        figures = (
                            (process_cpu_s(url.pid) - cpu) / n * 1000,
                            (vol2 - vol) / n,
                            (invol2 - invol) / n,
                        )
                        rows.setdefault((variant, concurrency), []).append(figures)
                        print(
                            f"round {round_}: {variant or 'whole'} c={concurrency} {figures}",
                            file=sys.stderr,
                        )
    mode = "SSE" if stream else "JSON"
    print(f"\n{mode}, {n} requests x {args.rounds} rounds per row, server on one core\n")
    print("| server | c | CPU ms per request | context switches per request (voluntary, not) |")
    print("|---|---|---|---|")
    for (variant, concurrency), runs in rows.items():
        cpu_ms = median([r[0] for r in runs])
        waits, preempted = median([r[1] for r in runs]), median([r[2] for r in runs])
        print(
            f"| {VARIANTS[variant]} | {concurrency} | {cpu_ms:.2f} | {waits:.1f}, {preempted:.1f} |"
        )


if __name__ == "__main__":
    main()
