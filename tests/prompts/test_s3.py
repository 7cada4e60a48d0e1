"""S3DocSource on moto: in process (`mock_aws`) and over real HTTP (`ThreadedMotoServer`)."""

from __future__ import annotations

import hashlib
import logging
import shutil

import anyio
import pytest

from aircoach.prompts.publish import DocsBucket
from aircoach.prompts.s3 import S3DocSource
from aircoach.prompts.store import PromptStore, build_prompt
from aircoach.settings import ROOT
from tests.clock import FakeClock
from tests.helpers import shipped_docs
from tests.s3 import PREFIX, CallCounter, s3_settings

LOCAL = shipped_docs()


@pytest.fixture
def source(s3, data_dir) -> S3DocSource:
    return S3DocSource(s3_settings(data_dir))


async def test_listing_is_one_call_relative_to_prefix_without_the_audit_folder(s3, source):
    s3.client.put_object(Bucket=s3.name, Key=PREFIX + "_built/abc.md", Body=b"old build")
    s3.client.put_object(Bucket=s3.name, Key=PREFIX + "folder/", Body=b"")
    s3.client.put_object(Bucket=s3.name, Key="elsewhere/x.md", Body=b"not a doc")
    s3.client.put_object(Bucket=s3.name, Key=PREFIX + "tasks/.DS_Store", Body=b"hidden")
    calls = CallCounter().attach(source.client)
    docs = await source.list_docs()
    assert calls.calls == ["ListObjectsV2"]
    assert [d.key for d in docs] == sorted(LOCAL)
    for d in docs:
        assert d.etag == hashlib.md5(LOCAL[d.key].encode()).hexdigest()
        assert d.size == len(LOCAL[d.key].encode()) and d.last_modified
        assert d.version_id is None  # the listing has none; read_doc adds it


async def test_read_doc_returns_text_and_the_object_version_id(s3, source):
    version_id = s3.put("10_stile.md", "Stile nuovo.")
    [info] = [d for d in await source.list_docs() if d.key == "10_stile.md"]
    text, read = await source.read_doc(info)
    assert text == "Stile nuovo." and read.version_id == version_id
    assert read.etag == info.etag and read.key == info.key


async def test_store_fetches_only_changed_docs_and_archives_each_new_version_once(s3, data_dir):
    clock = FakeClock()
    source = S3DocSource(s3_settings(data_dir))
    calls = CallCounter().attach(source.client)
    store = PromptStore(source, ttl_s=60, clock=clock)
    first = await store.current()
    assert first.version == build_prompt(LOCAL)[1]
    assert calls.count("ListObjectsV2") == 1 and calls.count("GetObject") == len(LOCAL)
    assert s3.get(f"_built/{first.version}.md") == first.text

    new_id = s3.put("10_stile.md", "Rispondi in modo conciso.")
    clock.advance(60)
    calls.calls.clear()
    second = await store.current()
    assert calls.count("ListObjectsV2") == 1 and calls.count("GetObject") == 1
    assert second.version != first.version and "conciso" in second.text
    by_key = {d.key: d for d in second.docs}
    assert by_key["10_stile.md"].version_id == new_id
    assert by_key["00_ruolo.md"] == {d.key: d for d in first.docs}["00_ruolo.md"]
    assert s3.get(f"_built/{second.version}.md") == second.text

    # Another instance on the same bucket finds the audit copy there and does not rewrite it.
    other = PromptStore(S3DocSource(s3_settings(data_dir)), ttl_s=60)
    assert (await other.current()).version == second.version
    assert s3.version_count(f"_built/{second.version}.md") == 1
    # The audit folder never feeds the prompt.
    assert "_built" not in {d.key.split("/")[0] for d in second.docs}


async def test_audit_write_failure_is_logged_and_the_reload_succeeds(s3, data_dir, caplog):
    source = S3DocSource(s3_settings(data_dir))

    def refuse_put(params, **kwargs):
        if params["Key"].startswith(PREFIX + "_built/"):
            raise PermissionError("no s3:PutObject on the audit folder")

    source.client.meta.events.register("before-parameter-build.s3.PutObject", refuse_put)
    store = PromptStore(source, ttl_s=60)
    with caplog.at_level(logging.WARNING):
        snapshot, previous = await store.reload()
    assert previous is None and snapshot.version == build_prompt(LOCAL)[1]
    assert "could not archive built prompt" in caplog.text
    assert not [k for k in s3.all_keys() if "_built" in k]


async def test_missing_bucket_is_a_prompt_unavailable_with_the_error_code(aws_env, data_dir):
    from moto import mock_aws

    from aircoach.errors import PromptUnavailable

    with mock_aws():
        store = PromptStore(S3DocSource(s3_settings(data_dir)), ttl_s=60)
        with pytest.raises(PromptUnavailable):
            await store.current()
        assert store.health()["error"] == "NoSuchBucket"


async def test_a_pushed_bucket_costs_one_listing_per_check_and_a_manifest_read_per_push(
    s3, data_dir, tmp_path
):
    folder = tmp_path / "prompt_docs"
    shutil.copytree(ROOT / "prompt_docs", folder)
    settings = s3_settings(data_dir, prompt_docs_dir=folder)
    clock = FakeClock()
    source = S3DocSource(settings)
    calls = CallCounter().attach(source.client)
    store = PromptStore(source, ttl_s=60, clock=clock)
    by_hand = await store.current()  # no manifest: the listing, as before any push

    (folder / "10_stile.md").write_text("Rispondi in modo conciso.\n")
    await anyio.to_thread.run_sync(DocsBucket(settings).push)
    clock.advance(60)
    calls.calls.clear()
    pushed = await store.current()
    assert pushed.version != by_hand.version and "conciso" in pushed.text
    # One listing, the new manifest, the changed doc; then the new version's audit copy.
    assert calls.calls == ["ListObjectsV2", "GetObject", "GetObject", "HeadObject", "PutObject"]
    for _ in range(2):
        clock.advance(60)
        calls.calls.clear()
        assert await store.current() is not None
        assert calls.calls == ["ListObjectsV2"]


async def test_a_broken_manifest_keeps_the_last_good_prompt_and_a_reload_names_it(s3, data_dir):
    from aircoach.errors import InvalidDocs

    store = PromptStore(S3DocSource(s3_settings(data_dir)), ttl_s=60)
    good = await store.current()
    s3.put(".manifest.json", '{"format": 1, "docs": {"00_ruolo.md": {"etag": "x"}}}')
    with pytest.raises(InvalidDocs) as error:
        await store.reload()
    assert ".manifest.json is not a docs manifest (KeyError" in error.value.params["detail"]
    assert store.snapshot is good


@pytest.mark.integration
async def test_endpoint_url_path_over_real_http(s3_server, data_dir):
    settings = s3_settings(data_dir, aws_endpoint_url=s3_server.endpoint_url)
    source = S3DocSource(settings)
    assert source.client.meta.endpoint_url == s3_server.endpoint_url
    new_id = s3_server.put("00_ruolo.md", "Sei il coach di volo.")
    store = PromptStore(source, ttl_s=60)
    snapshot = await store.current()
    assert snapshot.text.startswith("Sei il coach di volo.")
    assert {d.key: d.version_id for d in snapshot.docs}["00_ruolo.md"] == new_id
    assert s3_server.get(f"_built/{snapshot.version}.md") == snapshot.text
