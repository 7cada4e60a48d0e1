"""Chat and quiz persistence: small Protocols (base.py), SQLite and MongoDB implementations."""

from __future__ import annotations

from dataclasses import dataclass

from aircoach.settings import StoreSettings
from aircoach.store.base import ChatStore, ContactStore, QuizStore, ReviewQueueStore, TaskRunStore


def build_stores(settings: StoreSettings) -> tuple[ChatStore, QuizStore]:
    """MongoDB or SQLite, as `STORE` (or `MONGODB_URI`) says. Creates no client."""
    if settings.store_kind == "mongodb":
        from aircoach.store.mongo import MongoChatStore, MongoConnection, MongoQuizStore

        connection = MongoConnection(settings)
        return MongoChatStore(connection), MongoQuizStore(connection)
    from aircoach.store.sqlite import SqliteChatStore, SqliteQuizStore

    return SqliteChatStore(settings.sqlite_file), SqliteQuizStore(settings.sqlite_file)


@dataclass(frozen=True)
class TaskStores:
    """The task engine's collections: runs, the review queue, contacts."""

    runs: TaskRunStore
    reviews: ReviewQueueStore
    contacts: ContactStore


def build_task_stores(settings: StoreSettings) -> TaskStores:
    """The task collections on the same backend as the chats (creates no client)."""
    if settings.mongodb_uri:
        from aircoach.store.mongo import MongoConnection
        from aircoach.store.mongo_tasks import (
            MongoContactStore,
            MongoReviewQueue,
            MongoTaskRunStore,
            create_task_indexes,
        )

        connection = MongoConnection(settings, create_indexes=create_task_indexes)
        return TaskStores(
            MongoTaskRunStore(connection),
            MongoReviewQueue(connection),
            MongoContactStore(connection),
        )
    from aircoach.store.sqlite_tasks import (
        SqliteContactStore,
        SqliteReviewQueue,
        SqliteTaskRunStore,
    )

    path = settings.sqlite_file
    return TaskStores(SqliteTaskRunStore(path), SqliteReviewQueue(path), SqliteContactStore(path))


__all__ = [
    "ChatStore",
    "ContactStore",
    "QuizStore",
    "ReviewQueueStore",
    "TaskRunStore",
    "TaskStores",
    "build_stores",
    "build_task_stores",
]
