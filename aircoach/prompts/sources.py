"""Where the prompt docs live: the `PromptSource` protocol and the local folder source (the
embedded default). The S3 source is in `aircoach.prompts.s3`."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Protocol, runtime_checkable

import anyio


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

    async def read_doc(self, info: DocInfo) -> tuple[str, DocInfo]:
        """The doc's text and the info of what was actually read (S3 adds the object's
        version id, which its listing does not give)."""
        ...


@runtime_checkable
class BuiltPromptArchive(Protocol):
    """A source that keeps an audit copy of every built prompt version."""

    async def archive_built(self, version: str, text: str) -> bool: ...


class LocalDocSource:
    """Docs in a local folder (the embedded default), sub-folders included: a doc's key is its
    path inside the folder with `/` separators (`tasks/email_triage/prompt.md`). Hidden files
    and folders (a leading dot) are not docs."""

    name = "local"

    def __init__(self, folder: Path):
        self.folder = folder
        # The bytes the last listing read (it hashes every file for its etag), by key: a
        # read of the same etag takes them instead of opening the file again in a thread of
        # its own. A load was 21 thread hops for 20 docs, 17 ms of CPU on a new event loop
        # (whose first hops start anyio's worker threads); now one hop, 5 ms. Replaced whole
        # at each listing: never more than the folder holds.
        self._listed: dict[str, tuple[str, bytes]] = {}

    async def list_docs(self) -> list[DocInfo]:
        return await anyio.to_thread.run_sync(self._list)

    def _list(self) -> list[DocInfo]:
        if not self.folder.is_dir():
            raise FileNotFoundError(f"prompt docs folder {str(self.folder)!r} does not exist")
        docs = []
        listed: dict[str, tuple[str, bytes]] = {}
        for path in self.folder.rglob("*"):
            relative = path.relative_to(self.folder)
            if not path.is_file() or any(part.startswith(".") for part in relative.parts):
                continue
            data = path.read_bytes()
            info = DocInfo(
                key=relative.as_posix(),
                etag=hashlib.md5(data, usedforsecurity=False).hexdigest(),
                size=len(data),
                last_modified=datetime.fromtimestamp(path.stat().st_mtime, UTC).isoformat(),
            )
            docs.append(info)
            listed[info.key] = (info.etag, data)
        self._listed = listed
        return sorted(docs, key=lambda d: d.key)

    def path_of(self, key: str) -> Path:
        return self.folder.joinpath(*key.split("/"))

    async def read_doc(self, info: DocInfo) -> tuple[str, DocInfo]:
        """The doc's text: the bytes its listing hashed when the etag is theirs (so the text
        is the one the etag names, even if the file changed since), else read again."""
        etag, data = self._listed.get(info.key, ("", b""))
        if etag != info.etag:
            data = await anyio.to_thread.run_sync(self.path_of(info.key).read_bytes)
        # As `Path.read_text` reads it: UTF-8, universal newlines.
        return data.decode("utf-8").replace("\r\n", "\n").replace("\r", "\n"), info
