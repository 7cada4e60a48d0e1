"""The server under attack: `python -m aircoach serve` in a subprocess on 127.0.0.1, as `make
run` starts it, with prompt docs that add an HTTP tool whose URL holds a key, a fake service
for that tool, and the signed webhook on. One server for the module (starting one takes
seconds); each test leaves it as it found it."""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from aircoach.auth.tokens import DevIssuer
from aircoach.settings import ROOT, Settings
from tests.helpers import copy_prompt_docs, shipped_docs
from tests.load.harness import ServerProcess
from tests.tools.fake_service import FakeToolService, Reply

METEO_KEY = "K3Y-S3GRETA-0042"
WEBHOOK_SECRET = "webhook-s3cret"
METEO_TOOL = {
    "name": "meteo",
    "description": "METAR aggiornato di un aeroporto, dato il codice ICAO.",
    "parameters": {
        "type": "object",
        "properties": {"icao": {"type": "string", "description": "Codice ICAO."}},
        "required": ["icao"],
    },
    "default_enabled": False,
    "examples": ["Dammi il METAR di Linate", "Che METAR c'è a Malpensa"],
    "http": {
        "url": "${TOOL_METEO_URL}/v1/${TOOL_METEO_KEY}/metar",
        "method": "GET",
        "timeout_s": 30,
    },
}


@dataclass
class Target:
    server: ServerProcess
    docs: Path
    data: Path
    sqlite: Path
    meteo: FakeToolService
    token: Callable[..., str]

    @property
    def url(self) -> str:
        return self.server.url

    def headers(self, sub: str = "attacker", **kwargs: object) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.token(sub, **kwargs)}"}


def tools_json(*extra: dict) -> str:
    config = json.loads((ROOT / "prompt_docs" / "tools.json").read_text("utf-8"))
    config["tools"].extend(extra)
    return json.dumps(config, ensure_ascii=False)


def server_env(data: Path, **env: str) -> dict[str, str]:
    """Embedded defaults whatever the developer's shell exports."""
    return {
        "DATA_DIR": str(data),
        "MODEL_PROVIDER": "offline",
        "MONGODB_URI": "",
        "AUTH0_DOMAIN": "",
        "PROMPT_BUCKET": "",
        "LOG_LEVEL": "INFO",
        **env,
    }


@pytest.fixture(scope="module")
def target(tmp_path_factory: pytest.TempPathFactory, _dev_key: bytes) -> Iterator[Target]:
    root = tmp_path_factory.mktemp("abuse")
    data = root / "data"
    data.mkdir()
    (data / "dev_issuer_key.pem").write_bytes(_dev_key)
    docs = copy_prompt_docs(root / "docs", markdown_only=True)
    for key, text in shipped_docs().items():  # the task routes are attacked too
        if key.startswith("tasks/"):
            (docs / key).parent.mkdir(parents=True, exist_ok=True)
            (docs / key).write_text(text, "utf-8")
    (docs / "tools.json").write_text(tools_json(METEO_TOOL), "utf-8")
    sqlite = root / "fresh" / "db" / "aircoach.sqlite3"  # created by the server
    meteo = FakeToolService().start()
    meteo.plan(f"/v1/{METEO_KEY}/metar", Reply(200, {"results": [{"raw": "LIML 221020Z"}]}))
    previous_umask = os.umask(0o022)  # the usual one: files would be 0644 unless made private
    server = ServerProcess(
        root / "server",
        server_env(
            data,
            PROMPT_DOCS_DIR=str(docs),
            SQLITE_PATH=str(sqlite),
            TOOL_METEO_URL=meteo.url,
            TOOL_METEO_KEY=METEO_KEY,
            UPDATE_DOCS_SECRET=WEBHOOK_SECRET,
        ),
    )
    try:
        server.start()
    finally:
        os.umask(previous_umask)
    issuer = DevIssuer(data)
    audience = Settings(_env_file=None).auth0_audience

    def token(sub: str = "attacker", **kwargs: object) -> str:
        return issuer.mint(sub, audience=audience, **kwargs)  # type: ignore[arg-type]

    yield Target(server, docs, data, sqlite, meteo, token)
    alive = server.alive
    log = server.log()
    server.stop()
    meteo.stop()
    assert alive, f"the server died under attack:\n{log}"
