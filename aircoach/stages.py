"""Where a request's time goes: wall-clock milliseconds per named stage of a chat turn, for
the turn's summary log line (and `bench/bench_turn_stages.py`, which reads that line).

A stage that runs several times in a turn (the model after a tool, each tool call, each event
encoded) adds up; stages that overlap (parallel tool calls, the model streaming while events
are encoded) are each counted in full, so the stages need not sum to the latency.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager, nullcontext

from aircoach import telemetry

# The stages of a turn, in the order it meets them; every summary line has each of them.
STAGES = (
    "auth",  # token verification (or the cached result)
    "admission",  # idempotency key, quota, and the claim of the conversation's thread
    "prompt",  # prompt snapshot, tool switches, the docs' system prompt
    "user_data",  # the user's profile and quiz progress sections
    "memory",  # the long-term memory: the message's items kept, the relevant ones recalled
    "history",  # freshness read, and the thread's reseed from the store when needed
    "agent_build",  # the turn's models and agent
    "agent_run",  # waiting on the agent: model calls, tool calls, LangGraph itself
    "model",  # inside the model calls
    "tools",  # inside the tool calls
    "grounding",  # the citation guard on the answer (and its rewrite, for a JSON answer)
    "persist",  # storing the turn
    "encode",  # events to SSE bytes (or the JSON answer)
)
# Stages that get a span of their own when tracing is on: `encode` runs once per event.
TRACED = frozenset(STAGES) - {"encode"}
_UNTRACED = nullcontext()


class Stages:
    """Seconds spent per stage, accumulated over one request."""

    __slots__ = ("_seconds",)

    def __init__(self) -> None:
        self._seconds: dict[str, float] = {}

    def add(self, stage: str, seconds: float) -> None:
        self._seconds[stage] = self._seconds.get(stage, 0.0) + seconds

    @contextmanager
    def timed(self, stage: str) -> Iterator[None]:
        start = time.perf_counter()
        try:
            with telemetry.span(stage) if stage in TRACED else _UNTRACED:
                yield
        finally:
            self.add(stage, time.perf_counter() - start)

    def fields(self) -> dict[str, float]:
        """`<stage>_ms` for every stage of `STAGES` (0 for one the turn skipped)."""
        return {f"{stage}_ms": round(self._seconds.get(stage, 0.0) * 1000, 2) for stage in STAGES}
