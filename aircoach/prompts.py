"""The system prompt: built from Markdown docs, versioned by content, cached and revalidated.

A `PromptSource` lists docs (key + ETag) and reads one; `PromptStore` keeps the last good
`PromptSnapshot`, revalidates it every `ttl_s` with one listing, fetches only changed docs,
and swaps the snapshot atomically (one attribute assignment).
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Protocol

import anyio

from aircoach.errors import ConfigError, InvalidDocs, PromptUnavailable

log = logging.getLogger(__name__)

PROMPT_SUFFIX = ".md"


@dataclass(frozen=True)
class DocInfo:
    key: str
    etag: str
    size: int
    last_modified: str | None = None
    version_id: str | None = None


class PromptSource(Protocol):
    """Where the docs live: the local `prompt_docs/` folder or an S3 prefix."""

    name: str

    async def list_docs(self) -> list[DocInfo]: ...

    async def read_doc(self, info: DocInfo) -> str: ...


@dataclass(frozen=True)
class PromptSnapshot:
    text: str
    version: str
    docs: tuple[DocInfo, ...]
    contents: dict[str, str] = field(repr=False)
    loaded_at: float = 0.0


def build_prompt(contents: dict[str, str]) -> tuple[str, str]:
    """(system prompt, version) from doc contents: Markdown docs in key order; every doc,
    configuration included, counts towards the version, so equal docs give equal versions."""
    parts = [contents[key].strip() for key in sorted(contents) if key.endswith(PROMPT_SUFFIX)]
    text = "\n\n".join(part for part in parts if part)
    digest = hashlib.sha256()
    for key in sorted(contents):
        digest.update(key.encode() + b"\0" + contents[key].encode() + b"\0")
    return text, digest.hexdigest()[:12]


class LocalDocSource:
    """Docs in a local folder (the embedded default)."""

    name = "local"

    def __init__(self, folder: Path):
        self.folder = folder

    async def list_docs(self) -> list[DocInfo]:
        return await anyio.to_thread.run_sync(self._list)

    def _list(self) -> list[DocInfo]:
        if not self.folder.is_dir():
            raise FileNotFoundError(f"prompt docs folder {str(self.folder)!r} does not exist")
        docs = []
        for path in sorted(self.folder.iterdir()):
            if path.is_file() and not path.name.startswith("."):
                data = path.read_bytes()
                stat = path.stat()
                docs.append(
                    DocInfo(
                        key=path.name,
                        etag=hashlib.md5(data, usedforsecurity=False).hexdigest(),
                        size=len(data),
                        last_modified=datetime.fromtimestamp(stat.st_mtime, UTC).isoformat(),
                    )
                )
        return docs

    async def read_doc(self, info: DocInfo) -> str:
        return await anyio.to_thread.run_sync((self.folder / info.key).read_text, "utf-8")


class PromptStore:
    def __init__(
        self,
        source: PromptSource,
        *,
        ttl_s: float,
        clock: Callable[[], float] = time.monotonic,
        validate: Callable[[Mapping[str, str]], object] | None = None,
    ):
        self.source = source
        # Raises on docs that must not be served (a bad tools.json): the last good stays.
        self.validate = validate
        self.ttl_s = ttl_s
        self.clock = clock
        self._snapshot: PromptSnapshot | None = None
        self._checked_at = float("-inf")
        self._refresh: asyncio.Future[PromptSnapshot] | None = None
        self.last_error: str | None = None

    @property
    def snapshot(self) -> PromptSnapshot | None:
        return self._snapshot

    async def current(self) -> PromptSnapshot:
        """The prompt to use now. Revalidates when the TTL has passed; while one request
        refreshes, the others keep serving the current snapshot."""
        snapshot = self._snapshot
        if snapshot is not None and self.clock() - self._checked_at < self.ttl_s:
            return snapshot
        if snapshot is not None and self._refresh_in_flight():
            return snapshot
        return await self._revalidate()

    async def reload(self) -> tuple[PromptSnapshot, str | None]:
        """Force a reload now (the update_docs webhook). Returns (new, previous version)."""
        previous = self._snapshot.version if self._snapshot else None
        return await self._revalidate(force=True), previous

    def health(self) -> dict[str, object]:
        snapshot = self._snapshot
        age = None if snapshot is None else round(self.clock() - snapshot.loaded_at, 1)
        status = "ok" if snapshot is not None and self.last_error is None else "degraded"
        return {
            "source": self.source.name,
            "status": status,
            "version": snapshot.version if snapshot else None,
            "age_s": age,
            "error": self.last_error,
        }

    def _refresh_in_flight(self) -> bool:
        fut = self._refresh
        return fut is not None and not fut.done() and fut.get_loop() is asyncio.get_running_loop()

    async def _revalidate(self, force: bool = False) -> PromptSnapshot:
        if self._refresh_in_flight() and not force:
            assert self._refresh is not None
            return await asyncio.shield(self._refresh)
        fut: asyncio.Future[PromptSnapshot] = asyncio.get_running_loop().create_future()
        self._refresh = fut
        try:
            snapshot = await self._load()
        except Exception as exc:
            self.last_error = f"{type(exc).__name__}: {exc}"
            self._checked_at = self.clock()  # retry after one TTL, not on every request
            if self._snapshot is not None and not force:
                log.warning(
                    "prompt source %s failed; serving last good version %s: %s",
                    self.source.name,
                    self._snapshot.version,
                    self.last_error,
                )
                fut.set_result(self._snapshot)
                return self._snapshot
            log.error("prompt source %s failed: %s", self.source.name, self.last_error)
            # The admin who forced the reload learns what is wrong; users only that it failed.
            error = (
                InvalidDocs(str(exc))
                if force and isinstance(exc, ConfigError)
                else PromptUnavailable()
            )
            fut.set_exception(error)
            fut.exception()  # mark retrieved: waiters re-raise it, nobody else needs to
            raise error from exc
        self._snapshot, self._checked_at, self.last_error = snapshot, self.clock(), None
        fut.set_result(snapshot)
        return snapshot

    async def _load(self) -> PromptSnapshot:
        docs = await self.source.list_docs()
        old = self._snapshot
        if old is not None and old.docs == tuple(docs):
            return PromptSnapshot(old.text, old.version, old.docs, old.contents, self.clock())
        known = {d.key: d.etag for d in old.docs} if old else {}
        contents: dict[str, str] = {}
        for info in docs:
            if old is not None and known.get(info.key) == info.etag:
                contents[info.key] = old.contents[info.key]
            else:
                contents[info.key] = await self.source.read_doc(info)
        text, version = build_prompt(contents)
        if not text:
            raise ValueError(f"no {PROMPT_SUFFIX} docs in prompt source {self.source.name!r}")
        if self.validate is not None:
            self.validate(contents)
        if old is None or old.version != version:
            log.info(
                "prompt version %s loaded from %s (%d docs)", version, self.source.name, len(docs)
            )
        return PromptSnapshot(text, version, tuple(docs), contents, self.clock())
