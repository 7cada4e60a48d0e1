"""Tasks as versioned docs: `tasks/<name>/` in the prompt docs, loaded with the other docs.

A task folder holds `task.json` (the manifest below), `prompt.md` (the model's instructions),
`schema.json` (the strict JSON Schema of the output) and whatever its kind reads (the triage
kind: `rules.json`, `stoplist.txt`, `offline.json`). Editing any of them is a docs push and a
new task version (a hash of the folder's files); the chat's `prompt_version` does not move.

Docs that do not validate never become the served snapshot (as a bad `tools.json`): the error
names the file and the field.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from functools import cached_property
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from aircoach.errors import ConfigError
from aircoach.json_schema import canonical_json, schema_problem
from aircoach.prompts.keys import docs_version, folder_versions

if TYPE_CHECKING:
    from aircoach.tasks.records import Issue

M = TypeVar("M", bound=BaseModel)

TASKS_AREA = "tasks"
MANIFEST = "task.json"
PROMPT = "prompt.md"
SCHEMA = "schema.json"
_NAME_PATTERN = r"^[a-z][a-z0-9_]{0,39}$"
# Path segments of the task routes (`/api/tasks/review`, `/api/tasks/runs/...`).
RESERVED_NAMES = ("review", "runs", "stats")
# Keys of a JSON Schema that describe it rather than constrain it; providers' structured output
# modes refuse some of them, so the model is sent the schema without them.
_SCHEMA_META_KEYS = ("$schema", "$id", "title", "description")


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class Policy(_Strict):
    """The fallback policy: `attempts` with the full request, then `shrink_attempts` with the
    shrunk one, then `fallback_attempts` on `MODEL_FALLBACK` (shrunk), then the review queue."""

    attempts: int = Field(default=3, ge=1, le=5)
    shrink_attempts: int = Field(default=1, ge=0, le=3)
    fallback_attempts: int = Field(default=1, ge=0, le=3)


class CandidateLimits(_Strict):
    top_n: int = Field(default=100, ge=1, le=500)
    shrink_top_n: int = Field(default=50, ge=1, le=500)
    body_chars: int = Field(default=8000, ge=100, le=100_000)
    shrink_body_chars: int = Field(default=4000, ge=100, le=100_000)


class Manifest(_Strict):
    """`task.json`."""

    name: str = Field(pattern=_NAME_PATTERN)
    kind: str
    title: str = Field(min_length=1, max_length=200)
    description: str = Field(default="", max_length=2000)
    permission: str | None = Field(default=None, min_length=1, max_length=100)
    temperature: float = Field(default=0.1, ge=0, le=1)
    policy: Policy = Field(default_factory=Policy)
    candidates: CandidateLimits = Field(default_factory=CandidateLimits)


@dataclass(frozen=True)
class TaskDefinition:
    """One task of one docs snapshot. Immutable: a run keeps the definition it started with."""

    manifest: Manifest
    prompt: str
    schema: dict[str, Any] = field(repr=False)
    files: dict[str, str] = field(repr=False)  # every file of the folder, by relative path
    version: str
    schema_hash: str
    kind: TaskKind = field(repr=False, compare=False)  # the kind `manifest.kind` names
    rules: Any = field(default=None, repr=False)  # what the kind parsed from its own files

    @property
    def name(self) -> str:
        return self.manifest.name

    @property
    def prompt_hash(self) -> str:
        return hashlib.sha256(self.prompt.encode()).hexdigest()[:12]

    @property
    def permission(self) -> str:
        """The token permission that may run the task (default `tasks:<name>`)."""
        return self.manifest.permission or f"tasks:{self.name}"

    @cached_property
    def validator(self) -> Any:
        """The compiled JSON Schema validator (built once per definition)."""
        from jsonschema import Draft202012Validator

        return Draft202012Validator(self.schema)

    @property
    def model_schema(self) -> dict[str, Any]:
        """The schema as sent to a model's structured output mode."""
        return {k: v for k, v in self.schema.items() if k not in _SCHEMA_META_KEYS}


@dataclass(frozen=True)
class TaskCatalog:
    """The tasks of one docs snapshot, by name."""

    tasks: dict[str, TaskDefinition] = field(default_factory=dict)

    def get(self, name: str) -> TaskDefinition | None:
        return self.tasks.get(name)

    @property
    def names(self) -> list[str]:
        return sorted(self.tasks)


def task_versions(contents: Mapping[str, str]) -> dict[str, str]:
    """Each task folder's version: a hash of its own files (valid or not; `docs status`)."""
    return folder_versions(contents, TASKS_AREA)


def schema_hash(schema: Mapping[str, Any]) -> str:
    return hashlib.sha256(canonical_json(schema).encode()).hexdigest()[:12]


def read_json(where: str, files: Mapping[str, str], filename: str) -> Any:
    if filename not in files:
        raise ConfigError(f"{where}/{filename}: missing")
    try:
        return json.loads(files[filename])
    except json.JSONDecodeError as exc:
        raise ConfigError(f"{where}/{filename}: not valid JSON: {exc}") from exc


def parse_model(where: str, model: type[M], data: Any) -> M:
    """`model` from `data`, or a `ConfigError` naming the file and each field at fault."""
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        reasons = "; ".join(
            f"{'.'.join(str(p) for p in e['loc']) or '(root)'}: {e['msg']}" for e in exc.errors()
        )
        raise ConfigError(f"{where}: {reasons}") from None


def load_task(folder: str, files: dict[str, str], kinds: Mapping[str, TaskKind]) -> TaskDefinition:
    """The task of folder `tasks/<folder>/` (`files`: its files), of one of `kinds`."""
    where = f"{TASKS_AREA}/{folder}"
    manifest = parse_model(f"{where}/{MANIFEST}", Manifest, read_json(where, files, MANIFEST))
    if manifest.name != folder:
        raise ConfigError(f"{where}/{MANIFEST}: name {manifest.name!r} must be the folder name")
    if manifest.name in RESERVED_NAMES:
        raise ConfigError(f"{where}: {manifest.name!r} is reserved; not one of {RESERVED_NAMES}")
    kind = kinds.get(manifest.kind)
    if kind is None:
        raise ConfigError(
            f"{where}/{MANIFEST}: unknown kind {manifest.kind!r}; known: {sorted(kinds)}"
        )
    prompt = files.get(PROMPT, "").strip()
    if not prompt:
        raise ConfigError(f"{where}/{PROMPT}: missing or empty")
    schema = read_json(where, files, SCHEMA)
    _check_schema(f"{where}/{SCHEMA}", schema)
    definition = TaskDefinition(
        manifest=manifest,
        prompt=prompt,
        schema=schema,
        files=dict(files),
        version=docs_version(files),
        schema_hash=schema_hash(schema),
        kind=kind,
    )
    return replace(definition, rules=kind.load_rules(where, definition))


def _check_schema(where: str, schema: Any) -> None:
    if not isinstance(schema, dict) or schema.get("type") != "object":
        raise ConfigError(f'{where}: the output schema must be an object schema ("type": "object")')
    if problem := schema_problem(schema):
        raise ConfigError(f"{where}: invalid JSON Schema at {problem}")


# --- the code half of a task: what its kind provides -------------------------------------


@dataclass(frozen=True)
class Truncation:
    """The input was longer than what the model reads: how much of it was kept."""

    kept_chars: int
    total_chars: int


@dataclass(frozen=True)
class Prepared:
    """One request to the model: `payload` is what the model reads (JSON), `context` what the
    kind's checks need (the canonical text, the candidates)."""

    shrunk: bool
    payload: dict[str, Any]
    context: Any
    truncation: Truncation | None = None


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
