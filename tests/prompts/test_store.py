"""PromptStore against a fake in-memory source: TTL, single flight, only changed docs,
last good prompt on failure, cancellation, health."""

from __future__ import annotations

import asyncio
import hashlib

import pytest

from aircoach.errors import PromptUnavailable
from aircoach.prompts.sources import DocInfo
from aircoach.prompts.store import PromptStore, build_prompt


class MemorySource:
    name = "memory"

    def __init__(self, docs: dict[str, str]):
        self.docs = dict(docs)
        self.listings = 0
        self.reads: list[str] = []
        self.fail: Exception | None = None
        self.gate: asyncio.Event | None = None
        self.listing_started = asyncio.Event()
        self.archived: list[str] = []

    async def list_docs(self) -> list[DocInfo]:
        self.listings += 1
        listed = [
            DocInfo(key=k, etag=hashlib.md5(v.encode()).hexdigest(), size=len(v))
            for k, v in sorted(self.docs.items())
        ]  # what the bucket held when the listing started, however long it then takes
        self.listing_started.set()
        if self.gate is not None:
            await self.gate.wait()
        if self.fail is not None:
            raise self.fail
        return listed

    async def read_doc(self, info: DocInfo) -> tuple[str, DocInfo]:
        self.reads.append(info.key)
        return self.docs[info.key], DocInfo(
            info.key, info.etag, info.size, version_id=f"v-{info.etag[:6]}"
        )


class ArchivingSource(MemorySource):
    async def archive_built(self, version: str, text: str) -> bool:
        if self.fail_archive:
            raise OSError("archive bucket is read-only")
        self.archived.append(version)
        return True

    fail_archive = False


DOCS = {"00_a.md": "Sei un istruttore.", "10_b.md": "Rispondi in italiano.", "t.json": "{}"}


async def test_first_load_builds_in_key_order_and_versions_by_content(clock):
    source = MemorySource(DOCS)
    store = PromptStore(source, ttl_s=60, clock=clock)
    snap = await store.current()
    assert snap.text == "Sei un istruttore.\n\nRispondi in italiano."
    assert snap.version == build_prompt(DOCS)[1]
    assert sorted(source.reads) == sorted(DOCS)
    assert all(d.version_id for d in snap.docs)  # read_doc reports what it read
    # another store on the same docs agrees on the version (no per-process counter)
    assert (await PromptStore(MemorySource(DOCS), ttl_s=60).current()).version == snap.version


async def test_within_ttl_no_listing_after_ttl_one_listing_and_only_changed_docs(clock):
    source = MemorySource(DOCS)
    store = PromptStore(source, ttl_s=60, clock=clock)
    first = await store.current()
    clock.advance(59)
    assert await store.current() is first and source.listings == 1
    clock.advance(1)
    source.reads.clear()
    assert (await store.current()).version == first.version
    assert source.listings == 2 and source.reads == []
    source.docs["10_b.md"] = "Rispondi in inglese."
    clock.advance(60)
    changed = await store.current()
    assert source.reads == ["10_b.md"] and changed.version != first.version
    assert "inglese" in changed.text
    by_key = {d.key: d for d in changed.docs}
    assert by_key["00_a.md"] == {d.key: d for d in first.docs}["00_a.md"]


async def test_source_failure_keeps_last_good_prompt_and_health_reports_age(clock):
    source = MemorySource(DOCS)
    store = PromptStore(source, ttl_s=60, clock=clock)
    good = await store.current()
    assert store.health()["status"] == "ok"
    source.fail = ConnectionError("s3 down")
    clock.advance(61)
    assert await store.current() is good
    clock.advance(30)  # within the TTL after the failed check: no retry storm
    assert await store.current() is good and source.listings == 2
    health = store.health()
    assert health["status"] == "degraded" and health["age_s"] == 91.0
    assert health["error"] == "ConnectionError" and health["version"] == good.version
    with pytest.raises(PromptUnavailable):
        await store.reload()  # a forced reload reports the failure
    source.fail = None
    clock.advance(60)
    assert (await store.current()).version == good.version
    assert store.health()["status"] == "ok" and store.health()["age_s"] == 0.0


async def test_cold_start_during_outage_raises_prompt_unavailable(clock):
    source = MemorySource(DOCS)
    source.fail = TimeoutError("no route")
    store = PromptStore(source, ttl_s=60, clock=clock)
    assert store.health()["status"] == "not_loaded"
    with pytest.raises(PromptUnavailable):
        await store.current()
    assert store.health()["status"] == "unavailable"


async def test_concurrent_cold_start_lists_once(clock):
    source = MemorySource(DOCS)
    source.gate = asyncio.Event()
    store = PromptStore(source, ttl_s=60, clock=clock)
    tasks = [asyncio.create_task(store.current()) for _ in range(50)]
    await source.listing_started.wait()
    source.gate.set()
    snaps = await asyncio.gather(*tasks)
    assert source.listings == 1 and len({id(s) for s in snaps}) == 1


async def test_refresh_cancelled_midway_does_not_wedge_the_store(clock):
    source = MemorySource(DOCS)
    store = PromptStore(source, ttl_s=60, clock=clock)
    await store.current()
    source.docs["00_a.md"] = "Nuovo ruolo."
    clock.advance(61)
    source.gate = asyncio.Event()
    source.listing_started.clear()
    refresher = asyncio.create_task(store.current())
    await source.listing_started.wait()
    refresher.cancel()
    with pytest.raises(asyncio.CancelledError):
        await refresher
    source.gate.set()
    # The next request refreshes again instead of waiting on the abandoned refresh forever.
    assert "Nuovo ruolo." in (await store.current()).text


async def test_forced_reload_waits_for_a_running_refresh_then_lists_again(clock):
    source = MemorySource(DOCS)
    store = PromptStore(source, ttl_s=60, clock=clock)
    await store.current()
    clock.advance(61)
    source.gate = asyncio.Event()
    source.listing_started.clear()
    refresher = asyncio.create_task(store.current())
    await source.listing_started.wait()
    reload = asyncio.create_task(store.reload())
    await asyncio.sleep(0)  # let the reload start (and find the refresh running)
    source.docs["00_a.md"] = "Cambiato durante il refresh."
    source.gate.set()
    await refresher
    snapshot, _ = await reload
    assert source.listings == 3 and "Cambiato" in snapshot.text


async def test_new_versions_are_archived_and_archive_failure_never_fails_the_load(clock, caplog):
    source = ArchivingSource(DOCS)
    store = PromptStore(source, ttl_s=60, clock=clock)
    first = await store.current()
    await store.reload()  # same version: not archived again
    assert source.archived == [first.version]
    source.docs["00_a.md"] = "Altro ruolo."
    source.fail_archive = True
    snapshot, previous = await store.reload()
    assert previous == first.version and snapshot.version != first.version
    assert store.snapshot is snapshot and store.health()["status"] == "ok"
    assert "could not archive built prompt" in caplog.text
