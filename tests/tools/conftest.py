"""Fixtures of the tool tests: the fake tool service, and prompt docs whose shipped tools.json
points at it, with retry pauses short enough for a fast suite."""

from __future__ import annotations

import json
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from aircoach.settings import ROOT, Settings
from aircoach.tools.registry import ToolSpec
from tests.tools.fake_service import FakeToolService

# Tool deadlines in tests. A reply that should arrive gets a generous one; a short one is met
# only by a reply that hangs until the service is released.
TIMEOUT_S = 30.0
HANG_TIMEOUT_S = 0.5
# Where a hanging attempt and a prompt one share the deadline (a timeout, then a retry that
# succeeds): the prompt one arrives in milliseconds on loopback.
SHARED_TIMEOUT_S = 5.0
BACKOFF_S = 0.05
HANG = 600.0  # `Reply(delay_s=HANG)`: held until the fake service stops
URL_VARS = {"SEARXNG_URL": "/searx", "KB_SEARCH_URL": "/kb", "LEX_SEARCH_URL": "/lex"}


def shipped_tools() -> dict[str, Any]:
    return json.loads((ROOT / "prompt_docs" / "tools.json").read_text("utf-8"))


def fast(config: dict[str, Any]) -> dict[str, Any]:
    """The config with short retry pauses (and generous deadlines); the rest as shipped."""
    for tool in config["tools"]:
        if http := tool.get("http"):
            http["timeout_s"] = TIMEOUT_S
            http.setdefault("retry", {})["backoff_s"] = BACKOFF_S
    return config


@pytest.fixture
def tool_service() -> Iterator[FakeToolService]:
    service = FakeToolService().start()
    yield service
    service.stop()


def tool_urls(service: FakeToolService) -> dict[str, str]:
    """The tool URL variables pointing at `service`."""
    return {var: service.url + path for var, path in URL_VARS.items()}


@pytest.fixture
def docs_dir(tmp_path: Path) -> Path:
    folder = tmp_path / "prompt_docs"
    folder.mkdir()
    for doc in (ROOT / "prompt_docs").glob("*.md"):
        shutil.copy(doc, folder / doc.name)
    write_tools(folder, fast(shipped_tools()))
    return folder


def write_tools(folder: Path, config: dict[str, Any] | str) -> None:
    text = config if isinstance(config, str) else json.dumps(config, ensure_ascii=False)
    (folder / "tools.json").write_text(text, "utf-8")


@pytest.fixture
def settings(data_dir: Path, docs_dir: Path, request: pytest.FixtureRequest) -> Settings:
    """The HTTP tools point at the fake service when the test uses it; else they are
    unavailable (whatever the developer's shell exports)."""
    env = {}
    if "tool_service" in request.fixturenames:
        env = tool_urls(request.getfixturevalue("tool_service"))
    return Settings(
        _env_file=None, data_dir=data_dir, prompt_docs_dir=docs_dir, prompt_ttl_s=0, tool_env=env
    )


def with_timeout(spec: ToolSpec, seconds: float) -> ToolSpec:
    assert spec.http is not None
    return spec.model_copy(update={"http": spec.http.model_copy(update={"timeout_s": seconds})})
