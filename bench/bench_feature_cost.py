"""What each part of a turn that the peer benchmark's service does not have costs, on the real
server: the server's CPU per streamed chat request with all its parts, with one part taken
out (`bench/without.py`), and with all of them out. The request is the peer benchmark's (a
short question, the switchable tools off, a new user each time), sent one at a time; the server
is pinned to one core and the client to the other; variants run in interleaved rounds, and
every answer is checked.

Run: `.venv/bin/python bench/bench_feature_cost.py [--rounds 5] [--requests 300] [--json]
[--parts auth,memory] [--against ../other-checkout]`; it prints a Markdown table (median over
rounds, and the difference from the whole turn). `--against` adds the whole turn of another
checkout of the project (a commit before a change: `git worktree add`), in the same rounds;
`--parts ''` leaves the parts out. Needs two cores; on a busy machine the rounds move by
0.1-0.2 ms.
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
from bench.common import ROOT, median, process_cpu_s, server
from bench.without import PARTS

WARM_UP = 40
AGAINST = "against"  # the variant of `--against`


async def _chat(url: str, tokens: list[str], stream: bool) -> None:
    body = {**PEER_REQUEST, "stream": stream}
    async with httpx.AsyncClient(base_url=url, timeout=60) as client:
        for token in tokens:
            response = await client.post(
                "/api/stream_query", json=body, headers={"Authorization": f"Bearer {token}"}
            )
            assert response.status_code == 200, response.text[:300]
            if stream:
                assert '"type":"done"' in response.text, response.text[-300:]
                assert '"type":"error"' not in response.text, response.text[-300:]
            else:
                assert response.json()["status"] == "ok", response.text[:300]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--requests", type=int, default=300)
    parser.add_argument("--json", action="store_true", help="stream: false (a JSON answer)")
    parser.add_argument("--parts", default=",".join(PARTS), help="the parts to take out one by one")
    parser.add_argument("--against", type=Path, help="another checkout: its whole turn too")
    args = parser.parse_args()
    from aircoach.auth.tokens import DevIssuer
    from aircoach.settings import Settings

    if len(os.sched_getaffinity(0)) < 2:
        raise SystemExit("needs two cores: the server on one, the client on the other")
    os.sched_setaffinity(0, {0})
    parts = [p for p in args.parts.split(",") if p]
    variants = ["", *parts, "all"] if parts else [""]
    if args.against is not None:
        variants.append(AGAINST)
    cpu: dict[str, list[float]] = {v: [] for v in variants}
    with tempfile.TemporaryDirectory(prefix="aircoach-cost-") as tmp:
        for round_ in range(args.rounds):
            shift = round_ % len(variants)
            for variant in variants[shift:] + variants[:shift]:
                data_dir = Path(tmp) / f"{variant or 'whole'}-{round_}"
                against = variant == AGAINST
                env = {"DATA_DIR": str(data_dir), "WITHOUT": "" if against else variant}
                root = args.against.resolve() if against else ROOT
                with server("bench.without", env, root=root, cpus={1}) as url:
                    settings = Settings(_env_file=None, data_dir=data_dir)
                    issuer = DevIssuer(data_dir)
                    tokens = [
                        issuer.mint(f"cost-{n}", audience=settings.auth0_audience, ttl_s=3600)
                        for n in range(WARM_UP + args.requests)
                    ]
                    asyncio.run(_chat(url, tokens[:WARM_UP], not args.json))
                    started = process_cpu_s(url.pid)
                    asyncio.run(_chat(url, tokens[WARM_UP:], not args.json))
                    cpu[variant].append((process_cpu_s(url.pid) - started) / args.requests * 1000)
                print(
                    f"round {round_}: {variant or 'whole turn'} {cpu[variant][-1]:.2f} ms",
                    file=sys.stderr,
                )
    whole = median(cpu[""])
    mode = "JSON" if args.json else "SSE"
    print(f"\n{mode}, one request at a time, {args.requests} requests x {args.rounds} rounds\n")
    print("| server | CPU ms per request | difference |")
    print("|---|---|---|")
    for variant in variants:
        label = "the whole turn" if not variant else f"without {variant.replace(',', ', ')}"
        if variant == "all":
            label = "without every part above"
        if variant == AGAINST:
            label = f"the whole turn of {args.against}"
        value = median(cpu[variant])
        print(f"| {label} | {value:.2f} | {value - whole:+.2f} |")


if __name__ == "__main__":
    main()
