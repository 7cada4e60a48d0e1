"""The models of a task run (the port `TaskModels`; the providers' implementation is
`aircoach.llm.task_models`), asked for JSON through each provider's native structured output.
Not streamed: the answer is validated whole. The offline provider is the task kind's
deterministic answer, labelled as such.

Clients are built for the run, in its event loop, and closed when the run ends (the same
serverless rule as the chat's models).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal, Protocol

import anyio

if TYPE_CHECKING:
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
    # `input` and `output` tokens over this model's calls, as its provider reported them
    # (empty when it reports none).
    tokens: dict[str, int]

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

    def __init__(self) -> None:
        self.tokens: dict[str, int] = {}  # no language model: nothing to count

    async def generate(self, request: StructuredRequest) -> str:
        definition, prepared = request.definition, request.prepared
        # Matching every cue over a long e-mail is CPU work: off the event loop.
        answer = await anyio.to_thread.run_sync(definition.kind.offline, definition, prepared)
        return json.dumps(answer, ensure_ascii=False)

    async def aclose(self) -> None:
        return None
