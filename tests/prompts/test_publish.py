"""`python -m aircoach docs push | status | history | rollback` against a moto bucket."""

from __future__ import annotations

import asyncio
import shutil

import pytest

from aircoach.__main__ import main
from aircoach.prompts.s3 import S3DocSource
from aircoach.prompts.store import PromptStore, build_prompt
from aircoach.settings import ROOT
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
