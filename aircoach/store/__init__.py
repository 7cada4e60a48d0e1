"""Chat and quiz persistence: small Protocols (base.py), SQLite and MongoDB implementations."""

from __future__ import annotations

from aircoach.settings import StoreSettings
from aircoach.store.base import ChatStore, QuizStore


def build_stores(settings: StoreSettings) -> tuple[ChatStore, QuizStore]:
    """MongoDB or SQLite, as `STORE` (or `MONGODB_URI`) says. Creates no client."""
    if settings.store_kind == "mongodb":
        from aircoach.store.mongo import MongoChatStore, MongoConnection, MongoQuizStore

        connection = MongoConnection(settings)
        return MongoChatStore(connection), MongoQuizStore(connection)
    from aircoach.store.sqlite import SqliteChatStore, SqliteQuizStore

    return SqliteChatStore(settings.sqlite_file), SqliteQuizStore(settings.sqlite_file)


__all__ = ["ChatStore", "QuizStore", "build_stores"]
