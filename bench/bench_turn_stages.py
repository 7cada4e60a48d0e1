"""Where a chat turn's time goes, stage by stage: prints the median and p95 of each stage of
the turn's summary log line (auth, prompt, user data, history, agent build, agent run, model,
tools, persist, encode) over a few hundred turns, each by a new user, in process (the app
behind httpx's ASGI transport: no sockets), and the process CPU per turn.

Run: `.venv/bin/python bench/bench_turn_stages.py [--turns 300] [--model fixed|offline]
[--json] [--peer-request]`; it prints the Markdown table of `docs/performance.md`. `fixed` is the trivial model of `bench/fixed_model.py` (a fixed 323-character reply
in 44 chunks); `offline` is the offline model (it scores the prompt's passages). Quota off,
SQLite store, the shipped prompt docs. The stage figures are the ones an operator reads on the
summary line in production.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import httpx

from bench.common import median, pct
from bench.fixed_model import FixedModels
from bench.overhead_server import QUERY

WARM_UP = 20
# The request of the peer benchmark (`../shared/peer-bench`, `bench_ab.py`): the parts it
# measures, with the switchable tools off.
PEER_REQUEST = {
    "query": "Che cos'è il QNH?",
    "tools": {
        "domanda_teoria": False,
        "web_search": False,
        "kb_search": False,
        "lex_search": False,
    },
}


class _Summaries(logging.Handler):
    """Keeps the fields of every turn summary line."""

    def __init__(self) -> None:
        super().__init__(logging.INFO)
        self.lines: list[dict[str, Any]] = []

    def emit(self, record: logging.LogRecord) -> None:
        fields = getattr(record, "fields", None)
        if isinstance(fields, dict) and fields.get("event") == "turn":
            self.lines.append(fields)


async def _turns(
    model: str, turns: int, stream: bool, body: dict[str, Any]
) -> tuple[list[dict[str, Any]], float]:
    from aircoach.app import create_app
    from aircoach.auth.tokens import DevIssuer
    from aircoach.services import Services
    from aircoach.settings import Settings

    data_dir = Path(tempfile.mkdtemp(prefix="aircoach-stages-"))
    settings = Settings(_env_file=None, data_dir=data_dir, log_level="WARNING")
    issuer = DevIssuer(data_dir)
    parts: dict[str, Any] = {"models": FixedModels()} if model == "fixed" else {}
    app = create_app(services=Services.build(settings, **parts))
    summaries = _Summaries()
    turn_log = logging.getLogger("aircoach.turn.turn")
    tokens = [
        issuer.mint(f"stages-{i}", audience=settings.auth0_audience, ttl_s=7200)
        for i in range(turns + WARM_UP)
    ]
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://bench") as client:
        cpu = 0.0
        for i, token in enumerate(tokens):
            if i == WARM_UP:
                # INFO for the turn logger only, after the warm-up; its lines go nowhere else.
                turn_log.addHandler(summaries)
                turn_log.setLevel(logging.INFO)
                turn_log.propagate = False
                cpu = time.process_time()
            response = await client.post(
                "/api/stream_query",
                json={**body, "stream": stream},
                headers={"Authorization": f"Bearer {token}"},
            )
            assert response.status_code == 200, response.text[:300]
        cpu = time.process_time() - cpu
    turn_log.removeHandler(summaries)
    return summaries.lines, cpu / turns * 1000


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--turns", type=int, default=300)
    parser.add_argument("--model", choices=("fixed", "offline"), default="fixed")
    parser.add_argument("--json", action="store_true", help="stream: false (a JSON answer)")
    parser.add_argument(
        "--peer-request",
        action="store_true",
        help="the peer benchmark's request (a short question, the switchable tools off)",
    )
    args = parser.parse_args()
    body = PEER_REQUEST if args.peer_request else {"query": QUERY}
    lines, cpu_ms = asyncio.run(_turns(args.model, args.turns, not args.json, body))
    assert len(lines) == args.turns, len(lines)
    print(
        f"{args.turns} turns, model {args.model}, {'JSON' if args.json else 'SSE'}, "
        f"each by a new user, in process (ASGI transport)\n"
    )
    # Markdown, as docs/performance.md shows it: paste the table over the one there.
    print("| part | median ms | p95 ms |")
    print("|---|---|---|")
    keys = [k for k in lines[0] if k.endswith("_ms")]
    for key in keys:
        values = [float(line[key]) for line in lines]
        print(f"| {key.removesuffix('_ms')} | {median(values):.2f} | {pct(values, 95):.2f} |")
    print(f"| process CPU per turn (server and in-process client) | {cpu_ms:.2f} | |")


if __name__ == "__main__":
    main()
