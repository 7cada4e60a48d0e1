"""The numbers an office watches per task (`GET /api/tasks/stats`, and the review-queue gauge
of the metrics): counted by the stores' aggregations, never by reading every run."""

from __future__ import annotations

from datetime import datetime

from aircoach.tasks.ports import TaskStores
from aircoach.tasks.schemas import TaskStats

# What a stored run's status is called among the outcomes.
_OUTCOME = {"ok": "ok", "low_confidence": "low_confidence", "dead_letter": "review"}


async def task_stats(
    stores: TaskStores, *, task: str | None, since: str | None, now: datetime
) -> list[TaskStats]:
    runs = {s.task: s for s in await stores.runs.stats(task, since)}
    queues = {q.task: q for q in await stores.reviews.queue_stats(task)}
    found = []
    for name in sorted(set(runs) | set(queues)):
        run, queue = runs.get(name), queues.get(name)
        outcomes = {outcome: 0 for outcome in _OUTCOME.values()}
        for status, n in (run.runs if run else {}).items():
            outcomes[_OUTCOME.get(status, status)] = outcomes.get(status, 0) + n
        total = sum(outcomes.values())
        oldest = queue.oldest_created_at if queue else None
        found.append(
            TaskStats(
                task=name,
                runs=outcomes,
                total=total,
                attempts_per_run=round(run.attempts / total, 3) if run and total else None,
                shrunk=run.shrunk if run else 0,
                fallback=run.fallback if run else 0,
                truncated=run.truncated if run else 0,
                latency_p50_ms=run.latency_p50_ms if run else None,
                latency_p95_ms=run.latency_p95_ms if run else None,
                review_queue_open=queue.open if queue else 0,
                review_queue_oldest_age_s=(
                    round((now - datetime.fromisoformat(oldest)).total_seconds(), 1)
                    if oldest
                    else None
                ),
                input_tokens=run.input_tokens if run else 0,
                output_tokens=run.output_tokens if run else 0,
            )
        )
    return found
