"""Fixtures for the real model clients: fake Gemini and OpenAI servers on loopback, and apps
configured to use them."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest

from aircoach.settings import ROOT, Settings
from tests.helpers import app_with, asgi_client
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


# Model deadlines in tests. A reply that should arrive gets a generous one; a short one is
# met only by a reply that hangs until the test releases it.
MODEL_TIMEOUT_S = 30.0
HANG_TIMEOUT_S = 0.5
# Where a hanging read and a prompt one share the deadline (the first chunks of a stream that
# then stalls): the prompt one arrives in milliseconds on loopback.
SHARED_TIMEOUT_S = 5.0


@pytest.fixture
def model_settings(data_dir: Path) -> Callable[..., Settings]:
    """Settings for a real provider; no retries keep failure tests fast."""

    def make(**overrides: Any) -> Settings:
        values: dict[str, Any] = {
            "data_dir": data_dir,
            "prompt_docs_dir": ROOT / "prompt_docs",
            "model_timeout_s": MODEL_TIMEOUT_S,
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
    app = app_with(settings)
    async with asgi_client(app) as client:
        yield client, app
