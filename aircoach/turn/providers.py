"""What a turn needs from the model providers (`aircoach.llm` implements it; the composition
root picks): the chat models of one request, their label, their closing. Importing this never
imports LangChain."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Protocol

from aircoach.tools.registry import ToolSpec

if TYPE_CHECKING:
    from langchain_core.language_models import BaseChatModel


class ModelProvider(Protocol):
    """Builds the chat models of one request, in the order they are tried (the primary
    first, then the fallback): created in the request's event loop, closed when it ends."""

    async def models_for(self, tools: list[ToolSpec]) -> list[BaseChatModel]: ...


def model_label(model: object) -> str:
    """The name the `done` event and the stored turn carry."""
    name = getattr(model, "model_name", None) or getattr(model, "model", None)
    return str(name).removeprefix("models/") if name else type(model).__name__


async def aclose_model(model: Any) -> None:
    """Close the HTTP clients a model opened, in the loop that opened them."""
    aclose = getattr(model, "aclose", None)  # ChatGoogleGenerativeAI
    if aclose is not None:
        await aclose()
    http_client = getattr(model, "http_async_client", None)  # ChatOpenAI, given ours
    if http_client is not None:
        await http_client.aclose()
