"""The models of a task run, asked for JSON through each provider's native structured output:
Gemini's response schema (`responseJsonSchema`, via langchain-google-genai) and the
OpenAI-compatible `response_format: json_schema` with `strict: true` (OpenAI, Ollama, vLLM,
SGLang). Not streamed: the answer is validated whole. The offline provider is the task kind's
deterministic answer, labelled as such.

Clients are built for the run, in its event loop, and closed when the run ends (the same
serverless rule as the chat's models).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal, Protocol

import anyio

from aircoach.llm.factory import ModelRef, build_provider_model, fallback_ref, primary_ref
from aircoach.settings import ModelSettings
from aircoach.tls import shared_tls_context
from aircoach.turn.providers import aclose_model, model_label

if TYPE_CHECKING:
    from langchain_core.language_models import BaseChatModel

    from aircoach.tasks.definition import Prepared, TaskDefinition

Which = Literal["primary", "fallback"]

OFFLINE_NOTICE = "deterministic rule-based answer of the offline model, not a language model"


@dataclass(frozen=True)
class StructuredRequest:
    """One attempt: what the model reads and the schema its answer must follow."""

    definition: TaskDefinition
    prepared: Prepared
    feedback: str | None = None  # why the previous attempt was refused

    @property
    def system(self) -> str:
        return self.definition.prompt

    @property
    def user(self) -> str:
        return json.dumps(self.prepared.payload, ensure_ascii=False)

    @property
    def schema(self) -> dict[str, Any]:
        return self.definition.model_schema

    @property
    def temperature(self) -> float:
        return self.definition.manifest.temperature


class StructuredModel(Protocol):
    label: str
    # Set when the answers are not a language model's: it becomes a warning of every result.
    notice: str | None

    async def generate(self, request: StructuredRequest) -> str:
        """The model's raw answer (to be validated); raises when the call itself fails."""
        ...

    async def aclose(self) -> None: ...


class TaskModels(Protocol):
    """The models a run may use, in the order of the fallback policy."""

    async def open(self, which: Which, *, temperature: float) -> StructuredModel | None:
        """The model, built now in the running loop; None when that slot is not configured."""
        ...


class OfflineTaskModel:
    """The task kind's deterministic answer: the task runs with no model and no key."""

    label = "offline-rules"
    notice: str | None = OFFLINE_NOTICE

    async def generate(self, request: StructuredRequest) -> str:
        definition, prepared = request.definition, request.prepared
        # Matching every cue over a long e-mail is CPU work: off the event loop.
        answer = await anyio.to_thread.run_sync(definition.kind.offline, definition, prepared)
        return json.dumps(answer, ensure_ascii=False)

    async def aclose(self) -> None:
        return None


class ProviderTaskModel:
    """A Gemini or OpenAI-compatible chat model asked for JSON following the task's schema."""

    notice: str | None = None

    def __init__(self, chat_model: BaseChatModel, provider: str):
        self.chat_model = chat_model
        self.provider = provider
        self.label = model_label(chat_model)

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
        return message.text

    async def aclose(self) -> None:
        await aclose_model(self.chat_model)


class ConfiguredTaskModels:
    """`MODEL_PROVIDER`/`MODEL_NAME` first, then `MODEL_FALLBACK`: the chat's own models."""

    def __init__(self, settings: ModelSettings):
        self.settings = settings

    async def open(self, which: Which, *, temperature: float) -> StructuredModel | None:
        settings = self.settings
        ref: ModelRef | None
        if which == "primary":
            ref, base_url = primary_ref(settings), settings.model_base_url
        else:
            ref, base_url = fallback_ref(settings), None
        if ref is None:
            return None
        if ref.provider == "offline":
            return OfflineTaskModel()
        await shared_tls_context()  # built off the loop, once
        chat_model = build_provider_model(settings, ref, base_url=base_url, temperature=temperature)
        return ProviderTaskModel(chat_model, ref.provider)
