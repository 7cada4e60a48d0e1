"""The model factory: the one place that knows which chat model a request gets.

A client is built for each request (inside the running event loop) and closed at the end of
the turn, never cached across requests: loop-bound HTTP clients (google-genai's, httpx's) must
not outlive the loop that made them. Provider packages are imported only when configured.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from pydantic import SecretStr

from aircoach.errors import ConfigError
from aircoach.settings import ModelSettings
from aircoach.tls import shared_tls_context, tls_context
from aircoach.tools.registry import ToolSpec

if TYPE_CHECKING:
    from langchain_core.language_models import BaseChatModel

# The client placeholder key for OpenAI-compatible servers that ignore it (Ollama, vLLM).
_UNUSED_KEY = "unused"


@dataclass(frozen=True)
class ModelRef:
    """A provider and a model name, as in `MODEL_FALLBACK=openai:gpt-4o-mini`."""

    provider: str
    name: str | None = None

    @classmethod
    def parse(cls, value: str) -> ModelRef:
        """Parse a value `Settings` has validated. Split on the first colon only: Ollama
        names carry tags ("openai:llama3.1:8b")."""
        provider, _, name = value.partition(":")
        return cls(provider, name or None)


def primary_ref(settings: ModelSettings) -> ModelRef:
    """`MODEL_PROVIDER` (or the provider a key implies) and `MODEL_NAME`."""
    return ModelRef(settings.resolved_model_provider, settings.model_name)


def fallback_ref(settings: ModelSettings) -> ModelRef | None:
    """The model of `MODEL_FALLBACK`, or None when it is not set."""
    return ModelRef.parse(settings.model_fallback) if settings.model_fallback else None


def base_url_for(settings: ModelSettings, ref: ModelRef) -> str | None:
    """`MODEL_BASE_URL` for a model of the primary's provider (the primary, and a fallback of
    the same provider: both go through the gateway or server it names); None for another
    provider, whose client then reads its own `GEMINI_BASE_URL` or `OPENAI_BASE_URL` (a
    Gemini endpoint means nothing to an OpenAI client)."""
    if ref.provider == settings.resolved_model_provider:
        return settings.model_base_url
    return None


def build_model(settings: ModelSettings, tools: list[ToolSpec]) -> BaseChatModel:
    """The primary model: `MODEL_PROVIDER` (or the provider a key implies) and `MODEL_NAME`."""
    ref = primary_ref(settings)
    return _build(settings, tools, ref, base_url=base_url_for(settings, ref))


def build_fallback_model(settings: ModelSettings, tools: list[ToolSpec]) -> BaseChatModel | None:
    """The second model of `MODEL_FALLBACK`, or None when it is not set."""
    ref = fallback_ref(settings)
    return (
        None if ref is None else _build(settings, tools, ref, base_url=base_url_for(settings, ref))
    )


def build_provider_model(
    settings: ModelSettings, ref: ModelRef, *, base_url: str | None, temperature: float
) -> BaseChatModel:
    """A Gemini or OpenAI-compatible client for `ref` at `temperature` (the structured tasks
    use their own, lower one). Not for the offline provider: a task has its own offline model."""
    if ref.provider == "gemini":
        return _gemini(settings, ref.name or settings.model_name, base_url, temperature)
    if ref.provider == "openai":
        return _openai(settings, ref.name or settings.model_name, base_url, temperature)
    raise ValueError(f"provider {ref.provider!r} has no client")


class ConfiguredModels:
    """The models `MODEL_PROVIDER`, `MODEL_NAME` and `MODEL_FALLBACK` say."""

    def __init__(self, settings: ModelSettings):
        self.settings = settings

    async def models_for(self, tools: list[ToolSpec]) -> list[BaseChatModel]:
        settings = self.settings
        if {settings.resolved_model_provider, (settings.model_fallback or "offline")} != {
            "offline"
        }:
            # What the clients share (the TLS context) is built off the event loop, once, so
            # building a client per request never blocks the loop.
            await shared_tls_context()
        primary = build_model(settings, tools)
        fallback = build_fallback_model(settings, tools)
        return [primary] if fallback is None else [primary, fallback]


def _build(
    settings: ModelSettings, tools: list[ToolSpec], ref: ModelRef, *, base_url: str | None
) -> BaseChatModel:
    # A chat turn's model always streams from its provider, also for a JSON turn (which the
    # agent runs without LangGraph's token stream): MODEL_TIMEOUT_S, a read timeout, is then
    # the wait for the next part of the answer, never for the whole of a long one.
    if ref.provider == "gemini":
        return _gemini(settings, ref.name or settings.model_name, base_url, streaming=True)
    if ref.provider == "openai":
        return _openai(settings, ref.name or settings.model_name, base_url, streaming=True)
    from aircoach.llm.offline import OfflineChatModel

    return OfflineChatModel(tool_examples={t.name: list(t.examples) for t in tools})


def _gemini(
    settings: ModelSettings,
    name: str,
    base_url: str | None,
    temperature: float | None = None,
    *,
    streaming: bool = False,
) -> BaseChatModel:
    from langchain_google_genai import ChatGoogleGenerativeAI

    key = settings.google_api_key
    if not key:
        raise ConfigError("the Gemini model needs GOOGLE_API_KEY or GEMINI_API_KEY")
    return ChatGoogleGenerativeAI(
        model=name,
        google_api_key=key,
        base_url=base_url or settings.gemini_base_url,
        temperature=settings.model_temperature if temperature is None else temperature,
        timeout=settings.model_timeout_s,
        max_output_tokens=settings.model_max_output_tokens,
        streaming=streaming,
        # The SDK counts attempts, and reads 0 as "its default of 5": one more than retries.
        max_retries=settings.model_max_retries + 1,
        client_args={"verify": tls_context(), "ssl": tls_context()},
    )


def _openai(
    settings: ModelSettings,
    name: str,
    base_url: str | None,
    temperature: float | None = None,
    *,
    streaming: bool = False,
) -> BaseChatModel:
    import httpx
    from langchain_openai import ChatOpenAI

    base_url = base_url or settings.openai_base_url
    key = settings.openai_api_key or (_UNUSED_KEY if base_url else None)
    if not key:
        raise ConfigError(
            "the OpenAI model needs OPENAI_API_KEY, or OPENAI_BASE_URL for a local server"
        )
    # ChatOpenAI sends its `max_tokens` as `max_completion_tokens`, which OpenAI wants (its
    # reasoning models refuse `max_tokens`) but Ollama and LM Studio do not read: a server of our
    # own (`OPENAI_BASE_URL`) gets the `max_tokens` every OpenAI-compatible server reads.
    cap = settings.model_max_output_tokens
    return ChatOpenAI(
        model=name,
        api_key=SecretStr(key),
        base_url=base_url,
        temperature=settings.model_temperature if temperature is None else temperature,
        timeout=settings.model_timeout_s,
        max_retries=settings.model_max_retries,
        max_completion_tokens=None if base_url else cap,
        extra_body={"max_tokens": cap} if base_url else None,
        streaming=streaming,
        # Our own client: langchain-openai's default one is cached process-wide, which would
        # carry its pooled connections from one event loop into the next.
        http_async_client=httpx.AsyncClient(timeout=settings.model_timeout_s, verify=tls_context()),
    )
