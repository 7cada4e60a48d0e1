"""A scripted chat model for tests: supports `bind_tools` and streamed tool calls, and fails
loudly when its script runs out or is left unused."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

import anyio
from langchain_core.messages import AIMessage, BaseMessage
from pydantic import Field

from aircoach.llm.offline import OfflineChatModel


class ScriptExhausted(AssertionError):
    pass


class Script:
    """The replies, shared by every copy `bind_tools` makes; records what the model was shown."""

    def __init__(self, replies: list[AIMessage | Exception]):
        self.replies = list(replies)
        self.calls: list[list[BaseMessage]] = []
        self.bound: list[list[str]] = []

    def next(self, messages: list[BaseMessage]) -> AIMessage:
        self.calls.append(list(messages))
        if not self.replies:
            raise ScriptExhausted(
                f"scripted model called {len(self.calls)} times; script has no reply left"
            )
        reply = self.replies.pop(0)
        if isinstance(reply, Exception):
            raise reply
        return reply

    def assert_used(self) -> None:
        assert not self.replies, f"scripted model left {len(self.replies)} replies unused"


def text(content: str) -> AIMessage:
    return AIMessage(content)


def call(name: str, **args: Any) -> AIMessage:
    return AIMessage(
        "",
        tool_calls=[
            {"name": name, "args": args, "id": f"call_{name}_{len(args)}", "type": "tool_call"}
        ],
    )


class ScriptedChatModel(OfflineChatModel):
    """The offline model's streaming, with replies taken from a `Script` instead of computed."""

    model_name: str = "scripted"
    script: Any = Field(exclude=True)

    @property
    def _llm_type(self) -> str:
        return "scripted"

    def bind_tools(self, tools: Any, **kwargs: Any) -> Any:
        self.script.bound.append([getattr(t, "name", str(t)) for t in tools])
        return self

    def respond(self, messages: list[BaseMessage]) -> AIMessage:
        return self.script.next(messages)


class ScriptedModels:
    """A model provider (`Services.build(models=...)`): each request gets a scripted model."""

    def __init__(self, script: Script):
        self.script = script

    async def models_for(self, tools: list[Any]) -> list[Any]:
        return [ScriptedChatModel(script=self.script)]


class HeldModels(ScriptedModels):
    """Scripted models whose stream waits first on `hold(n)`, `n` the model's call number
    (1, 2, ... across the provider's requests): a test holds a turn while it runs, e.g. with
    `anyio.sleep_forever()` for the call its turn is stopped at, or an event it sets later.
    `opened`: the models given out, one a request, in order; `closed`: those closed since."""

    def __init__(self, script: Script, hold: Callable[[int], Awaitable[None]]):
        super().__init__(script)
        self.hold = hold
        self.calls = 0
        self.opened: list[Any] = []
        self.closed: list[Any] = []

    async def models_for(self, tools: list[Any]) -> list[Any]:
        model = _Held(script=self.script, provider=self)
        self.opened.append(model)
        return [model]

    def was_closed(self, model: Any) -> bool:
        return any(closed is model for closed in self.closed)


class _Held(ScriptedChatModel):
    provider: Any = Field(exclude=True)

    async def aclose(self) -> None:
        """Its clients, closed (`aircoach.turn.providers.aclose_model`)."""
        self.provider.closed.append(self)

    async def _astream(self, *args: Any, **kwargs: Any) -> Any:
        self.provider.calls += 1
        await self.provider.hold(self.provider.calls)
        async for chunk in super()._astream(*args, **kwargs):
            yield chunk


def never_answers(
    call: int, started: anyio.Event | None = None
) -> Callable[[int], Awaitable[None]]:
    """A `HeldModels` hold: the model's `call`-th call never answers (its turn runs until it is
    stopped or interrupted), and sets `started` as it begins; the other calls answer."""

    async def hold(n: int) -> None:
        if n == call:
            if started is not None:
                started.set()
            await anyio.sleep_forever()

    return hold
