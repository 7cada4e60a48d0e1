"""An eval set from the reviewers' verdicts: every run a person confirmed or corrected, as
JSON lines of `{"task", "run_id", "verdict", "input", "output"}` (the output the reviewer
stood behind), oldest first within each page read, newest pages first."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

from aircoach.tasks.ports import RunFilter, TaskRunStore

_PAGE = 100


async def reviewed_examples(
    runs: TaskRunStore, *, task: str | None = None, since: str | None = None
) -> AsyncIterator[dict[str, Any]]:
    """The reviewed runs (not the reviewers' own runs), newest first."""
    where = RunFilter(task=task, since=since, reviewed=True)
    cursor: str | None = None
    while True:
        page = await runs.list_runs(where, limit=_PAGE, before=cursor)
        for run in page:
            if run.source == "review":
                continue
            yield {
                "task": run.task,
                "run_id": run.run_id,
                "verdict": run.verdict,
                "input": run.input,
                "output": run.reviewed_output,
                "model_output": run.output,
                "pipeline_version": run.pipeline_version.model_dump(),
            }
        if len(page) < _PAGE:
            return
        cursor = page[-1].run_id


def as_jsonl(example: dict[str, Any]) -> str:
    return json.dumps(example, ensure_ascii=False, sort_keys=True)
