"""Request and response shapes of the task routes (`/api/tasks`)."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from aircoach.response_model import ResponseModel
from aircoach.tasks.records import (
    Attempt,
    Customer,
    Issue,
    PipelineVersion,
    ReviewItem,
    ReviewReason,
    ReviewStatus,
    RunSource,
    TaskRun,
    shown_source,
)

MAX_BATCH = 50
MAX_NOTE_CHARS = 500
_PREVIEW_CHARS = 200


class TaskInfo(ResponseModel):
    name: str
    title: str
    description: str
    version: str = Field(description="Hash of the task's docs: changes with every edit.")
    permission: str
    allowed: bool = Field(description="Whether the caller's token may run it.")


class TaskResult(ResponseModel):
    """A valid output and everything needed to trust it."""

    run_id: str
    output: dict[str, Any]
    customer: Customer | None = Field(
        description="The sender in the contacts (exact address, domain, or none): never the "
        "model's opinion."
    )
    warnings: list[Issue]
    attempts: list[Attempt] = Field(description="Every attempt, without the raw answers.")
    model: str
    pipeline_version: PipelineVersion
    low_confidence: bool = Field(
        default=False,
        description="The output's confidence is under the task's threshold: it stands, and is "
        "also queued for a person (`review_id`).",
    )
    review_id: str | None = None
    confidence: float | None = None
    input_truncated: bool = Field(
        default=False, description="The body was longer than what the model reads."
    )
    input_kept_chars: int | None = Field(
        default=None, description="Characters of the (cleaned) body the model read."
    )
    input_total_chars: int | None = None

    @classmethod
    def from_run(cls, run: TaskRun) -> TaskResult:
        assert run.output is not None and run.model is not None
        return cls(
            run_id=run.run_id,
            output=run.output,
            customer=run.customer,
            warnings=run.warnings,
            attempts=[a.public() for a in run.attempts],
            model=run.model,
            pipeline_version=run.pipeline_version,
            low_confidence=run.status == "low_confidence",
            review_id=run.review_id,
            confidence=run.confidence,
            input_truncated=run.input_truncated,
            input_kept_chars=run.input_kept_chars,
            input_total_chars=run.input_total_chars,
        )


class TaskFailedBody(ResponseModel):
    error: Literal["task_failed"] = "task_failed"
    message: str
    review_id: str = Field(description="The input is kept in the review queue under this id.")
    run_id: str


class BatchError(ResponseModel):
    error: str
    message: str


class BatchItem(ResponseModel):
    index: int
    status: Literal["ok", "review", "error"] = Field(
        description="`ok`: a valid output; `review`: no valid output, the input is in the "
        "review queue; `error`: a backend failed (retry that input)."
    )
    result: TaskResult | None = None
    review_id: str | None = None
    error: BatchError | None = None


class BatchResponse(ResponseModel):
    results: list[BatchItem]


_RUN_STORED = (
    "Whether the run that queued the item (`run_id`) is stored. False when its write failed "
    "after the item was queued (its caller got a 503 and may have sent the input again): "
    "a low-confidence item is then refused by `resolve` (409 `conflict`) and is dismissed "
    "instead; a dead letter's input may still be resolved."
)


class ReviewSummary(ResponseModel):
    review_id: str
    task: str
    status: ReviewStatus
    reason: ReviewReason = "no_valid_output"
    confidence: float | None = None
    created_at: str
    source: RunSource
    caller: str
    input_preview: dict[str, str] = Field(description="The input's text fields, cut short.")
    attempts: int
    last_error: Issue | None
    pipeline_version: PipelineVersion
    run_stored: bool = Field(description=_RUN_STORED)

    @classmethod
    def of(cls, item: ReviewItem, *, run_stored: bool) -> ReviewSummary:
        last = item.attempts[-1] if item.attempts else None
        return cls(
            run_stored=run_stored,
            review_id=item.review_id,
            task=item.task,
            status=item.status,
            reason=item.reason,
            confidence=item.confidence,
            created_at=item.created_at,
            source=item.source,
            caller=item.caller,
            input_preview={
                k: v[:_PREVIEW_CHARS] for k, v in item.input.items() if isinstance(v, str)
            },
            attempts=len(item.attempts),
            last_error=last.errors[0] if last and last.errors else None,
            pipeline_version=item.pipeline_version,
        )


class ReviewPage(ResponseModel):
    items: list[ReviewSummary]
    next_after: str | None = Field(
        default=None, description="Pass as `after` for the next page (oldest first)."
    )


class ReviewDetail(ReviewItem):
    model_input: dict[str, Any] | None = Field(
        default=None,
        description="What the model reads for this input with the current task docs (the "
        "canonical text and the candidates a keyword must be picked from); null when the "
        "task is no longer in the docs, or the queued input no longer validates for it.",
    )
    run_stored: bool = Field(description=_RUN_STORED)


class DismissRequest(BaseModel):
    """Close a queued item with no run: its input no longer validates for the task, its task
    left the docs, its run was never stored, or it needs no output."""

    model_config = ConfigDict(extra="forbid")

    note: str = Field(
        min_length=1,
        max_length=MAX_NOTE_CHARS,
        pattern=r"\S",
        description="Why it is dismissed (kept with the item).",
    )


class ResolveRequest(BaseModel):
    """Either `output` (the corrected output) or `confirm: true` (a low-confidence output is
    right as it is)."""

    model_config = ConfigDict(
        extra="forbid",
        json_schema_extra={
            "oneOf": [
                {
                    "required": ["output"],
                    "properties": {"output": {"type": "object"}, "confirm": {"const": False}},
                },
                {
                    "required": ["confirm"],
                    "properties": {"confirm": {"const": True}},
                    "not": {"required": ["output"]},
                },
            ]
        },
    )

    output: dict[str, Any] | None = Field(
        default=None,
        description="The corrected output: it must pass the task's stages (schema, business "
        "rules, verifiers).",
    )
    confirm: bool = Field(
        default=False, description="Confirm the queued low-confidence output as it is."
    )

    @model_validator(mode="after")
    def _one_of(self) -> ResolveRequest:
        if (self.output is None) == (not self.confirm):
            raise ValueError("send either `output` or `confirm: true`")
        return self


class RunSummary(ResponseModel):
    """A run as listed: what happened, not its input."""

    run_id: str
    task: str
    status: str
    source: str = Field(description="`http`, `sqs:<message id>`, `review`, `eval`...")
    created_at: str
    model: str | None
    review_id: str | None
    confidence: float | None
    verdict: str | None
    attempts: int
    latency_ms: float
    input_truncated: bool
    pipeline_version: PipelineVersion

    @classmethod
    def of(cls, run: TaskRun) -> RunSummary:
        return cls(
            run_id=run.run_id,
            task=run.task,
            status=run.status,
            source=shown_source(run),
            created_at=run.created_at,
            model=run.model,
            review_id=run.review_id,
            confidence=run.confidence,
            verdict=run.verdict,
            attempts=len(run.attempts),
            latency_ms=run.latency_ms,
            input_truncated=run.input_truncated,
            pipeline_version=run.pipeline_version,
        )


class RunPage(ResponseModel):
    items: list[RunSummary]
    next_cursor: str | None = Field(
        default=None, description="Pass as `cursor` for the next page (older runs)."
    )


class TaskStats(ResponseModel):
    """One task's numbers (`GET /api/tasks/stats`), counted by the store."""

    task: str
    runs: dict[str, int] = Field(
        description="By outcome: `ok`, `low_confidence`, `review` (no valid output)."
    )
    total: int
    attempts_per_run: float | None
    shrunk: int
    fallback: int
    truncated: int
    latency_p50_ms: float | None
    latency_p95_ms: float | None
    review_queue_open: int
    review_queue_oldest_age_s: float | None
    input_tokens: int
    output_tokens: int


class InvalidOutputBody(ResponseModel):
    error: Literal["invalid_output"] = "invalid_output"
    message: str
    stage: str
    issues: list[Issue]
