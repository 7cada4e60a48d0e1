"""Scripted task models: each answer (a raw string, or an exception to raise) in order; they
fail loudly when the script runs out or is left unused, and record every request."""

from __future__ import annotations

from typing import Any

from aircoach.tasks.models import StructuredRequest


class ScriptedTaskModel:
    notice: str | None = None

    def __init__(self, label: str, replies: list[Any]):
        self.label = label
        self.replies = list(replies)
        self.requests: list[StructuredRequest] = []
        self.closed = 0
        self.tokens: dict[str, int] = {}

    async def generate(self, request: StructuredRequest) -> str:
        self.requests.append(request)
        if not self.replies:
            raise AssertionError(f"scripted task model {self.label!r} has no reply left")
        reply = self.replies.pop(0)
        if isinstance(reply, BaseException):
            raise reply
        return reply(request) if callable(reply) else reply

    async def aclose(self) -> None:
        self.closed += 1


class ScriptedTaskModels:
    """`primary` and `fallback` scripts; `fallback=None`: no MODEL_FALLBACK."""

    def __init__(self, primary: list[Any], fallback: list[Any] | None = None):
        self.primary = ScriptedTaskModel("scripted-primary", primary)
        self.fallback = (
            None if fallback is None else ScriptedTaskModel("scripted-fallback", fallback)
        )
        self.temperatures: list[float] = []

    async def open(self, which: str, *, temperature: float) -> ScriptedTaskModel | None:
        self.temperatures.append(temperature)
        return self.primary if which == "primary" else self.fallback

    def assert_used(self) -> None:
        for model in (self.primary, self.fallback):
            if model is not None:
                assert not model.replies, f"{model.label}: {len(model.replies)} replies unused"
