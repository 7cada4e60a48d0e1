"""Cold start: a fresh process invoking the Lambda handler with an API Gateway v2 event, to the
end of the first response, for a chat turn and for /api/health, against the import baseline
`python -c "import fastapi, langchain.agents"`. Median of several runs of each."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.common import ROOT, median
from tests.lambda_events import chat_event, http_api_event

RUNS = 7

INVOKE = """
import json, sys
from functions.chat import handler
event = json.loads(sys.argv[1])
response = handler(event, {})
assert response["statusCode"] == 200, response
body = response["body"]
assert ("event: done" in body) or body.startswith("{"), body[-200:]
"""


def timed(args: list[str], env: dict[str, str]) -> float:
    start = time.perf_counter()
    subprocess.run(args, cwd=ROOT, env=env, check=True, stdout=subprocess.DEVNULL)
    return time.perf_counter() - start


def main() -> None:
    from aircoach.auth.tokens import DevIssuer
    from aircoach.settings import Settings

    data_dir = Path(tempfile.mkdtemp(prefix="aircoach-cold-"))
    settings = Settings(_env_file=None, data_dir=data_dir)
    token = DevIssuer(data_dir).mint("cold-user", audience=settings.auth0_audience, ttl_s=7200)
    env = {**os.environ, "PYTHONPATH": str(ROOT), "DATA_DIR": str(data_dir), "LOG_LEVEL": "WARNING"}
    chat = json.dumps(chat_event(token, "Come si regola l'altimetro?"))
    health = json.dumps(http_api_event("/api/health", method="GET"))
    subprocess.run(
        [sys.executable, "-c", INVOKE, chat], cwd=ROOT, env=env, check=True
    )  # seeds SQLite, warms disk cache
    baseline, chats, healths = [], [], []
    for _ in range(RUNS):
        baseline.append(timed([sys.executable, "-c", "import fastapi, langchain.agents"], env))
        chats.append(timed([sys.executable, "-c", INVOKE, chat], env))
        healths.append(timed([sys.executable, "-c", INVOKE, health], env))
    b, c, h = median(baseline), median(chats), median(healths)
    print(f"import fastapi, langchain.agents  median {b * 1000:7.1f} ms")
    print(
        f"cold chat turn (Lambda handler)   median {c * 1000:7.1f} ms   ratio {c / b:.2f}x baseline (target <= 1.25x)"
    )
    print(
        f"cold /api/health (Lambda handler) median {h * 1000:7.1f} ms   ratio {h / c:.2f}x chat (target <= 0.50x)"
    )


if __name__ == "__main__":
    main()
