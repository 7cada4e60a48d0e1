"""The `python -m aircoach docs ...` commands: push, status, history and rollback of the prompt
docs in the S3 bucket. Blocking boto3 calls are fine here: this runs in a terminal, not in the
server's event loop."""

from __future__ import annotations

import asyncio
import mimetypes
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from aircoach.errors import ConfigError
from aircoach.prompts.keys import PROMPT_SUFFIX, folder_versions
from aircoach.prompts.s3 import Manifest, S3DocSource, differences, is_doc_key, manifest_body
from aircoach.prompts.sources import DocInfo, LocalDocSource, PromptSource
from aircoach.prompts.store import build_prompt
from aircoach.settings import PromptSettings


class DocsCommandError(Exception):
    """A docs command that cannot go on; the CLI prints the message and exits with 1."""


class PublishConflict(DocsCommandError):
    """The manifest changed between the start of a push (or rollback) and its write: another
    one published meanwhile, and this one published nothing."""

    def __init__(self, command: str):
        super().__init__(
            f"another push or rollback changed the published docs while this {command} ran; "
            f"nothing of this {command} is published: run it again"
        )


# What a conditional write answers when the object is no longer the one read (412), when a
# conditional write on the same key is under way (409), or when it was deleted (If-Match).
_MANIFEST_MOVED = {"PreconditionFailed", "412", "ConditionalRequestConflict", "409"}
_MANIFEST_GONE = {"NoSuchKey", "404", "NotFound"}


@dataclass(frozen=True)
class PushResult:
    key: str
    action: str  # "uploaded", "unchanged", "deleted", "remote only"
    version_id: str | None = None


@dataclass(frozen=True)
class Status:
    local_version: str | None
    remote_version: str | None
    only_local: list[str]
    only_remote: list[str]
    different: list[str]
    # Each task's own version, local and remote (a task edit leaves `prompt_version` alone).
    tasks: dict[str, tuple[str | None, str | None]] = field(default_factory=dict)
    # Docs whose object in the bucket is not the manifest's (changed, added or deleted by
    # hand, or a push under way): instances serve the manifest's, "remote" above.
    unpublished: list[str] = field(default_factory=list)

    @property
    def in_sync(self) -> bool:
        """Every doc the same on both sides (a task edit leaves the prompt version alone)."""
        return not (self.only_local or self.only_remote or self.different or self.unpublished)


@dataclass(frozen=True)
class ObjectVersion:
    version_id: str
    latest: bool
    last_modified: str
    etag: str | None
    size: int | None
    delete_marker: bool = False


class DocsBucket:
    """The docs under `s3://{PROMPT_BUCKET}/{PROMPT_PREFIX}` and the local `prompt_docs/`.
    `validate` is the server's check of a set of docs (raises `ConfigError`): `push` runs it
    on the local docs first, so docs a server would refuse never reach the bucket."""

    def __init__(
        self,
        settings: PromptSettings,
        folder: Path | None = None,
        *,
        validate: Callable[[Mapping[str, str]], object] | None = None,
    ):
        if not settings.prompt_bucket:
            raise ConfigError("PROMPT_BUCKET is not set: the docs commands need a bucket")
        self.settings = settings
        self.folder = folder or settings.prompt_docs_dir
        self.validate = validate
        self.source = S3DocSource(settings)
        self.bucket = self.source.bucket
        self.prefix = self.source.prefix

    @property
    def client(self) -> Any:
        return self.source.client

    def require_versioning(self) -> None:
        status = self.client.get_bucket_versioning(Bucket=self.bucket).get("Status")
        if status != "Enabled":
            raise DocsCommandError(
                f"bucket {self.bucket!r} has versioning {status or 'never enabled'!r}: without it "
                "there is no history or rollback. Enable it with: aws s3api "
                f"put-bucket-versioning --bucket {self.bucket} "
                "--versioning-configuration Status=Enabled"
            )

    def push(self, *, delete: bool = False) -> list[PushResult]:
        """Upload the local docs (sub-folders included) whose MD5 differs from the remote ETag,
        then write the manifest (`S3DocSource` serves its docs and only them: an instance
        listing mid-push keeps the docs of the previous push), then, with `delete`, delete
        the remote-only docs (without it they stay published). Docs the server would refuse
        are not pushed at all: every instance started after them would have no prompt to
        serve (503 on every chat). If another push or rollback wrote the manifest since this
        one began, `PublishConflict`: nothing of this push is published (its uploads are
        versions no manifest names) and nothing is deleted."""
        self.require_versioning()
        folder = LocalDocSource(self.folder)
        local, contents = asyncio.run(_read_all(folder))
        self._check(contents)
        # Read before the listing: a manifest another push writes from now on fails our write.
        start, start_etag = self.source.read_manifest_for_update_blocking()
        remote = self._latest_objects()
        results = []
        published = []
        for doc in local:
            current = remote.get(doc.key)
            if current is not None and current.etag == doc.etag:
                results.append(PushResult(doc.key, "unchanged", None))
                published.append(current)
                continue
            content_type = mimetypes.guess_type(doc.key)[0] or "application/octet-stream"
            if doc.key.endswith(".md"):
                content_type = "text/markdown; charset=utf-8"
            response = self.client.put_object(
                Bucket=self.bucket,
                Key=self.prefix + doc.key,
                Body=folder.path_of(doc.key).read_bytes(),
                ContentType=content_type,
            )
            version_id = response.get("VersionId")
            results.append(PushResult(doc.key, "uploaded", version_id))
            etag = response["ETag"].strip('"')
            published.append(DocInfo(doc.key, etag, doc.size, version_id=version_id))
        remote_only = sorted(set(remote) - {d.key for d in local})
        if not delete:
            published += [remote[key] for key in remote_only]
        self._write_manifest(published, start, start_etag, command="push")
        for key in remote_only:
            if delete:
                # On a versioned bucket this adds a delete marker: the doc stays in history.
                response = self.client.delete_object(Bucket=self.bucket, Key=self.prefix + key)
                results.append(PushResult(key, "deleted", response.get("VersionId")))
            else:
                results.append(PushResult(key, "remote only"))
        return results

    def _latest_objects(self) -> dict[str, DocInfo]:
        """Each doc's latest object with its version id (a listing of versions: a plain listing
        has no version ids); a doc whose latest version is a delete marker is not there."""
        latest: dict[str, DocInfo] = {}
        paginator = self.client.get_paginator("list_object_versions")
        for page in paginator.paginate(Bucket=self.bucket, Prefix=self.prefix):
            for entry in page.get("Versions", []):
                key = entry["Key"][len(self.prefix) :]
                if entry["IsLatest"] and is_doc_key(key):
                    latest[key] = DocInfo(
                        key,
                        entry["ETag"].strip('"'),
                        entry["Size"],
                        version_id=entry["VersionId"],
                    )
        return latest

    def _write_manifest(
        self,
        published: list[DocInfo],
        start: Manifest | None,
        start_etag: str | None,
        *,
        command: str,
    ) -> None:
        """Written last: the one object whose change makes the push visible to readers, and
        only if it is still the one read at the command's start (`start_etag`; None: there was
        none), else `PublishConflict`. Left alone when it names these docs already (an
        instance re-reads it when it changes), once checked that it is still that one."""
        from botocore.exceptions import ClientError

        def pinned(docs: Iterable[DocInfo]) -> set[tuple[str, str, str | None]]:
            return {(d.key, d.etag, d.version_id) for d in docs}

        # An ETag quoted, as HTTP has it (moto's HeadObject takes no other form).
        condition = {"IfNoneMatch": "*"} if start_etag is None else {"IfMatch": f'"{start_etag}"'}
        try:
            if start is not None and pinned(start.docs) == pinned(published):
                self.client.head_object(
                    Bucket=self.bucket, Key=self.source.manifest_key, **condition
                )
                return
            self.client.put_object(
                Bucket=self.bucket,
                Key=self.source.manifest_key,
                Body=manifest_body(published, datetime.now(UTC).isoformat(timespec="seconds")),
                ContentType="application/json",
                **condition,
            )
        except ClientError as exc:
            code = exc.response.get("Error", {}).get("Code")
            if code in _MANIFEST_MOVED or (start_etag is not None and code in _MANIFEST_GONE):
                raise PublishConflict(command) from None
            raise

    def _check(self, contents: Mapping[str, str]) -> None:
        if not build_prompt(contents)[0]:
            raise DocsCommandError(
                f"nothing pushed: no top-level {PROMPT_SUFFIX} docs in {str(self.folder)!r}, "
                "so the server would have no system prompt"
            )
        if self.validate is None:
            return
        try:
            self.validate(contents)
        except ConfigError as exc:
            raise DocsCommandError(
                f"nothing pushed: the server would refuse these docs: {exc}"
            ) from None

    def status(self) -> Status:
        """Local docs against the published ones: the manifest's when the bucket has one."""
        local_docs, local = asyncio.run(_read_all(LocalDocSource(self.folder)))
        remote_docs, remote = asyncio.run(_read_all(self.source))
        listed, _ = self.source.list_objects_blocking()
        manifest = self.source.read_manifest_blocking()
        local_etags = {d.key: d.etag for d in local_docs}
        remote_etags = {d.key: d.etag for d in remote_docs}
        # The task folders' versions (`tasks/<name>/`, see aircoach.tasks.definition).
        local_tasks = folder_versions(local, "tasks")
        remote_tasks = folder_versions(remote, "tasks")
        return Status(
            local_version=build_prompt(local)[1] if local else None,
            remote_version=build_prompt(remote)[1] if remote else None,
            only_local=sorted(set(local) - set(remote)),
            only_remote=sorted(set(remote) - set(local)),
            different=sorted(
                k for k in set(local) & set(remote) if local_etags[k] != remote_etags[k]
            ),
            tasks={
                name: (local_tasks.get(name), remote_tasks.get(name))
                for name in sorted(set(local_tasks) | set(remote_tasks))
            },
            unpublished=differences(listed, manifest) if manifest is not None else [],
        )

    def history(self, key: str) -> list[ObjectVersion]:
        """Every version of one doc (and delete markers), newest first."""
        full_key = self.prefix + key
        versions: list[ObjectVersion] = []
        paginator = self.client.get_paginator("list_object_versions")
        for page in paginator.paginate(Bucket=self.bucket, Prefix=full_key):
            entries = [(v, False) for v in page.get("Versions", [])]
            entries += [(m, True) for m in page.get("DeleteMarkers", [])]
            versions.extend(
                ObjectVersion(
                    version_id=entry["VersionId"],
                    latest=entry["IsLatest"],
                    last_modified=entry["LastModified"].isoformat(),
                    etag=None if marker else entry["ETag"].strip('"'),
                    size=None if marker else entry["Size"],
                    delete_marker=marker,
                )
                for entry, marker in entries
                if entry["Key"] == full_key
            )
        if not versions:
            raise DocsCommandError(f"no versions of {key!r} in s3://{self.bucket}/{self.prefix}")
        return sorted(versions, key=lambda v: (v.latest, v.last_modified), reverse=True)

    def rollback(self, key: str, version_id: str) -> str:
        """Copy one version of a doc over the latest, so that it is the latest again (the
        versions in between stay in history). Returns the new version id. The manifest's entry
        is updated under the same rule as a push's (`PublishConflict`)."""
        self.require_versioning()
        versions = {v.version_id: v for v in self.history(key)}
        target = versions.get(version_id)
        if target is None:
            raise DocsCommandError(
                f"{key!r} has no version {version_id!r}; see `docs history {key}`"
            )
        if target.delete_marker:
            raise DocsCommandError(f"version {version_id!r} of {key!r} is a delete marker")
        if target.latest:
            raise DocsCommandError(f"version {version_id!r} of {key!r} is already the latest")
        full_key = self.prefix + key
        manifest = self.source.read_manifest_blocking()
        response = self.client.copy_object(
            Bucket=self.bucket,
            Key=full_key,
            CopySource={"Bucket": self.bucket, "Key": full_key, "VersionId": version_id},
        )
        new_id: str = response["VersionId"]
        if manifest is not None:
            # Readers serve the manifest's docs: the rolled-back doc is published once it
            # names the new object.
            etag = response["CopyObjectResult"]["ETag"].strip('"')
            copied = DocInfo(key, etag, target.size or 0, version_id=new_id)
            others = [d for d in manifest.docs if d.key != key]
            self._write_manifest([*others, copied], manifest, manifest.etag, command="rollback")
        elif self.source.read_manifest_for_update_blocking()[1] is not None:
            # The bucket served its listing, the copy included, until a push wrote a manifest
            # meanwhile: that one names the doc's previous version.
            raise PublishConflict("rollback")
        return new_id


async def _read_all(source: PromptSource) -> tuple[list[DocInfo], dict[str, str]]:
    docs = await source.list_docs()
    contents = {d.key: (await source.read_doc(d))[0] for d in docs}
    return docs, contents
