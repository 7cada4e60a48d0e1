"""Chat and quiz persistence: small Protocols (base.py), SQLite and MongoDB implementations."""

from __future__ import annotations

from dataclasses import dataclass

from aircoach.settings import StoreSettings
from aircoach.store.base import (
    AttemptStore,
    ChatStore,
    ContactStore,
    QuizStore,
    ReviewQueueStore,
    TaskRunStore,
)


@dataclass(frozen=True)
class Stores:
    chats: ChatStore
    quiz: QuizStore
    attempts: AttemptStore


def open_stores(settings: StoreSettings) -> Stores:
    """MongoDB or SQLite, as `STORE` (or `MONGODB_URI`) says: one connection for every
    collection. Creates no client."""
    if settings.store_kind == "mongodb":
        from aircoach.store.mongo import (
            MongoAttemptStore,
            MongoChatStore,
            MongoConnection,
            MongoQuizStore,
        )

        connection = MongoConnection(settings)
        return Stores(
            MongoChatStore(connection), MongoQuizStore(connection), MongoAttemptStore(connection)
        )
    from aircoach.store.sqlite import SqliteAttemptStore, SqliteChatStore, SqliteQuizStore

    path = settings.sqlite_file
    return Stores(SqliteChatStore(path), SqliteQuizStore(path), SqliteAttemptStore(path))


def build_stores(settings: StoreSettings) -> tuple[ChatStore, QuizStore]:
    """The chat and quiz stores of `open_stores`."""
    stores = open_stores(settings)
    return stores.chats, stores.quiz


@dataclass(frozen=True)
class TaskStores:
    """The task engine's collections: runs, the review queue, contacts."""

    runs: TaskRunStore
    reviews: ReviewQueueStore
    contacts: ContactStore


def build_task_stores(settings: StoreSettings) -> TaskStores:
    """The task collections on the same backend as the chats (creates no client)."""
    if settings.store_kind == "mongodb":
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
    "AttemptStore",
    "ChatStore",
    "ContactStore",
    "QuizStore",
    "ReviewQueueStore",
    "Stores",
    "TaskRunStore",
    "TaskStores",
    "build_stores",
    "build_task_stores",
    "open_stores",
]
