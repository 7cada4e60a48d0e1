"""`python -m aircoach docs push | status | history | rollback` against a moto bucket."""

from __future__ import annotations

import asyncio
import shutil
from collections.abc import Callable

import pytest

from aircoach.__main__ import main
from aircoach.prompts import s3 as s3_module
from aircoach.prompts.publish import DocsBucket, PublishConflict
from aircoach.prompts.s3 import S3DocSource
from aircoach.prompts.store import PromptStore, build_prompt
from aircoach.settings import ROOT
from tests.clock import FakeClock
from tests.helpers import shipped_docs
from tests.s3 import BUCKET, PREFIX, REGION, s3_settings

DOCS = len(shipped_docs())


@pytest.fixture
def docs_dir(tmp_path):
    folder = tmp_path / "prompt_docs"
    shutil.copytree(ROOT / "prompt_docs", folder)
    return folder


@pytest.fixture
def empty_bucket(aws_env, tmp_path):
    import boto3
    from moto import mock_aws

    with mock_aws():
        client = boto3.client("s3", region_name=REGION)
        client.create_bucket(
            Bucket=BUCKET, CreateBucketConfiguration={"LocationConstraint": REGION}
        )
        yield client


@pytest.fixture
def cli(monkeypatch, docs_dir, data_dir, capsys):
    """Run the CLI as a user would, configured from the environment; returns its stdout."""
    monkeypatch.setenv("PROMPT_BUCKET", BUCKET)
    monkeypatch.setenv("PROMPT_PREFIX", PREFIX)
    monkeypatch.setenv("PROMPT_DOCS_DIR", str(docs_dir))
    monkeypatch.setenv("DATA_DIR", str(data_dir))
    monkeypatch.setenv("AWS_REGION", REGION)
    monkeypatch.chdir(docs_dir.parent)  # no stray .env

    def run(*argv: str) -> str:
        capsys.readouterr()
        main(["docs", *argv])
        return capsys.readouterr().out

    return run


def versioning_on(client) -> None:
    client.put_bucket_versioning(Bucket=BUCKET, VersioningConfiguration={"Status": "Enabled"})


def local_version(folder) -> str:
    return build_prompt(
        {p.relative_to(folder).as_posix(): p.read_text() for p in folder.rglob("*") if p.is_file()}
    )[1]


def test_push_refuses_a_bucket_without_versioning(empty_bucket, cli, capsys):
    with pytest.raises(SystemExit) as exit_info:
        cli("push")
    assert "versioning" in str(exit_info.value) and "put-bucket-versioning" in str(exit_info.value)
    assert empty_bucket.list_objects_v2(Bucket=BUCKET).get("KeyCount") == 0


def test_push_then_rollback_returns_to_the_earlier_version(empty_bucket, cli, docs_dir, data_dir):
    versioning_on(empty_bucket)
    out = cli("push")
    assert out.count("uploaded") == DOCS and f"{DOCS} change(s) pushed" in out
    first = local_version(docs_dir)
    assert f"remote {first}" in cli("status") and "in sync" in cli("status")
    assert "0 change(s)" in cli("push") and cli("push").count("unchanged") == DOCS

    (docs_dir / "10_stile.md").write_text("Rispondi in rima.\n")
    status = cli("status")
    assert "differs" in status and "different: 10_stile.md" in status
    out = cli("push")
    assert out.count("uploaded") == 1 and out.count("unchanged") == DOCS - 1
    second = local_version(docs_dir)
    assert second != first and f"remote {second}" in cli("status")

    history = cli("history", "10_stile.md").splitlines()
    assert len(history) == 2 and "latest" in history[0] and "latest" not in history[1]
    earlier_id = history[1].split()[0]

    out = cli("rollback", "10_stile.md", earlier_id)
    assert f"is now version {earlier_id!r} again" in out
    status = cli("status")
    assert f"remote {first}" in status and "differs" in status  # local still has the rhyme
    assert len(cli("history", "10_stile.md").splitlines()) == 3

    # What the server builds from the bucket is the earlier version again.
    store = PromptStore(S3DocSource(s3_settings(data_dir)), ttl_s=60)
    assert asyncio.run(store.current()).version == first


def test_rollback_refuses_unknown_and_latest_versions(empty_bucket, cli):
    versioning_on(empty_bucket)
    cli("push")
    latest_id = cli("history", "00_ruolo.md").split()[0]
    with pytest.raises(SystemExit, match="is already the latest"):
        cli("rollback", "00_ruolo.md", latest_id)
    with pytest.raises(SystemExit, match="has no version 'nope'"):
        cli("rollback", "00_ruolo.md", "nope")
    with pytest.raises(SystemExit, match=r"no versions of 'missing\.md'"):
        cli("history", "missing.md")


def test_push_delete_leaves_history_and_status_without_bucket_is_an_error(
    empty_bucket, cli, docs_dir, monkeypatch
):
    versioning_on(empty_bucket)
    assert cli("push").count("uploaded") == DOCS
    (docs_dir / "20_quiz.md").unlink()
    assert "remote only  20_quiz.md" in cli("push")
    out = cli("push", "--delete")
    assert "deleted  20_quiz.md" in out
    history = cli("history", "20_quiz.md")
    assert "delete marker" in history and "etag" in history
    assert "in sync" in cli("status")
    monkeypatch.delenv("PROMPT_BUCKET")
    with pytest.raises(SystemExit, match="PROMPT_BUCKET is not set"):
        cli("status")


def test_push_uploads_sub_folders_and_status_versions_tasks_apart(empty_bucket, cli, docs_dir):
    versioning_on(empty_bucket)
    out = cli("push")
    assert "uploaded  tasks/email_triage/task.json" in out
    keys = [o["Key"] for o in empty_bucket.list_objects_v2(Bucket=BUCKET)["Contents"]]
    assert PREFIX + "tasks/email_triage/schema.json" in keys
    prompt_version = local_version(docs_dir)
    status = cli("status")
    (task_line,) = [line for line in status.splitlines() if "task email_triage" in line]
    local_task, remote_task = task_line.split()[3], task_line.split()[5]
    assert local_task == remote_task and "in sync" in status

    (docs_dir / "tasks" / "email_triage" / "prompt.md").write_text("Nuove istruzioni.\n")
    status = cli("status")
    assert "different: tasks/email_triage/prompt.md" in status and "differs" in status
    assert f"local  {prompt_version}" in status and f"remote {prompt_version}" in status
    (task_line,) = [line for line in status.splitlines() if "task email_triage" in line]
    assert task_line.split()[3] != task_line.split()[5] == remote_task
    assert "uploaded  tasks/email_triage/prompt.md" in cli("push")


def test_push_refuses_docs_the_server_would_refuse_and_uploads_nothing(empty_bucket, cli, docs_dir):
    # A tools.json the server rejects would make every cold-started instance answer 503.
    versioning_on(empty_bucket)
    tools = docs_dir / "tools.json"
    tools.write_text(tools.read_text().replace('"timeout_s": 20', '"timeout_s": -1', 1))
    with pytest.raises(SystemExit) as exit_info:
        cli("push")
    message = str(exit_info.value)
    assert "tools.json" in message and "kb_search" in message and "timeout_s" in message
    assert empty_bucket.list_objects_v2(Bucket=BUCKET).get("KeyCount") == 0

    shutil.copy(ROOT / "prompt_docs" / "tools.json", tools)
    for doc in docs_dir.glob("*.md"):
        doc.unlink()  # no system prompt left
    with pytest.raises(SystemExit, match=r"no top-level \.md docs"):
        cli("push")
    assert empty_bucket.list_objects_v2(Bucket=BUCKET).get("KeyCount") == 0


def test_an_instance_listing_during_a_push_serves_the_old_or_the_new_version_never_a_mix(
    empty_bucket, docs_dir, data_dir
):
    versioning_on(empty_bucket)
    settings = s3_settings(data_dir, prompt_docs_dir=docs_dir)
    DocsBucket(settings).push()
    old = local_version(docs_dir)
    clock = FakeClock()
    warm = PromptStore(S3DocSource(settings), ttl_s=60, clock=clock)
    assert asyncio.run(warm.current()).version == old

    (docs_dir / "00_ruolo.md").write_text("Sei un istruttore di volo.\n")
    (docs_dir / "10_stile.md").write_text("Rispondi in rima.\n")
    new = local_version(docs_dir)
    pusher = DocsBucket(settings)
    served: list[str] = []

    def instances_list_between_two_uploads(**kwargs) -> None:
        if served:
            return
        clock.advance(60)  # the warm instance's TTL runs out mid-push
        served.append(asyncio.run(warm.current()).version)
        cold = PromptStore(S3DocSource(settings), ttl_s=60)  # an instance starting now
        served.append(asyncio.run(cold.current()).version)

    pusher.client.meta.events.register(
        "after-call.s3.PutObject", instances_list_between_two_uploads
    )
    assert [r.action for r in pusher.push()].count("uploaded") == 2
    assert served == [old, old]
    clock.advance(60)
    assert asyncio.run(warm.current()).version == new
    assert asyncio.run(PromptStore(S3DocSource(settings), ttl_s=60).current()).version == new


def test_push_delete_writes_the_manifest_before_deleting_and_keeps_the_layout(
    empty_bucket, docs_dir, data_dir
):
    versioning_on(empty_bucket)
    settings = s3_settings(data_dir, prompt_docs_dir=docs_dir)
    DocsBucket(settings).push()
    (docs_dir / "20_quiz.md").unlink()
    new = local_version(docs_dir)
    pusher = DocsBucket(settings)
    served: list[tuple[str, bool]] = []

    def an_instance_starts_before_the_delete(**kwargs) -> None:
        snapshot = asyncio.run(PromptStore(S3DocSource(settings), ttl_s=60).current())
        served.append((snapshot.version, "20_quiz.md" in snapshot.contents))

    pusher.client.meta.events.register(
        "before-call.s3.DeleteObject", an_instance_starts_before_the_delete
    )
    assert [r.action for r in pusher.push(delete=True)].count("deleted") == 1
    assert served == [(new, False)]
    # The docs' layout under the prefix is the local folder's, plus one hidden manifest.
    keys = {k for k in (o["Key"] for o in empty_bucket.list_objects_v2(Bucket=BUCKET)["Contents"])}
    local = {
        PREFIX + p.relative_to(docs_dir).as_posix() for p in docs_dir.rglob("*") if p.is_file()
    }
    assert {k for k in keys if "/_built/" not in k} == local | {PREFIX + ".manifest.json"}


def test_a_hand_upload_to_a_pushed_bucket_is_logged_once_until_pushed_or_the_manifest_goes(
    empty_bucket, cli, docs_dir, data_dir, caplog
):
    versioning_on(empty_bucket)
    cli("push")
    pushed = local_version(docs_dir)
    settings = s3_settings(data_dir)
    clock = FakeClock()
    warm = PromptStore(S3DocSource(settings), ttl_s=60, clock=clock)
    assert asyncio.run(warm.current()).version == pushed

    empty_bucket.put_object(Bucket=BUCKET, Key=PREFIX + "10_stile.md", Body=b"Scritto a mano.")
    with caplog.at_level("WARNING", logger="aircoach.prompts.s3"):
        for _ in range(2):
            clock.advance(60)
            assert asyncio.run(warm.current()).version == pushed
        # An instance starting now serves the pushed docs too (the doc's pushed version).
        cold = asyncio.run(PromptStore(S3DocSource(settings), ttl_s=60).current())
    assert cold.version == pushed and "a mano" not in cold.text
    warnings = [r.getMessage() for r in caplog.records if r.name == "aircoach.prompts.s3"]
    assert len(warnings) == 2  # once per instance, not at every check
    assert "differ from their manifest in 1 doc(s) (10_stile.md)" in warnings[0]
    assert "delete .manifest.json" in warnings[0]
    status = cli("status")
    assert "not the manifest's: 10_stile.md" in status and "differs" in status

    # Without the manifest the bucket is served as listed, as before any push.
    empty_bucket.delete_object(Bucket=BUCKET, Key=PREFIX + ".manifest.json")
    clock.advance(60)
    assert "Scritto a mano." in asyncio.run(warm.current()).text
    assert "in sync" not in cli("status")
    assert "uploaded  10_stile.md" in cli("push")
    clock.advance(60)
    assert asyncio.run(warm.current()).version == pushed and "in sync" in cli("status")


CONFLICT = (
    "another push or rollback changed the published docs while this {} ran; "
    "nothing of this {} is published: run it again"
)


def once(action: Callable[[], object]) -> Callable[..., None]:
    """A botocore event handler that runs `action` at the first event only."""
    ran: list[bool] = []

    def handler(**kwargs) -> None:
        if not ran:
            ran.append(True)
            action()

    return handler


def served_text(settings) -> str:
    """The system prompt an instance starting now builds from the bucket."""
    return asyncio.run(PromptStore(S3DocSource(settings), ttl_s=60).current()).text


@pytest.fixture
def other_dir(docs_dir, tmp_path):
    """A second operator's folder: the same docs plus a new one."""
    folder = tmp_path / "other" / "prompt_docs"
    shutil.copytree(docs_dir, folder)
    (folder / "30_extra.md").write_text("Cita sempre il manuale.\n")
    return folder


@pytest.mark.parametrize("manifest_before", [True, False], ids=["manifest", "no manifest yet"])
def test_two_pushes_at_once_the_later_manifest_fails_and_a_rerun_publishes_both(
    empty_bucket, docs_dir, other_dir, data_dir, manifest_before
):
    versioning_on(empty_bucket)
    settings = s3_settings(data_dir, prompt_docs_dir=docs_dir)
    if manifest_before:
        DocsBucket(settings).push()
    (docs_dir / "10_stile.md").write_text("Rispondi in rima.\n")
    first = DocsBucket(settings)
    second = DocsBucket(settings, other_dir)
    # The second push runs whole while the first uploads its first doc: the first read the
    # manifest (or its absence) before, and writes its own after.
    first.client.meta.events.register("before-call.s3.PutObject", once(second.push))
    with pytest.raises(PublishConflict) as conflict:
        first.push()
    assert str(conflict.value) == CONFLICT.format("push", "push")
    served = served_text(settings)
    assert "Cita sempre il manuale." in served and "in rima" not in served

    first.push()  # run again: the second's new doc is remote only, so it stays published
    served = served_text(settings)
    assert "Cita sempre il manuale." in served and "Rispondi in rima." in served


def test_a_push_that_loses_the_race_exits_with_one_line_and_deletes_nothing(
    empty_bucket, cli, docs_dir, other_dir, data_dir, monkeypatch
):
    versioning_on(empty_bucket)
    cli("push")
    (docs_dir / "20_quiz.md").unlink()
    second = DocsBucket(s3_settings(data_dir), other_dir)
    make_client = s3_module.make_s3_client

    def first_client_runs_the_second_push(settings):
        client = make_client(settings)
        client.meta.events.register("before-call.s3.ListObjectVersions", once(second.push))
        monkeypatch.setattr(s3_module, "make_s3_client", make_client)
        return client

    monkeypatch.setattr(s3_module, "make_s3_client", first_client_runs_the_second_push)
    with pytest.raises(SystemExit) as exit_info:
        cli("push", "--delete")
    assert exit_info.value.code == "error: " + CONFLICT.format("push", "push")
    assert empty_bucket.list_object_versions(Bucket=BUCKET).get("DeleteMarkers") is None
    assert "Cita sempre il manuale." in served_text(s3_settings(data_dir))
    assert "deleted  20_quiz.md" in cli("push", "--delete")


def test_a_rollback_racing_a_push_fails_the_same_way(empty_bucket, docs_dir, data_dir, other_dir):
    versioning_on(empty_bucket)
    settings = s3_settings(data_dir, prompt_docs_dir=docs_dir)
    DocsBucket(settings).push()
    original = (docs_dir / "10_stile.md").read_text()
    (docs_dir / "10_stile.md").write_text("Rispondi in rima.\n")
    DocsBucket(settings).push()
    (other_dir / "10_stile.md").write_text("Rispondi in rima.\n")  # the other has it too
    bucket = DocsBucket(settings)
    earlier_id = bucket.history("10_stile.md")[1].version_id
    bucket.client.meta.events.register(
        "before-call.s3.CopyObject", once(DocsBucket(settings, other_dir).push)
    )
    with pytest.raises(PublishConflict) as conflict:
        bucket.rollback("10_stile.md", earlier_id)
    assert str(conflict.value) == CONFLICT.format("rollback", "rollback")
    served = served_text(settings)
    assert "Cita sempre il manuale." in served and "Rispondi in rima." in served

    bucket.rollback("10_stile.md", earlier_id)  # run again
    served = served_text(settings)
    assert "Cita sempre il manuale." in served and original.strip() in served
    assert "Rispondi in rima." not in served


def test_a_rollback_in_a_bucket_without_manifest_fails_if_a_push_writes_one_meanwhile(
    empty_bucket, docs_dir, data_dir, other_dir
):
    versioning_on(empty_bucket)
    for path in sorted(docs_dir.rglob("*")):  # uploaded by hand: no manifest
        if path.is_file():
            key = PREFIX + path.relative_to(docs_dir).as_posix()
            empty_bucket.put_object(Bucket=BUCKET, Key=key, Body=path.read_bytes())
    empty_bucket.put_object(Bucket=BUCKET, Key=PREFIX + "10_stile.md", Body=b"Rispondi in rima.")
    settings = s3_settings(data_dir, prompt_docs_dir=docs_dir)
    bucket = DocsBucket(settings)
    earlier_id = bucket.history("10_stile.md")[1].version_id
    (other_dir / "10_stile.md").write_text("Rispondi in rima.")
    bucket.client.meta.events.register(
        "before-call.s3.CopyObject", once(DocsBucket(settings, other_dir).push)
    )
    with pytest.raises(PublishConflict):
        bucket.rollback("10_stile.md", earlier_id)
    assert "Rispondi in rima." in served_text(settings)


def test_a_push_replaces_a_manifest_that_is_not_one(empty_bucket, cli, docs_dir, data_dir):
    # The server's error for a broken manifest says "push again": a push must be able to.
    versioning_on(empty_bucket)
    empty_bucket.put_object(Bucket=BUCKET, Key=PREFIX + ".manifest.json", Body=b"{}")
    assert cli("push").count("uploaded") == DOCS
    assert "in sync" in cli("status")
