"""The engine's fallback policy with scripted models: retry with feedback, shrink, fallback
model, review queue; what is stored with each run; customer status from the contacts."""

from __future__ import annotations

import json
import logging
from typing import Any

import pytest

from aircoach.errors import StoreUnavailable
from aircoach.services import build_task_stores
from aircoach.tasks.contacts import seed_demo_contacts
from aircoach.tasks.engine import AlreadyResolved, InvalidOutput, TaskEngine, TaskFailed
from aircoach.tasks.models import StructuredRequest
from aircoach.tasks.ports import TaskStores
from tests.tasks.conftest import email
from tests.tasks.scripted import ScriptedTaskModels

MAIL = email(
    "Buongiorno, vorrei prenotare una lezione di volo per sabato. "
    "Non ho ancora ricevuto la fattura di marzo.\n\nGrazie\nSara",
    "Prenotazione e fattura",
    sender="Sara Conti <Sara.Conti@Outlook.it>",
)


def good(request: StructuredRequest) -> str:
    """A valid answer for this very request (its candidates, its text)."""
    return json.dumps(request.definition.kind.offline(request.definition, request.prepared))


def invented(request: StructuredRequest) -> str:
    data = json.loads(good(request))
    data["topics"][0]["keywords"].append({"candidate_id": "cdeadbeef000", "term": "bonifico"})
    return json.dumps(data)


@pytest.fixture
def stores(settings) -> TaskStores:
    return build_task_stores(settings)


def engine_with(stores: TaskStores, models: ScriptedTaskModels) -> TaskEngine:
    return TaskEngine(stores, models, code_version="test-code")


async def test_a_valid_first_answer_is_stored_with_its_pipeline_version(stores, triage, caplog):
    models = ScriptedTaskModels([good])
    caplog.set_level(logging.INFO, logger="aircoach.tasks.engine")
    run = await engine_with(stores, models).run(triage, MAIL, caller="user-1", source="api")
    models.assert_used()
    assert run.status == "ok" and run.model == "scripted-primary" and len(run.attempts) == 1
    assert run.attempts[0].ok and run.attempts[0].raw is None
    assert {t["label"] for t in run.output["topics"]} >= {"PRENOTAZIONE_VOLO", "PAGAMENTO"}
    version = run.pipeline_version
    assert (version.task, version.task_version, version.schema_hash) == (
        "email_triage",
        triage.version,
        triage.schema_hash,
    )
    assert version.candidates_version == "cand-3" and version.stoplist_version.startswith("stop-")
    assert (version.model, version.code_version) == ("scripted-primary", "test-code")
    assert run.input == {
        "subject": MAIL.subject,
        "from": MAIL.sender,
        "body": MAIL.body,
        "attachments": [],
    }
    assert (version.provider, version.mode, version.temperature) == ("unknown", "model", 0.1)
    assert await stores.runs.get_run(run.run_id) == run
    assert models.temperatures == [0.1]  # the task's temperature, not the chat's
    assert models.primary.closed == 1
    (line,) = [r.getMessage() for r in caplog.records if r.getMessage().startswith("task_run ")]
    assert f"run_id={run.run_id}" in line and "status=ok" in line and "attempts=1" in line
    assert f"task_version={triage.version}" in line and "code_version=test-code" in line


async def test_customer_status_is_a_contacts_lookup(stores, triage):
    await seed_demo_contacts(stores.contacts)
    engine = engine_with(stores, ScriptedTaskModels([good, good, good]))
    exact = await engine.run(triage, MAIL, caller="u", source="api")
    assert exact.customer.model_dump() == {
        "status": "existing",
        "match": "exact",
        "contact": {
            "email": "sara.conti@outlook.it",
            "name": "Sara Conti",
            "kind": "allievo",
            "since": "2024-09-15",
        },
    }
    staff = MAIL.model_copy(update={"sender": "nuovo.istruttore@scuolavolo.it"})
    domain = await engine.run(triage, staff, caller="u", source="api")
    assert (domain.customer.status, domain.customer.match) == ("existing", "domain")
    assert domain.customer.contact["name"] == "Scuola di volo (personale)"
    stranger = MAIL.model_copy(update={"sender": "chi.sei@gmail.com"})
    none = await engine.run(triage, stranger, caller="u", source="api")
    assert none.customer.model_dump() == {"status": "new", "match": "none", "contact": None}


async def test_invalid_json_is_retried_with_the_errors_as_feedback(stores, triage):
    models = ScriptedTaskModels(["{not json", good])
    run = await engine_with(stores, models).run(triage, MAIL, caller="u", source="api")
    first, second = run.attempts
    assert (first.ok, first.stage, first.errors[0].code, first.raw) == (
        False,
        "parse",
        "invalid_json",
        "{not json",
    )
    assert second.ok and not second.shrunk
    retry = models.primary.requests[1]
    assert retry.feedback is not None and "'parse'" in retry.feedback
    assert models.primary.requests[0].feedback is None


async def test_an_invented_candidate_is_retried(stores, triage):
    models = ScriptedTaskModels([invented, good])
    run = await engine_with(stores, models).run(triage, MAIL, caller="u", source="api")
    assert [a.stage for a in run.attempts] == ["business", None]
    assert "cdeadbeef000" in models.primary.requests[1].feedback


async def test_repeated_failure_shrinks_then_falls_back(stores, triage):
    models = ScriptedTaskModels(["[]", invented, "nope", "{}"], fallback=[good])
    run = await engine_with(stores, models).run(triage, MAIL, caller="u", source="api")
    models.assert_used()
    assert [(a.model, a.shrunk, a.stage) for a in run.attempts] == [
        ("scripted-primary", False, "schema"),
        ("scripted-primary", False, "business"),
        ("scripted-primary", False, "parse"),
        ("scripted-primary", True, "schema"),
        ("scripted-fallback", True, None),
    ]
    shrunk = models.primary.requests[3].prepared
    assert shrunk.shrunk and len(shrunk.payload["candidate_keywords"]) <= 50
    assert run.model == run.pipeline_version.model == "scripted-fallback"
    assert models.fallback.closed == 1 and models.primary.closed == 1


async def test_the_whole_chain_failing_queues_the_input_for_review(stores, triage, caplog):
    caplog.set_level(logging.INFO, logger="aircoach.tasks.engine")
    models = ScriptedTaskModels(["x1", "x2", "x3", "x4"], fallback=[TimeoutError("timed out")])
    with pytest.raises(TaskFailed) as caught:
        await engine_with(stores, models).run(triage, MAIL, caller="u", source="api")
    run = caught.value.run
    assert run.status == "dead_letter" and run.output is None and run.review_id
    assert await stores.runs.get_run(run.run_id) == run
    item = await stores.reviews.get_item(run.review_id)
    assert item is not None and item.status == "open" and item.run_id == run.run_id
    assert item.input == run.input and item.pipeline_version == run.pipeline_version
    assert item.pipeline_version.model == "scripted-primary+scripted-fallback"
    assert [a.raw for a in item.attempts] == ["x1", "x2", "x3", "x4", None]
    assert item.attempts[4].stage == "model"
    assert item.attempts[4].errors[0].message == "TimeoutError: timed out"
    (line,) = [r.getMessage() for r in caplog.records if r.getMessage().startswith("task_run ")]
    assert "status=dead_letter" in line and f"review_id={run.review_id}" in line
    assert "shrunk=true" in line and "attempts=5" in line
    # Named as the runs API and the metric name them: it said `source=api` beside the API's
    # `"source": "http"`, and `dead_letter` only, where the metric counts `review`.
    assert " source=http status=dead_letter outcome=review " in line


async def test_without_a_fallback_model_the_chain_is_shorter(stores, triage):
    models = ScriptedTaskModels(["a", "b", "c", "d"])
    with pytest.raises(TaskFailed) as caught:
        await engine_with(stores, models).run(triage, MAIL, caller="u", source="api")
    assert len(caught.value.run.attempts) == 4
    models.assert_used()


class FailingRuns:
    async def insert_run(self, run: Any) -> None:
        raise StoreUnavailable()

    async def get_run(self, run_id: str) -> None:
        return None


async def test_a_store_failure_is_raised_and_logged(stores, triage, caplog):
    caplog.set_level(logging.INFO, logger="aircoach.tasks.engine")
    broken = TaskStores(FailingRuns(), stores.reviews, stores.contacts)
    with pytest.raises(StoreUnavailable):
        await engine_with(broken, ScriptedTaskModels([good])).run(
            triage, MAIL, caller="u", source="api"
        )
    assert any("status=store_failed" in r.getMessage() for r in caplog.records)
    # A dead letter still reaches the review queue when its run cannot be stored.
    with pytest.raises(StoreUnavailable):
        await engine_with(broken, ScriptedTaskModels(["a"] * 4)).run(
            triage, MAIL, caller="u", source="api"
        )
    queued = await stores.reviews.list_items(status="open", task=None, limit=5, after=None)
    assert len(queued) == 1


async def test_a_reviewer_resolves_once_with_a_validated_output(stores, triage):
    with pytest.raises(TaskFailed) as caught:
        await engine_with(stores, ScriptedTaskModels(["a"] * 4)).run(
            triage, MAIL, caller="u", source="api"
        )
    item = await stores.reviews.get_item(caught.value.run.review_id)
    engine = engine_with(stores, ScriptedTaskModels([]))
    prepared = triage.kind.prepare(triage, MAIL, shrink=False)
    output = triage.kind.offline(triage, prepared)

    bad = json.loads(json.dumps(output))
    bad["topics"][0]["evidence"] = [{"quote": "una frase che non c'è"}]
    with pytest.raises(InvalidOutput) as invalid:
        await engine.resolve_review(triage, item, bad, reviewer="rev-1")
    assert invalid.value.failure.stage == "evidence"
    assert (await stores.reviews.get_item(item.review_id)).status == "open"

    run = await engine.resolve_review(triage, item, output, reviewer="rev-1")
    assert run.source == "review" and run.caller == "rev-1" and run.review_id == item.review_id
    assert run.model == run.pipeline_version.model == "review:rev-1"
    assert await stores.runs.get_run(run.run_id) == run
    resolved = await stores.reviews.get_item(item.review_id)
    assert (resolved.status, resolved.resolved_by, resolved.resolution_run_id) == (
        "resolved",
        "rev-1",
        run.run_id,
    )
    with pytest.raises(AlreadyResolved):
        await engine.resolve_review(triage, item, output, reviewer="rev-2")


async def test_a_failed_call_goes_straight_to_the_next_model(stores, triage):
    models = ScriptedTaskModels([ConnectionError("refused")], fallback=[good])
    run = await engine_with(stores, models).run(triage, MAIL, caller="u", source="api")
    models.assert_used()
    assert [(a.model, a.shrunk, a.stage) for a in run.attempts] == [
        ("scripted-primary", False, "model"),
        ("scripted-fallback", True, None),
    ]
    assert models.fallback.requests[0].feedback is None  # nothing to say after a call failure
    without_fallback = ScriptedTaskModels([ConnectionError("refused")])
    with pytest.raises(TaskFailed) as caught:
        await engine_with(stores, without_fallback).run(triage, MAIL, caller="u", source="api")
    assert len(caught.value.run.attempts) == 1
