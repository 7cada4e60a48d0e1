"""Request and response shapes of the task routes (`/api/tasks`)."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from aircoach.tasks.records import (
    Attempt,
    Customer,
    Issue,
    PipelineVersion,
    ReviewItem,
    ReviewStatus,
    RunSource,
    TaskRun,
)

MAX_BATCH = 50
_PREVIEW_CHARS = 200


class TaskInfo(BaseModel):
    name: str
    title: str
    description: str
    version: str = Field(description="Hash of the task's docs: changes with every edit.")
    permission: str
    allowed: bool = Field(description="Whether the caller's token may run it.")


class TaskResult(BaseModel):
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
        )


class TaskFailedBody(BaseModel):
    error: Literal["task_failed"] = "task_failed"
    message: str
    review_id: str = Field(description="The input is kept in the review queue under this id.")
    run_id: str


class BatchError(BaseModel):
    error: str
    message: str


class BatchItem(BaseModel):
    index: int
    status: Literal["ok", "review", "error"] = Field(
        description="`ok`: a valid output; `review`: no valid output, the input is in the "
        "review queue; `error`: a backend failed (retry that input)."
    )
    result: TaskResult | None = None
    review_id: str | None = None
    error: BatchError | None = None


class BatchResponse(BaseModel):
    results: list[BatchItem]


class ReviewSummary(BaseModel):
    review_id: str
    task: str
    status: ReviewStatus
    created_at: str
    source: RunSource
    caller: str
    input_preview: dict[str, str] = Field(description="The input's text fields, cut short.")
    attempts: int
    last_error: Issue | None
    pipeline_version: PipelineVersion

    @classmethod
    def of(cls, item: ReviewItem) -> ReviewSummary:
        last = item.attempts[-1] if item.attempts else None
        return cls(
            review_id=item.review_id,
            task=item.task,
            status=item.status,
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


class ReviewPage(BaseModel):
    items: list[ReviewSummary]
    next_after: str | None = Field(
        default=None, description="Pass as `after` for the next page (oldest first)."
    )


class ReviewDetail(ReviewItem):
    model_input: dict[str, Any] | None = Field(
        default=None,
        description="What the model reads for this input with the current task docs (the "
        "canonical text and the candidates a keyword must be picked from); null when the "
        "task is no longer in the docs.",
    )


class ResolveRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")

    output: dict[str, Any] = Field(
        description="The corrected output: it must pass the task's stages (schema, business "
        "rules, verifiers)."
    )


class InvalidOutputBody(BaseModel):
    error: Literal["invalid_output"] = "invalid_output"
    message: str
    stage: str
    issues: list[Issue]


class ValidationErrorBody(BaseModel):
    """The answer to a body that does not validate (`aircoach.http_errors`)."""

    error: Literal["invalid_request"] = "invalid_request"
    message: str = ""
    detail: list[dict[str, Any]]
