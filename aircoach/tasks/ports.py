"""What the task engine needs from its stores (adapters in `aircoach.store` implement these):
runs, the review queue, contacts."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from aircoach.tasks.records import Contact, ReviewItem, ReviewStatus, TaskRun


class TaskRunStore(Protocol):
    """`task_runs`: every run of a task, valid output or dead letter."""

    async def insert_run(self, run: TaskRun) -> None: ...

    async def get_run(self, run_id: str) -> TaskRun | None: ...


class ReviewQueueStore(Protocol):
    """`task_review_queue`: inputs the fallback chain could not turn into a valid output."""

    async def enqueue(self, item: ReviewItem) -> None: ...

    async def get_item(self, review_id: str) -> ReviewItem | None: ...

    async def list_items(
        self, *, status: ReviewStatus, task: str | None, limit: int, after: str | None
    ) -> list[ReviewItem]:
        """Items with `status` (of `task` when given), oldest first, after the `after` id."""
        ...

    async def resolve(self, review_id: str, *, run_id: str, by: str, at: str) -> bool:
        """Mark an open item resolved by `run_id`; False when it was not open (atomic: two
        reviewers cannot both resolve it)."""
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
