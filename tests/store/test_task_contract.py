"""The task stores' contract (runs, review queue, contacts), against SQLite and MongoDB
(nx-27017 through the real PyMongo async driver)."""

from __future__ import annotations

import asyncio
import random

import pytest

from aircoach.services import build_task_stores
from aircoach.settings import Settings
from aircoach.tasks.ports import TaskStores
from aircoach.tasks.records import (
    Attempt,
    Contact,
    Customer,
    Issue,
    PipelineVersion,
    ReviewItem,
    TaskRun,
    new_id,
)

VERSION = PipelineVersion(
    task="email_triage",
    task_version="abc",
    schema_hash="def",
    candidates_version="cand-1",
    stoplist_version="stop-1",
    model="offline-rules",
    code_version="test",
)
ATTEMPT = Attempt(
    n=1,
    model="m",
    shrunk=False,
    ok=False,
    stage="parse",
    errors=[Issue(stage="parse", code="invalid_json", message="not valid JSON")],
    latency_ms=1.5,
    raw="{oops",
)


@pytest.fixture
def stores(store_settings: Settings) -> TaskStores:
    return build_task_stores(store_settings)


def make_run(**fields) -> TaskRun:
    values = {
        "run_id": new_id(),
        "task": "email_triage",
        "status": "ok",
        "source": "api",
        "caller": "user-1",
        "created_at": "2025-03-01T10:00:00+00:00",
        "input": {"subject": "Ciao", "from": "a@b.it", "body": "Testo è qui"},
        "output": {"topics": [{"label": "METEO"}], "n": 1.5, "nested": [[1, 2]]},
        "customer": Customer(status="existing", match="exact", contact={"name": "Anna"}),
        "warnings": [Issue(stage="quality", code="low_confidence", message="x")],
        "attempts": [ATTEMPT],
        "model": "offline-rules",
        "pipeline_version": VERSION,
        **fields,
    }
    return TaskRun(**values)


def make_item(review_id: str, task: str = "email_triage") -> ReviewItem:
    return ReviewItem(
        review_id=review_id,
        task=task,
        created_at="2025-03-01T10:00:00+00:00",
        source="api",
        caller="user-1",
        input={"subject": "x", "from": "a@b.it", "body": "y"},
        attempts=[ATTEMPT],
        pipeline_version=VERSION,
        run_id="r-" + review_id,
    )


async def test_runs_round_trip_exactly(stores: TaskStores):
    run = make_run()
    dead = make_run(status="dead_letter", output=None, customer=None, review_id="rev-1")
    await stores.runs.insert_run(run)
    await stores.runs.insert_run(dead)
    assert await stores.runs.get_run(run.run_id) == run
    assert await stores.runs.get_run(dead.run_id) == dead
    assert await stores.runs.get_run("nope") is None


async def test_the_queue_lists_open_items_oldest_first_by_task_and_pages(stores: TaskStores):
    ids = [f"{n:04d}" for n in range(7)]
    shuffled = ids[:]
    random.Random(3).shuffle(shuffled)
    for review_id in shuffled:
        await stores.reviews.enqueue(
            make_item(review_id, "other" if review_id == "0003" else "email_triage")
        )

    page = await stores.reviews.list_items(status="open", task=None, limit=3, after=None)
    assert [i.review_id for i in page] == ["0000", "0001", "0002"]
    page = await stores.reviews.list_items(status="open", task=None, limit=3, after="0002")
    assert [i.review_id for i in page] == ["0003", "0004", "0005"]
    triage = await stores.reviews.list_items(
        status="open", task="email_triage", limit=10, after=None
    )
    assert "0003" not in [i.review_id for i in triage] and len(triage) == 6
    assert await stores.reviews.list_items(status="resolved", task=None, limit=10, after=None) == []
    item = await stores.reviews.get_item("0004")
    assert item == make_item("0004") and item.status == "open"
    assert await stores.reviews.get_item("9999") is None


async def test_resolve_is_once_only_and_reopen_undoes_it(stores: TaskStores):
    await stores.reviews.enqueue(make_item("0001"))
    attempts = [
        stores.reviews.resolve(
            "0001", run_id=f"run-{n}", by=f"rev-{n}", at="2025-03-02T00:00:00+00:00"
        )
        for n in range(4)
    ]
    results = await asyncio.gather(*attempts)
    assert sorted(results) == [False, False, False, True]
    winner = results.index(True)
    item = await stores.reviews.get_item("0001")
    assert item is not None and item.status == "resolved"
    assert (item.resolved_by, item.resolution_run_id) == (f"rev-{winner}", f"run-{winner}")
    assert [
        i.review_id
        for i in await stores.reviews.list_items(status="resolved", task=None, limit=5, after=None)
    ] == ["0001"]
    assert await stores.reviews.list_items(status="open", task=None, limit=5, after=None) == []
    assert not await stores.reviews.resolve("missing", run_id="r", by="b", at="t")

    await stores.reviews.reopen("0001")
    item = await stores.reviews.get_item("0001")
    assert item == make_item("0001")


async def test_a_dismissal_is_once_only_and_leaves_the_queue(stores: TaskStores):
    await stores.reviews.enqueue(make_item("0001"))
    await stores.reviews.enqueue(make_item("0002"))
    dismissals = [
        stores.reviews.dismiss(
            "0001", by=f"rev-{n}", at="2025-03-02T00:00:00+00:00", note="vecchio"
        )
        for n in range(4)
    ]
    assert sorted(await asyncio.gather(*dismissals)) == [False, False, False, True]
    item = await stores.reviews.get_item("0001")
    assert item is not None and item.status == "dismissed" and item.dismissal_note == "vecchio"
    assert item.resolved_at == "2025-03-02T00:00:00+00:00" and item.resolution_run_id is None
    assert not await stores.reviews.resolve("0001", run_id="r", by="b", at="t")
    dismissed = await stores.reviews.list_items(status="dismissed", task=None, limit=5, after=None)
    assert dismissed == [item]
    opened = await stores.reviews.list_items(status="open", task=None, limit=5, after=None)
    assert [i.review_id for i in opened] == ["0002"]
    (stats,) = await stores.reviews.queue_stats(None)
    assert stats.open == 1
    await stores.reviews.resolve("0002", run_id="r", by="b", at="t")
    assert not await stores.reviews.dismiss("0002", by="b", at="t", note="x")
    assert not await stores.reviews.dismiss("missing", by="b", at="t", note="x")


async def test_stored_names_the_runs_that_are_stored(stores: TaskStores):
    runs = [make_run() for _ in range(3)]
    for run in runs[:2]:
        await stores.runs.insert_run(run)
    ids = [r.run_id for r in runs]
    assert await stores.runs.stored(ids) == set(ids[:2])
    assert await stores.runs.stored([ids[2]]) == set()
    assert await stores.runs.stored([]) == set()


async def test_contacts_upsert_by_key_and_find(stores: TaskStores):
    anna = Contact(email="Anna.Verdi@Example.it", name="Anna Verdi", kind="allievo")
    club = Contact(domain="aeroclub.it", name="Aero Club", kind="partner")
    assert await stores.contacts.upsert_contacts([anna, club]) == 2
    assert await stores.contacts.find_contact("email:anna.verdi@example.it") == anna
    assert await stores.contacts.find_contact("domain:aeroclub.it") == club
    assert await stores.contacts.find_contact("email:nobody@example.it") is None
    renamed = anna.model_copy(update={"name": "Anna Verdi Rossi"})
    assert await stores.contacts.upsert_contacts([renamed]) == 1
    assert (await stores.contacts.find_contact(anna.key)).name == "Anna Verdi Rossi"
    assert await stores.contacts.upsert_contacts([]) == 0
    with pytest.raises(ValueError, match="an email or a domain"):
        Contact(name="Nessuno")


async def test_a_run_key_is_claimed_once_among_concurrent_claims(stores):
    claims = await asyncio.gather(
        *(stores.runs.claim("sqs:m-1", "h1", now=1000.0, lease_s=300) for _ in range(8))
    )
    assert sorted(c.state for c in claims) == ["busy"] * 7 + ["new"]
    assert (await stores.runs.claim("sqs:m-1", "h2", now=1001.0, lease_s=300)).state == "mismatch"
    await stores.runs.complete("sqs:m-1", "run-1")
    done = await stores.runs.claim("sqs:m-1", "h1", now=1002.0, lease_s=300)
    assert (done.state, done.run_id) == ("done", "run-1")
    await stores.runs.release("sqs:m-1")  # a completed key is never released
    assert (await stores.runs.claim("sqs:m-1", "h1", now=9999.0, lease_s=300)).state == "done"


async def test_an_unfinished_claim_is_released_or_taken_over_after_its_lease(stores):
    assert (await stores.runs.claim("http:k", "h", now=1000.0, lease_s=300)).state == "new"
    assert (await stores.runs.claim("http:k", "h", now=1200.0, lease_s=300)).state == "busy"
    assert (await stores.runs.claim("http:k", "h", now=1301.0, lease_s=300)).state == "new"
    await stores.runs.release("http:k")
    assert (await stores.runs.claim("http:k", "h", now=1302.0, lease_s=300)).state == "new"
