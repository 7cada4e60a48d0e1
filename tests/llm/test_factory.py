"""The model factory and its settings: which provider, which client options, and
configuration errors at start-up rather than on the first chat."""

from __future__ import annotations

import subprocess
import sys

import httpx
import pytest

from aircoach.errors import ConfigError
from aircoach.llm.factory import ModelRef, build_fallback_model, build_model
from aircoach.llm.task_models import ConfiguredTaskModels, ProviderTaskModel
from aircoach.settings import ROOT, Settings
from aircoach.turn.providers import model_label


def _settings(**values):
    return Settings(_env_file=None, **values)


@pytest.mark.parametrize(
    ("values", "provider"),
    [
        ({}, "offline"),
        ({"google_api_key": "k"}, "gemini"),
        ({"gemini_api_key": "k"}, "gemini"),
        ({"google_api_key": "k", "model_provider": "offline"}, "offline"),
        ({"model_provider": "openai", "openai_base_url": "http://localhost:11434/v1"}, "openai"),
    ],
)
def test_provider_resolution(values, provider):
    assert _settings(**values).resolved_model_provider == provider


@pytest.mark.integration  # imports the Gemini SDK (about 0.6 s)
def test_gemini_client_options():
    model = build_model(
        _settings(google_api_key="k", model_timeout_s=7, model_base_url="http://127.0.0.1:9"), []
    )
    assert type(model).__name__ == "ChatGoogleGenerativeAI"
    assert model_label(model) == "gemini-2.5-flash"
    # MODEL_MAX_RETRIES counts retries, the SDK counts attempts (its default: 6)
    assert (model.max_retries, model.timeout) == (2, 7)
    assert model.base_url == "http://127.0.0.1:9"


@pytest.mark.integration  # imports the OpenAI SDK (about 0.9 s)
def test_openai_client_options_for_ollama():
    settings = _settings(
        model_provider="openai",
        model_name="llama3.1:8b",
        openai_base_url="http://localhost:11434/v1",
        model_max_retries=0,
    )
    model = build_model(settings, [])
    assert type(model).__name__ == "ChatOpenAI"
    assert model_label(model) == "llama3.1:8b"
    assert (model.openai_api_base, model.max_retries) == ("http://localhost:11434/v1", 0)
    # Ours, one per request: langchain-openai's default client is cached process-wide and
    # would carry its pooled connections from one event loop into the next.
    client = model.http_async_client
    assert isinstance(client, httpx.AsyncClient) and client.timeout.read == settings.model_timeout_s
    assert build_model(settings, []).http_async_client is not client


@pytest.mark.integration  # builds a Gemini fallback: imports its SDK (about 0.6 s)
def test_fallback_parses_provider_and_tagged_name():
    assert ModelRef.parse("openai:llama3.1:8b") == ModelRef("openai", "llama3.1:8b")
    assert ModelRef.parse("offline") == ModelRef("offline")
    settings = _settings(
        google_api_key="k",
        model_fallback="gemini:gemini-2.5-flash-lite",
        gemini_base_url="http://127.0.0.1:9",
    )
    assert model_label(build_fallback_model(settings, [])) == "gemini-2.5-flash-lite"
    assert build_fallback_model(_settings(), []) is None


@pytest.mark.integration  # builds Gemini and OpenAI clients: imports both SDKs (about 1.5 s)
async def test_a_task_fallback_of_the_primarys_provider_uses_model_base_url():
    """As the chat's fallback (tests/llm/test_failures.py, over loopback): MODEL_BASE_URL for
    the primary's provider, the provider's own setting for another one."""
    gateway, ollama = "http://127.0.0.1:9/gateway", "http://127.0.0.1:9/v1"
    both = {"google_api_key": "k", "model_base_url": gateway, "openai_base_url": ollama}
    same = _settings(**both, model_fallback="gemini:gemini-2.5-flash-lite")
    other = _settings(**both, model_fallback="openai:llama")
    gemini = await ConfiguredTaskModels(same).open("fallback", temperature=0)
    openai = await ConfiguredTaskModels(other).open("fallback", temperature=0)
    assert isinstance(gemini, ProviderTaskModel) and isinstance(openai, ProviderTaskModel)
    assert gemini.chat_model.base_url == gateway  # type: ignore[attr-defined]
    assert openai.chat_model.openai_api_base == ollama  # type: ignore[attr-defined]
    await gemini.aclose()
    await openai.aclose()


@pytest.mark.parametrize(
    ("values", "named"),
    [
        ({"model_fallback": "anthropic:claude"}, "MODEL_FALLBACK"),
        ({"model_fallback": "openai"}, "MODEL_FALLBACK"),
        ({"model_provider": "gemini"}, "GOOGLE_API_KEY"),
        ({"model_provider": "openai"}, "OPENAI_API_KEY"),
        ({"model_fallback": "openai:gpt-4o-mini"}, "OPENAI_API_KEY"),
        ({"model_fallback": "gemini:gemini-2.5-flash-lite"}, "GOOGLE_API_KEY"),
    ],
)
def test_bad_model_configuration_fails_at_start_up(values, named):
    with pytest.raises(ConfigError, match=named):
        _settings(**values)


@pytest.mark.integration
def test_provider_packages_are_imported_only_when_configured():
    code = (
        "import sys\n"
        "from aircoach.app import create_app\n"
        "from aircoach.llm.factory import build_model\n"
        "from aircoach.settings import Settings\n"
        "build_model(Settings(_env_file=None), [])\n"
        "print(sorted(m for m in ('langchain_google_genai', 'langchain_openai', 'google.genai')"
        " if m in sys.modules))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True
    )
    assert out.stdout.strip() == "[]"
