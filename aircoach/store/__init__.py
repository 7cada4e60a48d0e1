"""Chat and quiz persistence: small Protocols (base.py), SQLite and MongoDB implementations."""

from __future__ import annotations

from dataclasses import dataclass

from aircoach.settings import StoreSettings
from aircoach.store.base import AttemptStore, ChatStore, QuizStore


@dataclass(frozen=True)
class Stores:
    chats: ChatStore
    quiz: QuizStore
    attempts: AttemptStore


def open_stores(settings: StoreSettings) -> Stores:
    """MongoDB when `MONGODB_URI` is set (one connection for every collection), else SQLite
    under `data_dir`. Creates no client."""
    if settings.mongodb_uri:
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


__all__ = [
    "AttemptStore",
    "ChatStore",
    "QuizStore",
    "Stores",
    "build_stores",
    "open_stores",
]
