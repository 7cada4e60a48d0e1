"""The system prompt: built from Markdown docs, versioned by content, cached and revalidated.

`PromptStore` keeps the last good `PromptSnapshot`, revalidates it every `ttl_s` with one
listing of its `PromptSource`, fetches only changed docs, and swaps the snapshot atomically
(one attribute assignment).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace

import anyio

from aircoach.errors import ConfigError, InvalidDocs, PromptUnavailable
from aircoach.prompts.keys import PROMPT_SUFFIX, docs_version, is_chat_doc, is_system_prompt_doc
from aircoach.prompts.sources import BuiltPromptArchive, DocInfo, PromptSource

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class PromptSnapshot:
    text: str
    version: str
    docs: tuple[DocInfo, ...]
    contents: dict[str, str] = field(repr=False)
    loaded_at: float = 0.0


def build_prompt(contents: Mapping[str, str]) -> tuple[str, str]:
    """(system prompt, version) from doc contents: the top-level Markdown docs in key order.
    The version covers the top-level docs only (the prompt and `tools.json`): a doc in a
    sub-folder (a task, a manual) has a version of its own, see `aircoach.prompts.keys`."""
    parts = [contents[key].strip() for key in sorted(contents) if is_system_prompt_doc(key)]
    text = "\n\n".join(part for part in parts if part)
    return text, docs_version({k: v for k, v in contents.items() if is_chat_doc(k)})


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
        if snapshot is not None and (
            self.clock() - self._checked_at < self.ttl_s or self._refresh_in_flight()
        ):
            return snapshot
        return await self._revalidate()

    async def reload(self) -> tuple[PromptSnapshot, str | None]:
        """Force a reload now (the update_docs webhook). Returns (new, previous version).
        Raises `PromptUnavailable` when the source fails, even with a good prompt held."""
        previous = self._snapshot.version if self._snapshot else None
        return await self._revalidate(force=True), previous

    def health(self) -> dict[str, object]:
        """For `/api/health`: touches no backend. `age_s` is the time since the prompt was
        last confirmed against its source; it keeps growing while the source fails."""
        snapshot = self._snapshot
        if snapshot is None:
            status = "unavailable" if self.last_error else "not_loaded"
        else:
            status = "degraded" if self.last_error else "ok"
        return {
            "source": self.source.name,
            "status": status,
            "version": snapshot.version if snapshot else None,
            "docs": len(snapshot.docs) if snapshot else 0,
            "age_s": None if snapshot is None else round(self.clock() - snapshot.loaded_at, 1),
            "error": self.last_error,
        }

    def _refresh_in_flight(self) -> bool:
        fut = self._refresh
        # A future of another event loop (a new serverless invocation) is dead: ignore it.
        return fut is not None and not fut.done() and fut.get_loop() is asyncio.get_running_loop()

    async def _revalidate(self, force: bool = False) -> PromptSnapshot:
        while self._refresh_in_flight():
            assert self._refresh is not None
            if not force:
                return await asyncio.shield(self._refresh)
            # A forced reload waits for the running refresh, then lists again: two loads
            # racing to swap the snapshot could leave the older listing in place.
            with contextlib.suppress(Exception):
                await asyncio.shield(self._refresh)
        fut: asyncio.Future[PromptSnapshot] = asyncio.get_running_loop().create_future()
        self._refresh = fut
        try:
            snapshot = await self._load()
        except Exception as exc:
            self.last_error = _describe(exc)
            self._checked_at = self.clock()  # retry after one TTL, not on every request
            if self._snapshot is not None and not force:
                log.warning(
                    "prompt source %r failed; serving last good version %s: %s",
                    self.source.name,
                    self._snapshot.version,
                    exc,
                )
                fut.set_result(self._snapshot)
                return self._snapshot
            log.error("prompt source %r failed: %s", self.source.name, exc)
            # The admin who forced the reload learns what is wrong; users only that it failed.
            error = (
                InvalidDocs("docs_invalid_detail", detail=str(exc))
                if force and isinstance(exc, ConfigError)
                else PromptUnavailable()
            )
            _settle_with(fut, error)
            raise error from exc
        except BaseException:
            # Cancelled mid-load (the client left): waiters must not hang on this future.
            _settle_with(fut, PromptUnavailable())
            raise
        previous = self._snapshot
        self._snapshot, self._checked_at, self.last_error = snapshot, self.clock(), None
        fut.set_result(snapshot)
        if previous is None or previous.version != snapshot.version:
            await self._archive(snapshot)
        return snapshot

    async def _load(self) -> PromptSnapshot:
        listed = await self.source.list_docs()
        old = self._snapshot
        held = {d.key: d for d in old.docs} if old else {}
        docs: dict[str, DocInfo] = {}
        contents: dict[str, str] = {}

        async def fetch(info: DocInfo) -> None:
            contents[info.key], docs[info.key] = await self.source.read_doc(info)

        try:
            async with anyio.create_task_group() as tg:
                for info in listed:
                    known = held.get(info.key)
                    if old is not None and known is not None and known.etag == info.etag:
                        docs[info.key], contents[info.key] = known, old.contents[info.key]
                    else:
                        tg.start_soon(fetch, info)
        except ExceptionGroup as group:
            raise group.exceptions[0] from group
        ordered = tuple(docs[info.key] for info in listed)
        if old is not None and ordered == old.docs:
            return replace(old, loaded_at=self.clock())
        text, version = build_prompt(contents)
        if not text:
            # Bad docs, not a source outage: a forced reload is 422 `invalid_docs` naming it.
            raise ConfigError(
                f"no top-level {PROMPT_SUFFIX} docs in prompt source {self.source.name!r}"
            )
        if self.validate is not None:
            self.validate(contents)
        if old is None or old.version != version:
            log.info(
                "prompt version %s loaded from %r (%d docs)", version, self.source.name, len(docs)
            )
        return PromptSnapshot(text, version, ordered, contents, self.clock())

    async def _archive(self, snapshot: PromptSnapshot) -> None:
        """Keep an audit copy of a new version. Its failure never fails the reload."""
        if not isinstance(self.source, BuiltPromptArchive):
            return
        try:
            if await self.source.archive_built(snapshot.version, snapshot.text):
                log.info("archived built prompt version %s", snapshot.version)
        except Exception as exc:
            log.warning("could not archive built prompt version %s: %s", snapshot.version, exc)


def _settle_with(fut: asyncio.Future[PromptSnapshot], error: Exception) -> None:
    if not fut.done():
        fut.set_exception(error)
        fut.exception()  # mark retrieved: waiters re-raise it, nobody else needs to


def _describe(exc: Exception) -> str:
    """A short, public-safe description (health is unauthenticated): the exception kind and,
    for AWS errors, the error code; the full message goes to the log."""
    response = getattr(exc, "response", None)
    code = response.get("Error", {}).get("Code") if isinstance(response, dict) else None
    kind = type(exc).__name__
    return f"{kind}({code})" if code and code != kind else kind
