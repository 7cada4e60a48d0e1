"""Small batches through the engine, with bounded concurrency, each input's outcome apart:
one input's failure never fails the others."""

from __future__ import annotations

import logging

import anyio
from pydantic import BaseModel

from aircoach.errors import AppError
from aircoach.tasks.definition import TaskDefinition
from aircoach.tasks.engine import TaskEngine, TaskFailed
from aircoach.tasks.records import RunSource
from aircoach.tasks.schemas import BatchError, BatchItem, TaskResult

log = logging.getLogger(__name__)


async def run_batch(
    engine: TaskEngine,
    definition: TaskDefinition,
    inputs: list[BaseModel],
    *,
    caller: str,
    source: RunSource,
    concurrency: int,
) -> list[BatchItem]:
    """Every input run, at most `concurrency` at once; the outcomes in input order."""
    results: list[BatchItem | None] = [None] * len(inputs)
    limiter = anyio.CapacityLimiter(concurrency)

    async def one(index: int, task_input: BaseModel) -> None:
        async with limiter:
            results[index] = await _outcome(engine, definition, index, task_input, caller, source)

    async with anyio.create_task_group() as group:
        for index, task_input in enumerate(inputs):
            group.start_soon(one, index, task_input)
    return [r for r in results if r is not None]


async def _outcome(
    engine: TaskEngine,
    definition: TaskDefinition,
    index: int,
    task_input: BaseModel,
    caller: str,
    source: RunSource,
) -> BatchItem:
    try:
        run = await engine.run(definition, task_input, caller=caller, source=source, origin="http")
    except TaskFailed as failed:
        return BatchItem(index=index, status="review", review_id=failed.run.review_id)
    except AppError as exc:  # a backend failed (the store): this input may be retried
        return BatchItem(
            index=index, status="error", error=BatchError(error=exc.code, message=exc.message)
        )
    except Exception as exc:
        log.exception("task %s batch input %d failed", definition.name, index)
        return BatchItem(
            index=index,
            status="error",
            error=BatchError(error="internal_error", message=type(exc).__name__),
        )
    return BatchItem(index=index, status="ok", result=TaskResult.from_run(run))
