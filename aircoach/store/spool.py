"""The dead-letter spools (`aircoach.turn.dead_letters.TurnSpool`): S3 under
`DEADLETTER_BUCKET`/`DEADLETTER_PREFIX`, shared by every instance, or one file per turn under
`DATA_DIR/deadletter` (on Lambda/Vercel that is `/tmp`: it survives only as long as the
instance, so a bucket is the production choice). An entry that is not a turn, or that the
store refuses while it takes other turns, is moved aside to `quarantine/` in the same place,
out of the replay's listing, for an operator to inspect.
Blocking work (boto3, file I/O) runs in worker threads."""

from __future__ import annotations

import contextlib
import logging
import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import anyio

from aircoach.turn.records import Turn

log = logging.getLogger(__name__)

_SUFFIX = ".json"
# A temp file this old belongs to no running write: one takes milliseconds.
_STALE_TMP_S = 3600.0
QUARANTINE = "quarantine/"


class FileSpool:
    """One JSON file per turn in `folder`, written atomically (a temp file renamed)."""

    kind = "file"

    def __init__(self, folder: Path, *, max_entries: int = 10_000):
        self.folder = folder
        self.max_entries = max_entries  # a full disk (Lambda's /tmp is 512 MB) helps nobody

    async def put(self, turn: Turn) -> None:
        await anyio.to_thread.run_sync(self._put, turn)

    async def keys(self, limit: int) -> list[str]:
        return await anyio.to_thread.run_sync(self._keys, limit)

    async def get(self, key: str) -> Turn | None:
        try:
            data = await anyio.to_thread.run_sync((self.folder / key).read_bytes)
        except FileNotFoundError:
            return None
        return Turn.model_validate_json(data)

    async def delete(self, key: str) -> None:
        await anyio.to_thread.run_sync(lambda: (self.folder / key).unlink(missing_ok=True))

    async def quarantine(self, key: str) -> None:
        await anyio.to_thread.run_sync(self._quarantine, key)

    async def find(self, turn_id: str) -> Turn | None:
        return await self.get(f"{turn_id}{_SUFFIX}")

    async def remove(self, turn_id: str) -> None:
        await self.delete(f"{turn_id}{_SUFFIX}")

    def _quarantine(self, key: str) -> None:
        aside = self.folder / QUARANTINE
        aside.mkdir(exist_ok=True, mode=0o700)
        # Missing: another instance moved it first.
        with contextlib.suppress(FileNotFoundError):
            (self.folder / key).replace(aside / key)

    def _put(self, turn: Turn) -> None:
        self.folder.mkdir(parents=True, exist_ok=True, mode=0o700)
        if len(self._keys(self.max_entries)) >= self.max_entries:
            raise OSError(f"dead-letter folder holds {self.max_entries} turns already")
        path = self.folder / f"{turn.turn_id}{_SUFFIX}"
        tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
        try:
            tmp.write_text(turn.model_dump_json(), encoding="utf-8")
            tmp.chmod(0o600)  # the user's question and the answer
            tmp.replace(path)
        except BaseException:
            # A full disk stops the write half-way: the partial file would never be listed
            # nor removed, and would hold half a question and answer, and the disk's space.
            tmp.unlink(missing_ok=True)
            raise

    def _keys(self, limit: int) -> list[str]:
        if not self.folder.is_dir():
            return []
        names = []
        stale = time.time() - _STALE_TMP_S
        for entry in os.scandir(self.folder):
            if not entry.name.startswith("."):
                if entry.name.endswith(_SUFFIX):
                    names.append(entry.name)
            elif entry.name.endswith(".tmp") and _older(entry, stale):
                # Its process died between the write and the rename: never renamed, never
                # listed, it would hold a question and answer and the disk's space for ever.
                log.warning("dead-letter spool: removed a temp file left behind, %r", entry.name)
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(entry.path)
        return sorted(names)[:limit]


def _older(entry: os.DirEntry[str], than: float) -> bool:
    try:
        return entry.stat().st_mtime < than
    except FileNotFoundError:
        return False  # renamed or removed since the scan


class S3Spool:
    """One JSON object per turn under `s3://{bucket}/{prefix}`. `client` makes the boto3
    client (blocking: called in a worker thread, once)."""

    kind = "s3"

    def __init__(self, bucket: str, prefix: str, client: Callable[[], Any]):
        self.bucket = bucket
        self.prefix = prefix
        self._make_client = client
        self._client: Any = None

    @property
    def client(self) -> Any:
        if self._client is None:
            self._client = self._make_client()
        return self._client

    async def put(self, turn: Turn) -> None:
        body = turn.model_dump_json().encode()
        await anyio.to_thread.run_sync(
            lambda: self.client.put_object(
                Bucket=self.bucket,
                Key=f"{self.prefix}{turn.turn_id}{_SUFFIX}",
                Body=body,
                ContentType="application/json",
            )
        )

    async def keys(self, limit: int) -> list[str]:
        def list_keys() -> list[str]:
            # S3 counts the quarantine/ folder and objects that are not entries in `MaxKeys`:
            # pages go on until `limit` entries, so none of them holds the oldest slots.
            pages = self.client.get_paginator("list_objects_v2").paginate(
                Bucket=self.bucket,
                Prefix=self.prefix,
                Delimiter="/",
                PaginationConfig={"PageSize": limit},
            )
            keys: list[str] = []
            for page in pages:
                names = (obj["Key"][len(self.prefix) :] for obj in page.get("Contents", []))
                keys += (name for name in names if name.endswith(_SUFFIX))
                if len(keys) >= limit:
                    break
            return keys[:limit]

        return await anyio.to_thread.run_sync(list_keys)

    async def get(self, key: str) -> Turn | None:
        from botocore.exceptions import ClientError

        def read() -> bytes | None:
            try:
                response = self.client.get_object(Bucket=self.bucket, Key=self.prefix + key)
            except ClientError as exc:
                if _missing(exc):
                    return None
                raise
            with response["Body"] as body:
                return body.read()

        data = await anyio.to_thread.run_sync(read)
        return None if data is None else Turn.model_validate_json(data)

    async def delete(self, key: str) -> None:
        await anyio.to_thread.run_sync(
            lambda: self.client.delete_object(Bucket=self.bucket, Key=self.prefix + key)
        )

    async def quarantine(self, key: str) -> None:
        from botocore.exceptions import ClientError

        def move() -> None:
            try:
                self.client.copy_object(
                    Bucket=self.bucket,
                    Key=f"{self.prefix}{QUARANTINE}{key}",
                    CopySource={"Bucket": self.bucket, "Key": self.prefix + key},
                )
            except ClientError as exc:
                if not _missing(exc):
                    raise
                return  # another instance moved it first
            self.client.delete_object(Bucket=self.bucket, Key=self.prefix + key)

        await anyio.to_thread.run_sync(move)

    async def find(self, turn_id: str) -> Turn | None:
        return await self.get(f"{turn_id}{_SUFFIX}")

    async def remove(self, turn_id: str) -> None:
        await self.delete(f"{turn_id}{_SUFFIX}")


def _missing(exc: Any) -> bool:
    return exc.response.get("Error", {}).get("Code") in ("NoSuchKey", "404")
