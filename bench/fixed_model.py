"""A trivial chat model for the benchmarks: the same fixed short reply every time, streamed in
a fixed number of chunks, like the fake model of the LangGraph service the issue compares us
with. It does no retrieval and no tool scoring, so "our platform" and "the agent itself" can be
measured without the offline model's own work."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator, Sequence
from typing import Any

from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage, AIMessageChunk, BaseMessage
from langchain_core.outputs import ChatGeneration, ChatGenerationChunk, ChatResult

from aircoach.tools.registry import ToolSpec

# 323 characters in 44 chunks: the reply of the comparison in issue 20.
REPLY = (
    "Prima del decollo imposta il QNH comunicato dalla torre o dall'ATIS nella finestrella "
    "di Kollsman: l'altimetro indicherà così l'altitudine sul livello medio del mare. "
    "Controlla che a terra l'indicazione corrisponda all'elevazione del campo entro "
    "sessanta piedi, altrimenti lo strumento va ricontrollato prima del rullaggio."
)
CHUNKS = 44


def _chunks(text: str, count: int) -> list[str]:
    words = text.split(" ")
    per = len(words) / count
    cuts = [round(i * per) for i in range(count + 1)]
    parts = [" ".join(words[cuts[i] : cuts[i + 1]]) for i in range(count)]
    return [part + (" " if i < count - 1 else "") for i, part in enumerate(parts)]


REPLY_CHUNKS = _chunks(REPLY, CHUNKS)
assert "".join(REPLY_CHUNKS) == REPLY and len(REPLY_CHUNKS) == CHUNKS


class FixedReplyModel(BaseChatModel):
    """Always `REPLY`, in `CHUNKS` chunks; binds tools but never calls one."""

    model_name: str = "fixed"

    @property
    def _llm_type(self) -> str:
        return "aircoach-bench-fixed"

    def bind_tools(self, tools: Sequence[Any], *, tool_choice: Any = None, **kwargs: Any) -> Any:
        return self

    def _generate(
        self, messages: list[BaseMessage], stop: Any = None, run_manager: Any = None, **kw: Any
    ) -> ChatResult:
        return ChatResult(generations=[ChatGeneration(message=AIMessage(REPLY))])

    def _stream(
        self, messages: list[BaseMessage], stop: Any = None, run_manager: Any = None, **kw: Any
    ) -> Iterator[ChatGenerationChunk]:
        for text in REPLY_CHUNKS:
            yield ChatGenerationChunk(message=AIMessageChunk(content=text))

    async def _astream(
        self, messages: list[BaseMessage], stop: Any = None, run_manager: Any = None, **kw: Any
    ) -> AsyncIterator[ChatGenerationChunk]:
        for text in REPLY_CHUNKS:
            yield ChatGenerationChunk(message=AIMessageChunk(content=text))


class FixedModels:
    """A `ModelProvider` that gives every request the fixed-reply model."""

    async def models_for(self, tools: list[ToolSpec]) -> list[BaseChatModel]:
        return [FixedReplyModel()]
