"""Prompt docs in an S3 bucket (versioning on), read with boto3 in worker threads.

`list_docs()` is the cheap revalidation: ONE `list_objects_v2` call (more pages only past 1000
keys) giving keys, ETags, sizes and dates. Object version ids do not come with that listing;
`read_doc()` takes them from `get_object` when a doc is fetched. Keys in sub-folders are docs
too (`tasks/email_triage/prompt.md`). The built prompt of each new version is archived under
`{PROMPT_PREFIX}_built/`, a folder the listing skips.
"""

from __future__ import annotations

import threading
from datetime import datetime
from typing import Any

import anyio

from aircoach.prompts.sources import DocInfo
from aircoach.settings import PromptSettings

BUILT_FOLDER = "_built/"


_loader: Any = None
_loader_lock = threading.Lock()


def _botocore_session() -> Any:
    """A new botocore session (sessions are not thread-safe) sharing one data loader: parsing
    botocore's JSON models costs 0.1-0.3 s per session, and its results never change."""
    global _loader
    import botocore.loaders
    import botocore.session

    with _loader_lock:
        if _loader is None:
            _loader = botocore.loaders.create_loader()
    session = botocore.session.get_session()
    session.register_component("data_loader", _loader)
    return session


def make_s3_client(settings: PromptSettings) -> Any:
    """A boto3 S3 client for the settings. Blocking (it loads botocore's service models), so
    the server calls it in a worker thread; a session of its own keeps it thread-safe."""
    import boto3
    from botocore.config import Config

    config = Config(
        connect_timeout=settings.s3_timeout_s,
        read_timeout=settings.s3_timeout_s,
        retries={"mode": "standard", "total_max_attempts": settings.s3_max_attempts},
        # MinIO, LocalStack and moto server answer on one host name: path-style addressing.
        s3={"addressing_style": "path"} if settings.aws_endpoint_url else None,
    )
    return boto3.session.Session(botocore_session=_botocore_session()).client(
        "s3",
        region_name=settings.aws_region,
        endpoint_url=settings.aws_endpoint_url,
        config=config,
    )


def built_key(prefix: str, version: str) -> str:
    return f"{prefix}{BUILT_FOLDER}{version}.md"


def _iso(value: datetime | None) -> str | None:
    return value.isoformat() if value is not None else None


def _etag(value: str) -> str:
    return value.strip('"')


def _is_doc_key(key: str) -> bool:
    """Docs are every key under the prefix, sub-folders included (`tasks/email_triage/...`),
    except folder markers, the archive of built prompts and hidden files, as locally."""
    if not key or key.endswith("/") or key.startswith(BUILT_FOLDER):
        return False
    return not any(part.startswith(".") for part in key.split("/"))


class S3DocSource:
    """Docs under `s3://{PROMPT_BUCKET}/{PROMPT_PREFIX}`; keys are relative to the prefix."""

    name = "s3"

    def __init__(self, settings: PromptSettings):
        if not settings.prompt_bucket:
            raise ValueError("S3DocSource needs PROMPT_BUCKET")
        self.settings = settings
        self.bucket: str = settings.prompt_bucket
        self.prefix = settings.prompt_prefix
        self._client: Any = None
        self._client_lock = threading.Lock()

    @property
    def client(self) -> Any:
        """The boto3 client, created on first use (from a worker thread in the server)."""
        if self._client is None:
            with self._client_lock:
                if self._client is None:
                    self._client = make_s3_client(self.settings)
        return self._client

    async def list_docs(self) -> list[DocInfo]:
        return await anyio.to_thread.run_sync(self.list_docs_blocking)

    async def read_doc(self, info: DocInfo) -> tuple[str, DocInfo]:
        return await anyio.to_thread.run_sync(self.read_doc_blocking, info)

    async def archive_built(self, version: str, text: str) -> bool:
        """Write the built prompt to `{prefix}_built/{version}.md` unless it is there already.
        Returns whether this call wrote it."""
        return await anyio.to_thread.run_sync(self._archive, version, text)

    # The blocking halves: the server runs them in worker threads, the CLI calls them directly.

    def list_docs_blocking(self) -> list[DocInfo]:
        docs: list[DocInfo] = []
        kwargs: dict[str, Any] = {"Bucket": self.bucket, "Prefix": self.prefix}
        while True:
            page = self.client.list_objects_v2(**kwargs)
            for obj in page.get("Contents", []):
                key = obj["Key"][len(self.prefix) :]
                if not _is_doc_key(key):
                    continue
                docs.append(
                    DocInfo(
                        key=key,
                        etag=_etag(obj["ETag"]),
                        size=obj["Size"],
                        last_modified=_iso(obj.get("LastModified")),
                    )
                )
            if not page.get("IsTruncated"):
                break
            kwargs["ContinuationToken"] = page["NextContinuationToken"]
        return sorted(docs, key=lambda d: d.key)

    def read_doc_blocking(self, info: DocInfo) -> tuple[str, DocInfo]:
        response = self.client.get_object(Bucket=self.bucket, Key=self.prefix + info.key)
        with response["Body"] as body:
            data = body.read()
        # What was actually read: the doc may have changed since the listing.
        read = DocInfo(
            key=info.key,
            etag=_etag(response["ETag"]),
            size=len(data),
            last_modified=_iso(response.get("LastModified")),
            version_id=response.get("VersionId"),
        )
        return data.decode("utf-8"), read

    def _archive(self, version: str, text: str) -> bool:
        from botocore.exceptions import ClientError

        key = built_key(self.prefix, version)
        try:
            self.client.head_object(Bucket=self.bucket, Key=key)
            return False
        except ClientError as exc:
            if exc.response.get("Error", {}).get("Code") not in ("404", "NoSuchKey", "NotFound"):
                raise
        self.client.put_object(
            Bucket=self.bucket,
            Key=key,
            Body=text.encode("utf-8"),
            ContentType="text/markdown; charset=utf-8",
        )
        return True
