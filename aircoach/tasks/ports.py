"""What the task engine needs from its stores (adapters in `aircoach.store` implement these):
runs, the review queue, contacts."""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Literal, Protocol

from aircoach.tasks.records import Contact, ReviewItem, ReviewStatus, TaskRun, Verdict

ClaimState = Literal["new", "done", "busy", "mismatch"]

# RFC 3339 as clients write it; fractions beyond microseconds are cut (Python keeps six).
_FRACTION = re.compile(r"(\.\d{6})\d+")


def utc_time(value: str) -> str:
    """The ISO 8601 time `value` in UTC, as the stores compare `created_at` (`RunFilter`);
    naive means UTC. `ValueError` for anything else, and for a time whose UTC is outside the
    calendar ("9999-12-31T23:59:59-14:00": an OverflowError made it a 500)."""
    text = _FRACTION.sub(r"\1", value.strip().upper().replace("Z", "+00:00"))
    moment = datetime.fromisoformat(text)
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    try:
        return moment.astimezone(UTC).isoformat()
    except OverflowError:
        raise ValueError("the time in UTC is outside years 1-9999") from None


@dataclass(frozen=True)
class Claim:
    """The answer to claiming a run key: `new` (run it, then `complete` or `release`), `done`
    (`run_id` ran it already), `busy` (another instance is running it now), `mismatch` (the
    key ran another input)."""

    state: ClaimState
    run_id: str | None = None


@dataclass(frozen=True)
class RunFilter:
    task: str | None = None
    source: str | None = None  # `http`, `sqs`, `batch`, `review`, `eval` or `sqs:<message id>`
    since: str | None = None  # ISO time: runs created at or after it
    reviewed: bool = False  # only runs a reviewer confirmed or corrected


@dataclass(frozen=True)
class RunStats:
    """One task's runs, as counted by the store (an aggregation, not a read of every run)."""

    task: str
    runs: dict[str, int]  # by status
    attempts: int  # over all runs
    shrunk: int  # runs that needed the shrunk request
    fallback: int  # runs that reached the fallback model
    truncated: int
    latency_p50_ms: float | None
    latency_p95_ms: float | None
    input_tokens: int
    output_tokens: int


@dataclass(frozen=True)
class QueueStats:
    task: str
    open: int
    oldest_created_at: str | None


class TaskRunStore(Protocol):
    """`task_runs`: every run of a task, valid output or dead letter; and the run keys that
    make a redelivered message or a repeated request run once (`task_run_keys`)."""

    async def insert_run(self, run: TaskRun) -> None: ...

    async def get_run(self, run_id: str) -> TaskRun | None: ...

    async def stored(self, run_ids: list[str]) -> set[str]:
        """Which of `run_ids` are stored (their ids only: no document is read)."""
        ...

    async def list_runs(self, where: RunFilter, *, limit: int, before: str | None) -> list[TaskRun]:
        """Newest first; `before`: a run id (the cursor), runs older than it."""
        ...

    async def record_verdict(
        self, run_id: str, *, verdict: Verdict, output: dict[str, Any]
    ) -> None:
        """Store a reviewer's verdict with the run that queued the review."""
        ...

    async def stats(self, task: str | None, since: str | None) -> list[RunStats]:
        """Per task (one task when given; runs created since `since` when given), counted by
        the store."""
        ...

    async def claim(self, key: str, input_hash: str, *, now: float, lease_s: float) -> Claim:
        """Claim `key` for a run of the input hashed `input_hash` (atomic across instances);
        a claim left unfinished for `lease_s` seconds (its instance died) may be taken over."""
        ...

    async def complete(self, key: str, run_id: str) -> None: ...

    async def release(self, key: str) -> None:
        """Give up an unfinished claim (the run failed and may be retried)."""
        ...


class ReviewQueueStore(Protocol):
    """`task_review_queue`: inputs the fallback chain could not turn into a valid output."""

    async def enqueue(self, item: ReviewItem) -> None: ...

    async def get_item(self, review_id: str) -> ReviewItem | None: ...

    async def list_items(
        self, *, status: ReviewStatus, task: str | None, limit: int, after: str | None
    ) -> list[ReviewItem]:
        """Items with `status` (of `task` when given), oldest first, after the `after` id."""
        ...

    async def resolve(
        self, review_id: str, *, run_id: str, by: str, at: str, verdict: Verdict = "corrected"
    ) -> bool:
        """Mark an open item resolved by `run_id`; False when it was not open (atomic: two
        reviewers cannot both resolve it)."""
        ...

    async def dismiss(self, review_id: str, *, by: str, at: str, note: str) -> bool:
        """Mark an open item dismissed (it leaves the queue with no run); False when it was
        not open (atomic, as `resolve`)."""
        ...

    async def queue_stats(self, task: str | None) -> list[QueueStats]:
        """Open items per task (one task when given) and the oldest one's time."""
        ...

    async def reopen(self, review_id: str) -> None:
        """Undo `resolve` (its run could not be stored)."""
        ...


class ContactStore(Protocol):
    """`contacts`: known senders, by `Contact.key` (`email:<address>` or `domain:<domain>`)."""

    async def upsert_contacts(self, contacts: list[Contact]) -> int: ...

    async def find_contact(self, key: str) -> Contact | None: ...


@dataclass(frozen=True)
class TaskStores:
    """The task engine's collections: runs, the review queue, contacts."""

    runs: TaskRunStore
    reviews: ReviewQueueStore
    contacts: ContactStore
