"""What a task's kind must provide: the code half of a task (the docs half is its folder).

The engine is the same for every task: the fallback policy, the parse and schema stages, the
review queue, the stored runs. A kind brings what depends on the task: its input, how the
model's request is prepared, its business rules, verifiers and quality checks, and a
deterministic offline answer so the task runs with no model at all.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache
from typing import TYPE_CHECKING, Any, Protocol

from pydantic import BaseModel

if TYPE_CHECKING:
    from aircoach.tasks.definition import TaskDefinition
    from aircoach.tasks.records import Issue


@dataclass(frozen=True)
class Prepared:
    """One request to the model: `payload` is what the model reads (JSON), `context` what the
    kind's checks need (the canonical text, the candidates)."""

    shrunk: bool
    payload: dict[str, Any]
    context: Any


@dataclass(frozen=True)
class Checked:
    """A valid output, cleaned by the quality checks, and their warnings."""

    output: dict[str, Any]
    warnings: list[Issue]


class TaskKind(Protocol):
    name: str
    input_model: type[BaseModel]

    def load_rules(self, where: str, definition: TaskDefinition) -> Any:
        """Parse and cross-check the kind's own files of the task folder; `ConfigError`."""
        ...

    def sender(self, task_input: BaseModel) -> str | None:
        """The address whose contact record gives the run's `customer`, if any."""
        ...

    def versions(self, definition: TaskDefinition) -> dict[str, str]:
        """`candidates_version` and `stoplist_version` for the PipelineVersion."""
        ...

    def prepare(
        self, definition: TaskDefinition, task_input: BaseModel, *, shrink: bool
    ) -> Prepared:
        """CPU-bound and pure: the engine runs it in a worker thread."""
        ...

    def check(self, definition: TaskDefinition, prepared: Prepared, data: Any) -> Checked:
        """Business rules and verifiers (raise `StageFailure`), then quality (warnings)."""
        ...

    def offline(self, definition: TaskDefinition, prepared: Prepared) -> dict[str, Any]:
        """A deterministic answer without a model (the offline model)."""
        ...


@cache
def kinds() -> dict[str, TaskKind]:
    """The kinds a `task.json` may name."""
    from aircoach.tasks.triage import EmailTriage

    return {"email_triage": EmailTriage()}
