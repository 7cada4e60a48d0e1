"""What a task run leaves behind, as stored and as returned: runs (`task_runs`), review items
(`task_review_queue`), contacts (`contacts`), and the `PipelineVersion` stored with each."""

from __future__ import annotations

import os
import time
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from aircoach.response_model import ResponseModel

# `ok`: a valid output; `low_confidence`: a valid output under the task's confidence
# threshold, also queued for review; `dead_letter`: no valid output, queued for review.
RunStatus = Literal["ok", "low_confidence", "dead_letter"]
RunSource = Literal["api", "batch", "sqs", "review", "eval"]
# `resolved`: a reviewer stored a run for it; `dismissed`: a reviewer closed it with no run.
ReviewStatus = Literal["open", "resolved", "dismissed"]
ReviewReason = Literal["no_valid_output", "low_confidence"]
Verdict = Literal["confirmed", "corrected"]
Mode = Literal["model", "offline", "review"]

# A model's raw answer is kept for audit up to this many characters.
MAX_RAW_CHARS = 20_000


def new_id() -> str:
    """Time-ordered and unique across instances (sorts like the moment it was made)."""
    return f"{time.time_ns():x}{os.urandom(4).hex()}"


class PipelineVersion(ResponseModel):
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
    prompt_hash: str = Field(default="", description="Hash of the task's `prompt.md`.")
    dictionary_version: str = Field(
        default="", description="The version of the task's keyword dictionary (`offline.json`)."
    )
    provider: str = Field(default="", description="gemini, openai, offline, review...")
    mode: Mode | None = Field(
        default=None, description="A language model, offline rules, a person."
    )
    temperature: float | None = None


class Issue(ResponseModel):
    """A validation error (hard: the attempt failed) or warning (the output stands)."""

    model_config = ConfigDict(frozen=True)

    stage: str = Field(
        description="parse, schema, business, evidence, keywords, signals, quality, model"
    )
    code: str
    message: str


class Attempt(ResponseModel):
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


class Customer(ResponseModel):
    """The sender, looked up in the contacts: never the model's opinion."""

    status: Literal["existing", "new"]
    match: Literal["exact", "domain", "none"]
    contact: dict[str, Any] | None = None


class TaskRun(ResponseModel):
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
    origin: str | None = Field(
        default=None,
        description="Where the run came from: `http`, `sqs:<message id>`, `review`, `eval`.",
    )
    confidence: float | None = Field(
        default=None, description="The output's confidence (the main topic's, for the triage)."
    )
    input_truncated: bool = False
    input_kept_chars: int | None = Field(
        default=None, description="Characters of the body the model read (when truncated)."
    )
    input_total_chars: int | None = None
    tokens: dict[str, int] | None = Field(
        default=None, description="`input` and `output` tokens, when the model reports them."
    )
    verdict: Verdict | None = Field(
        default=None, description="A reviewer confirmed or corrected this run's output."
    )
    reviewed_output: dict[str, Any] | None = Field(
        default=None, description="The reviewer's output (the same as `output` when confirmed)."
    )


class ReviewItem(ResponseModel):
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
    run_id: str = Field(description="The run that queued it.")
    reason: ReviewReason = "no_valid_output"
    output: dict[str, Any] | None = Field(
        default=None, description="The low-confidence output, for the reviewer to confirm."
    )
    confidence: float | None = None
    verdict: Verdict | None = None
    resolved_by: str | None = None
    resolved_at: str | None = None
    resolution_run_id: str | None = None
    dismissal_note: str | None = Field(
        default=None, description="Why the reviewer dismissed it (status `dismissed`)."
    )


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


def run_facts(run: TaskRun) -> dict[str, int]:
    """What the stores index and count of a run (numbers, so that a store sums them)."""
    first = run.attempts[0].model if run.attempts else None
    tokens = run.tokens or {}
    return {
        "attempts": len(run.attempts),
        "shrunk": int(any(a.shrunk for a in run.attempts)),
        "fallback": int(any(a.model != first for a in run.attempts)),
        "truncated": int(run.input_truncated),
        "input_tokens": int(tokens.get("input", 0)),
        "output_tokens": int(tokens.get("output", 0)),
    }


def shown_source(run: TaskRun) -> str:
    """A run's source as the runs API shows it and its log line says it: `http` for the API's
    and a batch's, `sqs:<message id>`, `review`, `eval`..."""
    return run.origin or ("http" if run.source in http_sources() else run.source)


def http_sources() -> tuple[str, ...]:
    """The run sources a `source=http` filter means."""
    return ("api", "batch")
