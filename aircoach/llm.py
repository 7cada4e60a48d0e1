"""The model factory: the one place that knows which chat model a request gets.

A client is built for each request (inside the running event loop), never cached across
requests: loop-bound HTTP clients must not outlive the loop that made them.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from aircoach.errors import ConfigError
from aircoach.settings import Settings
from aircoach.tools import ToolSpec

if TYPE_CHECKING:
    from langchain_core.language_models import BaseChatModel


def model_label(model: object) -> str:
    """The name the `done` event and the stored turn carry."""
    name = getattr(model, "model_name", None) or getattr(model, "model", None)
    return str(name) if name else type(model).__name__


def build_model(settings: Settings, tools: list[ToolSpec]) -> BaseChatModel:
    provider = settings.resolved_model_provider
    if provider == "offline":
        from aircoach.offline_model import OfflineChatModel

        return OfflineChatModel(tool_examples={t.name: list(t.examples) for t in tools})
    raise ConfigError(f"MODEL_PROVIDER {provider!r} is not supported yet; use 'offline'")
