"""The Lambda zip `make bundle` builds and serverless.yml ships (dist/aircoach-lambda.zip; built
first when missing): files, zipped and unzipped size, the largest packages; then its cold start
as Lambda runs it: unzipped, python3.12, nothing written beside the modules (`/var/task` is
read-only), the Mangum handler answering one chat turn in a fresh process. Against the same
tree without its bytecode (what a cold start compiled before the bundle shipped it) and a bare
`import fastapi, langchain.agents` from the same tree; median of several rounds, interleaved."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import zipfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.bench_coldstart import INVOKE
from bench.common import median
from deploy.bundle import ZIP, build, python312, unzip_as_lambda
from tests.lambda_events import chat_event

ROUNDS = 5


def main() -> None:
    if not ZIP.exists():
        build()
    with zipfile.ZipFile(ZIP) as bundle:
        infos = [i for i in bundle.infolist() if not i.is_dir()]
    unzipped = sum(i.file_size for i in infos) / 2**20
    by_top: dict[str, int] = {}
    for info in infos:
        top = info.filename.split("/")[0].split("-")[0]
        by_top[top] = by_top.get(top, 0) + info.file_size
    print(
        f"Lambda bundle {ZIP.name} (requirements.txt, python 3.12 manylinux, without boto3): "
        f"{len(infos)} files, {ZIP.stat().st_size / 2**20:.1f} MB zipped, "
        f"{unzipped:.1f} MB unzipped (target < 150 MB)"
    )
    for name, size in sorted(by_top.items(), key=lambda kv: -kv[1])[:8]:
        print(f"  {size / 2**20:6.1f} MB  {name}")
    cold_start()


def cold_start() -> None:
    from aircoach.auth.tokens import DevIssuer
    from aircoach.settings import Settings

    with tempfile.TemporaryDirectory(prefix="aircoach-bundle-") as tmp:
        shipped, bare = Path(tmp) / "shipped", Path(tmp) / "without-bytecode"
        unzip_as_lambda(ZIP, shipped)
        shutil.copytree(shipped, bare, ignore=shutil.ignore_patterns("__pycache__"))
        data_dir = Path(tmp) / "data"
        settings = Settings(_env_file=None, data_dir=data_dir)
        token = DevIssuer(data_dir).mint("cold-user", audience=settings.auth0_audience)
        chat = json.dumps(chat_event(token, "Come si regola l'altimetro?"))
        python = str(python312())

        def timed(root: Path, *args: str) -> float:
            environment = {
                "PATH": os.environ["PATH"],
                "HOME": tmp,
                "PYTHONPATH": str(root),
                "PYTHONDONTWRITEBYTECODE": "1",
                "DATA_DIR": str(data_dir),
                "LOG_LEVEL": "WARNING",
            }
            started = time.perf_counter()
            subprocess.run([python, *args], cwd=tmp, env=environment, check=True)
            return time.perf_counter() - started

        timed(shipped, "-c", INVOKE, chat)  # sets the SQLite file up, warms the disk cache
        runs: dict[str, list[float]] = {"imports": [], "shipped": [], "bare": []}
        for _ in range(ROUNDS):
            runs["imports"].append(timed(shipped, "-c", "import fastapi, langchain.agents"))
            runs["shipped"].append(timed(shipped, "-c", INVOKE, chat))
            runs["bare"].append(timed(bare, "-c", INVOKE, chat))
    imports, shipped_s, bare_s = (median(runs[k]) for k in ("imports", "shipped", "bare"))
    print(f"cold start under {python} (median of {ROUNDS}, no bytecode written):")
    print(f"  import fastapi, langchain.agents       {imports * 1000:7.0f} ms")
    print(
        f"  chat turn, the bundle as shipped       {shipped_s * 1000:7.0f} ms   "
        f"{shipped_s / imports:.2f}x the imports"
    )
    print(
        f"  chat turn, the same without bytecode   {bare_s * 1000:7.0f} ms   "
        f"{bare_s / shipped_s:.2f}x the bundle as shipped"
    )


if __name__ == "__main__":
    main()
