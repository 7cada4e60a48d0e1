"""What a task run leaves behind, as stored and as returned: runs (`task_runs`), review items
(`task_review_queue`), contacts (`contacts`), and the `PipelineVersion` stored with each."""

from __future__ import annotations

import os
import time
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

RunStatus = Literal["ok", "dead_letter"]
RunSource = Literal["api", "batch", "sqs", "review", "eval"]
ReviewStatus = Literal["open", "resolved"]

# A model's raw answer is kept for audit up to this many characters.
MAX_RAW_CHARS = 20_000


def new_id() -> str:
    """Time-ordered and unique across instances (sorts like the moment it was made)."""
    return f"{time.time_ns():x}{os.urandom(4).hex()}"


class PipelineVersion(BaseModel):
    """Everything that decides an output besides the input; stored with every output and every
    dead letter, so a run can be explained and replayed later."""

    model_config = ConfigDict(frozen=True)

    task: str
    task_version: str = Field(description="Hash of the task's docs folder.")
    schema_hash: str = Field(description="Hash of the output JSON Schema.")
    candidates_version: str
    stoplist_version: str
    model: str = Field(description="The model that produced the output (tried, for a dead letter).")
    code_version: str


class Issue(BaseModel):
    """A validation error (hard: the attempt failed) or warning (the output stands)."""

    model_config = ConfigDict(frozen=True)

    stage: str = Field(
        description="parse, schema, business, evidence, keywords, signals, quality, model"
    )
    code: str
    message: str


class Attempt(BaseModel):
    n: int
    model: str
    shrunk: bool
    ok: bool
    stage: str | None = Field(default=None, description="The stage that failed, if any.")
    errors: list[Issue] = Field(default_factory=list)
    latency_ms: float
    raw: str | None = Field(
        default=None, description="The model's raw answer (failed attempts; cut to 20,000 chars)."
    )

    def public(self) -> Attempt:
        """Without the raw answer (what an API response carries)."""
        return self.model_copy(update={"raw": None})


class Customer(BaseModel):
    """The sender, looked up in the contacts: never the model's opinion."""

    status: Literal["existing", "new"]
    match: Literal["exact", "domain", "none"]
    contact: dict[str, Any] | None = None


class TaskRun(BaseModel):
    """One run of a task (collection `task_runs`)."""

    run_id: str
    task: str
    status: RunStatus
    source: RunSource
    caller: str = Field(description="The token subject (or `sqs`) that asked for the run.")
    created_at: str
    input: dict[str, Any]
    output: dict[str, Any] | None = None
    customer: Customer | None = None
    warnings: list[Issue] = Field(default_factory=list)
    attempts: list[Attempt] = Field(default_factory=list)
    model: str | None = None
    pipeline_version: PipelineVersion
    review_id: str | None = None
    latency_ms: float = 0.0


class ReviewItem(BaseModel):
    """An input the fallback chain could not turn into a valid output (`task_review_queue`)."""

    review_id: str
    task: str
    status: ReviewStatus = "open"
    created_at: str
    source: RunSource
    caller: str
    input: dict[str, Any]
    attempts: list[Attempt]
    pipeline_version: PipelineVersion
    run_id: str = Field(description="The dead-letter run that queued it.")
    resolved_by: str | None = None
    resolved_at: str | None = None
    resolution_run_id: str | None = None


class Contact(BaseModel):
    """A known sender: a person by exact address, or an organisation by domain."""

    model_config = ConfigDict(extra="forbid")

    email: str | None = Field(default=None, max_length=320)
    domain: str | None = Field(default=None, max_length=253)
    name: str = Field(max_length=200)
    kind: str = Field(
        default="contact", max_length=40, description="allievo, partner, fornitore..."
    )
    since: str | None = None

    @model_validator(mode="after")
    def _an_address_or_a_domain(self) -> Contact:
        if not (self.email or self.domain):
            raise ValueError("a contact needs an email or a domain")
        return self

    @property
    def key(self) -> str:
        """`email:<address>` or `domain:<domain>`, lowercase: the one indexed lookup key."""
        if self.email:
            return f"email:{self.email.strip().lower()}"
        if self.domain:
            return f"domain:{self.domain.strip().lower()}"
        raise ValueError("a contact needs an email or a domain")
