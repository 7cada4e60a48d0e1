"""Fixtures for the real model clients: fake Gemini and OpenAI servers on loopback, and apps
configured to use them."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest

from aircoach.app import create_app
from aircoach.settings import ROOT, Settings
from tests.llm.fakes import FakeModelServer


@pytest.fixture
def gemini_api() -> Iterator[FakeModelServer]:
    server = FakeModelServer().start()
    yield server
    server.stop()
    server.assert_used()


@pytest.fixture
def openai_api() -> Iterator[FakeModelServer]:
    server = FakeModelServer().start()
    yield server
    server.stop()
    server.assert_used()


@pytest.fixture
def model_settings(data_dir: Path) -> Callable[..., Settings]:
    """Settings for a real provider; small timeouts and no retries keep failure tests fast."""

    def make(**overrides: Any) -> Settings:
        values: dict[str, Any] = {
            "data_dir": data_dir,
            "prompt_docs_dir": ROOT / "prompt_docs",
            "model_timeout_s": 2.0,
            "model_max_retries": 0,
            **overrides,
        }
        return Settings(_env_file=None, **values)

    return make


@pytest.fixture
def gemini_settings(model_settings, gemini_api) -> Callable[..., Settings]:
    def make(**overrides: Any) -> Settings:
        return model_settings(
            **{"google_api_key": "fake-key", "model_base_url": gemini_api.url, **overrides}
        )

    return make


@asynccontextmanager
async def app_client(settings: Settings) -> AsyncIterator[tuple[httpx.AsyncClient, Any]]:
    app = create_app(settings)
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://t") as client:
        yield client, app
