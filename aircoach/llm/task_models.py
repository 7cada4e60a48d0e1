"""The task models of the configured providers (`aircoach.tasks.models.TaskModels`), asked for
JSON through each provider's native structured output: Gemini's response schema
(`responseJsonSchema`, via langchain-google-genai) and the OpenAI-compatible
`response_format: json_schema` with `strict: true` (OpenAI, Ollama, vLLM, SGLang). Clients
are built for the run, in its event loop, and closed when the run ends."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from aircoach.llm.factory import base_url_for, build_provider_model, fallback_ref, primary_ref
from aircoach.settings import ModelSettings
from aircoach.tasks.models import (
    OfflineTaskModel,
    StructuredModel,
    StructuredRequest,
    Which,
)
from aircoach.tls import shared_tls_context
from aircoach.turn.providers import aclose_model, model_label

if TYPE_CHECKING:
    from langchain_core.language_models import BaseChatModel


class ProviderTaskModel:
    """A Gemini or OpenAI-compatible chat model asked for JSON following the task's schema."""

    notice: str | None = None

    def __init__(self, chat_model: BaseChatModel, provider: str):
        self.chat_model = chat_model
        self.provider = provider
        self.label = model_label(chat_model)
        self.tokens: dict[str, int] = {}

    async def generate(self, request: StructuredRequest) -> str:
        from langchain_core.messages import HumanMessage, SystemMessage

        messages = [SystemMessage(request.system), HumanMessage(request.user)]
        if request.feedback:
            messages.append(HumanMessage(request.feedback))
        if self.provider == "gemini":
            options: dict[str, Any] = {
                "response_mime_type": "application/json",
                "response_json_schema": request.schema,
            }
        else:
            options = {
                "response_format": {
                    "type": "json_schema",
                    "json_schema": {
                        "name": request.definition.name,
                        "strict": True,
                        "schema": request.schema,
                    },
                }
            }
        message = await self.chat_model.ainvoke(messages, **options)
        usage = getattr(message, "usage_metadata", None)
        if usage:
            for name in ("input", "output"):
                self.tokens[name] = self.tokens.get(name, 0) + int(usage.get(f"{name}_tokens", 0))
        return message.text

    async def aclose(self) -> None:
        await aclose_model(self.chat_model)


class ConfiguredTaskModels:
    """`MODEL_PROVIDER`/`MODEL_NAME` first, then `MODEL_FALLBACK`: the chat's own models."""

    def __init__(self, settings: ModelSettings):
        self.settings = settings

    async def open(self, which: Which, *, temperature: float) -> StructuredModel | None:
        settings = self.settings
        ref = primary_ref(settings) if which == "primary" else fallback_ref(settings)
        if ref is None:
            return None
        if ref.provider == "offline":
            return OfflineTaskModel()
        await shared_tls_context()  # built off the loop, once
        base_url = base_url_for(settings, ref)
        chat_model = build_provider_model(settings, ref, base_url=base_url, temperature=temperature)
        return ProviderTaskModel(chat_model, ref.provider)
