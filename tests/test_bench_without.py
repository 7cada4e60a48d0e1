"""`bench/without.py` takes parts of a turn out of a running server by patching the code (a
diagnostic for the per-turn cost, docs/performance.md): it follows that code and breaks when
a signature moves. Every part taken out, a chat turn still streams to its `done`; in a child
process, since the patches last as long as the process."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

from tests.helpers import ROOT

pytestmark = pytest.mark.integration

_ONE_TURN = textwrap.dedent(
    """
    import asyncio, json, sys, tempfile
    from pathlib import Path

    import httpx

    from bench.bench_turn_stages import PEER_REQUEST
    from bench.without import PARTS, apply

    assert apply("all") == list(PARTS)
    from aircoach.app import create_app
    from aircoach.auth.tokens import DevIssuer
    from aircoach.settings import Settings

    async def main() -> None:
        data_dir = Path(tempfile.mkdtemp(prefix="without-"))
        settings = Settings(_env_file=None, data_dir=data_dir)
        token = DevIssuer(data_dir).mint("u-1", audience=settings.auth0_audience, ttl_s=600)
        transport = httpx.ASGITransport(app=create_app(settings))
        async with httpx.AsyncClient(transport=transport, base_url="http://t") as client:
            for stream in (True, False):
                response = await client.post(
                    "/api/stream_query",
                    json={**PEER_REQUEST, "stream": stream},
                    headers={"Authorization": f"Bearer {token}"},
                )
                print(response.status_code, response.text[-300:].replace("\\n", " "))

    asyncio.run(main())
    """
)


def test_a_turn_with_every_part_taken_out_still_answers():
    done = subprocess.run(
        [sys.executable, "-c", _ONE_TURN],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
        env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(ROOT), "LOG_LEVEL": "WARNING"},
    )
    assert done.returncode == 0, done.stderr[-3000:]
    sse, answer = done.stdout.splitlines()
    assert sse.startswith("200 ") and '"type":"done"' in sse and '"type":"error"' not in sse
    assert answer.startswith("200 ") and '"status":"ok"' in answer
