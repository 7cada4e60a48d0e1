"""Prompt docs in an S3 bucket (versioning on), read with boto3 in worker threads.

`list_docs()` is the cheap revalidation: ONE `list_objects_v2` call (more pages only past 1000
keys) giving keys, ETags, sizes and dates. Object version ids do not come with that listing;
`read_doc()` takes them from `get_object` when a doc is fetched. Keys in sub-folders are docs
too (`tasks/email_triage/prompt.md`). The built prompt of each new version is archived under
`{PROMPT_PREFIX}_built/`, a folder the listing skips.

`docs push` writes a manifest last, `{PROMPT_PREFIX}.manifest.json` (a hidden file: never a
doc), naming each doc's ETag and version id. When the listing holds one, the source serves the
manifest's docs and nothing else: a listing taken between two uploads of a push gives the
last pushed set, never a mix of old and new docs. The manifest is fetched again only when its
ETag in the listing changed. A bucket without a manifest is served as it is listed. A push or
rollback writes it only if it is still the one read at its start (S3's conditional write), so
of two at once one fails and says so instead of silently unpublishing the other's docs.
"""

from __future__ import annotations

import json
import logging
import threading
from dataclasses import dataclass, replace
from datetime import datetime
from typing import Any

import anyio

from aircoach.errors import ConfigError
from aircoach.prompts.sources import DocInfo
from aircoach.settings import PromptSettings

BUILT_FOLDER = "_built/"
MANIFEST_KEY = ".manifest.json"
MANIFEST_FORMAT = 1
# What a GET answers when the object is no longer the one asked for (If-Match), or is gone.
_OBJECT_MOVED = {"PreconditionFailed", "412", "NoSuchKey", "404", "NotFound"}

log = logging.getLogger(__name__)


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


def is_doc_key(key: str) -> bool:
    """Docs are every key under the prefix, sub-folders included (`tasks/email_triage/...`),
    except folder markers, the archive of built prompts and hidden files, as locally."""
    if not key or key.endswith("/") or key.startswith(BUILT_FOLDER):
        return False
    return not any(part.startswith(".") for part in key.split("/"))


@dataclass(frozen=True)
class Manifest:
    """The docs one `docs push` published: key, ETag, size and version id of each."""

    etag: str
    pushed_at: str | None
    docs: tuple[DocInfo, ...]


def manifest_body(docs: list[DocInfo], pushed_at: str) -> bytes:
    entries = {
        d.key: {"etag": d.etag, "size": d.size, "version_id": d.version_id}
        for d in sorted(docs, key=lambda d: d.key)
    }
    body = {"format": MANIFEST_FORMAT, "pushed_at": pushed_at, "docs": entries}
    return json.dumps(body, indent=1, sort_keys=True).encode("utf-8") + b"\n"


def _parse_manifest(data: bytes, etag: str, where: str) -> Manifest:
    try:
        body = json.loads(data)
        if body.get("format") != MANIFEST_FORMAT:
            raise ValueError(f"format {body.get('format')!r}, expected {MANIFEST_FORMAT}")
        docs = tuple(
            DocInfo(
                key=key,
                etag=str(entry["etag"]),
                size=int(entry["size"]),
                version_id=entry.get("version_id") or None,
            )
            for key, entry in sorted(body["docs"].items())
            if is_doc_key(key)
        )
    except (ValueError, TypeError, KeyError, AttributeError) as exc:
        raise ConfigError(
            f"{where} is not a docs manifest ({type(exc).__name__}: {exc}); run `docs push` "
            "to write it again, or delete it to serve the docs as they are listed"
        ) from None
    return Manifest(etag=etag, pushed_at=body.get("pushed_at"), docs=docs)


def differences(listed: list[DocInfo], manifest: Manifest) -> list[str]:
    """The keys whose listed object is not the manifest's: changed, added or missing."""
    listed_etags = {d.key: d.etag for d in listed}
    pinned = {d.key: d.etag for d in manifest.docs}
    keys = set(listed_etags) | set(pinned)
    return sorted(k for k in keys if listed_etags.get(k) != pinned.get(k))


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
        self._manifest: Manifest | None = None
        # The mismatch last logged (manifest ETag, keys), so a lasting one is logged once.
        self._mismatch_logged: tuple[str, tuple[str, ...]] | None = None

    @property
    def manifest_key(self) -> str:
        return self.prefix + MANIFEST_KEY

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
        """The docs to serve: the manifest's when the bucket has one, else the listing."""
        listed, manifest_etag = self.list_objects_blocking()
        if manifest_etag is None:
            self._manifest = None
            return listed
        manifest = self._manifest
        if manifest is None or manifest.etag != manifest_etag:
            manifest = self._manifest = self._read_manifest()
        self._note_differences(differences(listed, manifest), manifest)
        current = {d.key: d for d in listed}
        return [
            replace(d, last_modified=current[d.key].last_modified)
            if d.key in current and current[d.key].etag == d.etag
            else d
            for d in manifest.docs
        ]

    def list_objects_blocking(self) -> tuple[list[DocInfo], str | None]:
        """The docs as listed now, and the manifest's ETag (None without one)."""
        docs: list[DocInfo] = []
        manifest_etag = None
        kwargs: dict[str, Any] = {"Bucket": self.bucket, "Prefix": self.prefix}
        while True:
            page = self.client.list_objects_v2(**kwargs)
            for obj in page.get("Contents", []):
                key = obj["Key"][len(self.prefix) :]
                if key == MANIFEST_KEY:
                    manifest_etag = _etag(obj["ETag"])
                if not is_doc_key(key):
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
        return sorted(docs, key=lambda d: d.key), manifest_etag

    def read_manifest_blocking(self) -> Manifest | None:
        """The manifest in the bucket now, None without one."""
        found = self._find_manifest()
        return None if found is None else self._parse(*found)

    def read_manifest_for_update_blocking(self) -> tuple[Manifest | None, str | None]:
        """The manifest and its ETag, for a write conditional on it (`IfMatch`): (None, None)
        without one, (None, etag) for an object that is not a manifest (a push replaces it)."""
        found = self._find_manifest()
        if found is None:
            return None, None
        try:
            return self._parse(*found), found[1]
        except ConfigError:
            return None, found[1]

    def _read_manifest(self) -> Manifest:
        return self._parse(*self._get_manifest())

    def _find_manifest(self) -> tuple[bytes, str] | None:
        from botocore.exceptions import ClientError

        try:
            return self._get_manifest()
        except ClientError as exc:
            if exc.response.get("Error", {}).get("Code") not in ("NoSuchKey", "404", "NotFound"):
                raise
        return None

    def _get_manifest(self) -> tuple[bytes, str]:
        response = self.client.get_object(Bucket=self.bucket, Key=self.manifest_key)
        with response["Body"] as body:
            return body.read(), _etag(response["ETag"])

    def _parse(self, data: bytes, etag: str) -> Manifest:
        return _parse_manifest(data, etag, f"s3://{self.bucket}/{self.manifest_key}")

    def _note_differences(self, keys: list[str], manifest: Manifest) -> None:
        """Log a listing that differs from the manifest once, not at every check."""
        state = (manifest.etag, tuple(keys))
        if not keys:
            if self._mismatch_logged is not None:
                log.info("prompt docs match their manifest again (pushed %s)", manifest.pushed_at)
            self._mismatch_logged = None
            return
        if state == self._mismatch_logged:
            return
        self._mismatch_logged = state
        shown = ", ".join(keys[:5]) + (f" and {len(keys) - 5} more" if len(keys) > 5 else "")
        log.warning(
            "prompt docs under s3://%s/%s differ from their manifest in %d doc(s) (%s): serving "
            "the manifest's docs (pushed %s). A push is under way, or docs were changed by "
            "hand: run `docs push`, or delete %s to serve the docs as listed",
            self.bucket,
            self.prefix,
            len(keys),
            shown,
            manifest.pushed_at,
            MANIFEST_KEY,
        )

    def read_doc_blocking(self, info: DocInfo) -> tuple[str, DocInfo]:
        response = self._get(info)
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

    def _get(self, info: DocInfo) -> Any:
        """The doc's object. A doc of a manifest (it has a version id) is that object exactly:
        the current one if its ETag is still the manifest's (a plain GET, no need of
        s3:GetObjectVersion), else that version (a push replaced it since)."""
        from botocore.exceptions import ClientError

        key = self.prefix + info.key
        if info.version_id is None:
            return self.client.get_object(Bucket=self.bucket, Key=key)
        try:
            return self.client.get_object(Bucket=self.bucket, Key=key, IfMatch=info.etag)
        except ClientError as exc:
            if exc.response.get("Error", {}).get("Code") not in _OBJECT_MOVED:
                raise
        return self.client.get_object(Bucket=self.bucket, Key=key, VersionId=info.version_id)

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
