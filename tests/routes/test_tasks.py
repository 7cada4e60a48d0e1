"""`/api/tasks` through the app: permissions, 404/413/422, the result and the 503 with its
review id, batches with bounded concurrency, the review queue and runs."""

from __future__ import annotations

import asyncio
import json

import pytest

from aircoach.errors import StoreUnavailable
from aircoach.models import ValidationErrorBody
from aircoach.tasks.contacts import seed_demo_contacts
from aircoach.tasks.models import StructuredRequest
from aircoach.tasks.ports import TaskStores
from tests.helpers import app_with, asgi_client, copy_prompt_docs
from tests.tasks.failing_stores import DownRuns, UnmarkedKeys, UnstoredRuns
from tests.tasks.scripted import ScriptedTaskModels

RUN = ["tasks:email_triage"]
REVIEW = ["tasks:review"]
MAIL = {
    "subject": "Re: lezione di domani",
    "from": "Sara Conti <sara.conti@outlook.it>",
    "body": "Buongiorno, domani mattina c'è nebbia: la lezione di volo è confermata?\n\n> vecchio",
}


def good(request: StructuredRequest) -> str:
    return json.dumps(request.definition.kind.offline(request.definition, request.prepared))


@pytest.fixture
def task_app(settings):
    def make(models=None, **overrides):
        return app_with(settings.model_copy(update=overrides), task_models=models)

    return make


async def test_the_offline_model_runs_the_triage_and_says_so(task_app, auth):
    app = task_app()
    await seed_demo_contacts(app.state.services.task_stores.contacts)
    async with asgi_client(app) as client:
        response = await client.post(
            "/api/tasks/email_triage", json=MAIL, headers=auth(permissions=RUN)
        )
    assert response.status_code == 200, response.text
    body = response.json()
    assert set(body) == {
        "output",
        "customer",
        "warnings",
        "attempts",
        "model",
        "pipeline_version",
        "run_id",
        "low_confidence",
        "review_id",
        "confidence",
        "input_truncated",
        "input_kept_chars",
        "input_total_chars",
    }
    assert body["low_confidence"] is False and body["review_id"] is None
    assert body["input_truncated"] is False and body["confidence"] >= 0.5
    assert body["model"] == "offline-rules" and body["warnings"][0]["code"] == "offline_model"
    assert body["customer"]["match"] == "exact" and body["customer"]["status"] == "existing"
    labels = [t["label"] for t in body["output"]["topics"]]
    assert "PRENOTAZIONE_VOLO" in labels and "METEO" in labels
    assert body["attempts"] == [
        {
            "n": 1,
            "model": "offline-rules",
            "shrunk": False,
            "ok": True,
            "stage": None,
            "errors": [],
            "latency_ms": body["attempts"][0]["latency_ms"],
            "raw": None,
        }
    ]
    assert set(body["pipeline_version"]) == {
        "task",
        "task_version",
        "schema_hash",
        "candidates_version",
        "stoplist_version",
        "model",
        "code_version",
        "prompt_hash",
        "dictionary_version",
        "provider",
        "mode",
        "temperature",
    }
    version = body["pipeline_version"]
    assert (version["provider"], version["mode"], version["temperature"]) == (
        "offline",
        "offline",
        0.1,
    )
    assert version["dictionary_version"].startswith("kw-4+") and len(version["prompt_hash"]) == 12
    run = await app.state.services.task_stores.runs.get_run(body["run_id"])
    assert run is not None and run.caller == "user-1" and run.output == body["output"]


async def test_tokens_need_the_tasks_permission(task_app, auth):
    async with asgi_client(task_app()) as client:
        assert (await client.post("/api/tasks/email_triage", json=MAIL)).status_code == 401
        denied = await client.post("/api/tasks/email_triage", json=MAIL, headers=auth())
        assert denied.status_code == 403 and "'tasks:email_triage'" in denied.json()["message"]
        review = await client.get("/api/tasks/review", headers=auth(permissions=RUN))
        assert review.status_code == 403 and "'tasks:review'" in review.json()["message"]
        listed = (await client.get("/api/tasks", headers=auth())).json()
        assert [(t["name"], t["allowed"]) for t in listed] == [("email_triage", False)]


async def test_unknown_task_bad_input_and_bodies_too_large(task_app, auth):
    headers = auth(permissions=RUN)
    models = CountingModels()
    async with asgi_client(task_app(models, task_max_body_bytes=10_000)) as client:
        missing = await client.post("/api/tasks/nope", json=MAIL, headers=headers)
        assert missing.status_code == 404 and missing.json()["error"] == "not_found"
        # the names as a list, not a Python list's repr ("['email_triage']")
        assert missing.json()["message"] == "Task 'nope' sconosciuto; disponibili: email_triage."

        huge_subject = {**MAIL, "subject": "x" * 5000}
        bad = await client.post("/api/tasks/email_triage", json=huge_subject, headers=headers)
        assert bad.status_code == 422
        assert bad.json()["detail"][0]["loc"] == ["body", "subject"]
        assert "xxxx" not in bad.text  # the input is never echoed
        extra = await client.post(
            "/api/tasks/email_triage", json={**MAIL, "cc": "x"}, headers=headers
        )
        assert extra.status_code == 422 and extra.json()["detail"][0]["loc"] == ["body", "cc"]
        not_json = await client.post(
            "/api/tasks/email_triage",
            content=b"{nope",
            headers={**headers, "Content-Type": "application/json"},
        )
        assert (
            not_json.status_code == 422 and not_json.json()["detail"][0]["type"] == "json_invalid"
        )
        for refused in (bad, extra, not_json):  # the body the schema documents
            ValidationErrorBody.model_validate_json(refused.content, strict=True)

        big = {**MAIL, "body": "parola " * 3000}
        declared = await client.post("/api/tasks/email_triage", json=big, headers=headers)
        assert declared.status_code == 413 and declared.json()["error"] == "body_too_large"

        async def chunks():  # no Content-Length: counted while read
            for _ in range(20):
                yield b"x" * 1000

        streamed = await client.post("/api/tasks/email_triage", content=chunks(), headers=headers)
        assert streamed.status_code == 413
    assert models.calls == 0


async def test_the_default_limit_is_one_megabyte(task_app, auth):
    headers = auth(permissions=RUN)
    async with asgi_client(task_app()) as client:
        near = {**MAIL, "body": "a" * 190_000}  # within the input's own limit and 1 MB
        assert (
            await client.post("/api/tasks/email_triage", json=near, headers=headers)
        ).status_code == 200
        over = await client.post(
            "/api/tasks/email_triage", content=b" " * 1_000_001, headers=headers
        )
        assert over.status_code == 413


async def test_a_failed_chain_is_a_503_with_the_review_id(task_app, auth):
    models = ScriptedTaskModels(["no"] * 4)
    app = task_app(models)
    async with asgi_client(app) as client:
        response = await client.post(
            "/api/tasks/email_triage", json=MAIL, headers=auth(permissions=RUN)
        )
        assert response.status_code == 503
        body = response.json()
        assert body["error"] == "task_failed" and body["review_id"] and body["run_id"]
        models.assert_used()

        reviewer = auth("rev-1", permissions=REVIEW)
        page = (await client.get("/api/tasks/review", headers=reviewer)).json()
        (summary,) = page["items"]
        assert summary["review_id"] == body["review_id"] and page["next_after"] is None
        # One item, a page of one: the last page, though just full.
        one = await client.get("/api/tasks/review", params={"limit": 1}, headers=reviewer)
        assert len(one.json()["items"]) == 1 and one.json()["next_after"] is None
        assert summary["input_preview"]["subject"] == MAIL["subject"] and summary["attempts"] == 4
        assert summary["last_error"]["stage"] == "parse"

        detail = (
            await client.get(f"/api/tasks/review/{body['review_id']}", headers=reviewer)
        ).json()
        assert [a["raw"] for a in detail["attempts"]] == ["no"] * 4
        candidates = detail["model_input"]["candidate_keywords"]
        assert candidates and all({"candidate_id", "term"} <= set(c) for c in candidates)

        run = (await client.get(f"/api/tasks/runs/{body['run_id']}", headers=reviewer)).json()
        assert run["status"] == "dead_letter" and run["review_id"] == body["review_id"]

        # The reviewer's output goes through the same stages.
        term = candidates[0]
        output = {
            "topics": [
                {
                    "label": "METEO",
                    "confidence": 1.0,
                    "keywords": [{"candidate_id": "cdeadbeef000", "term": "nebbia"}],
                    "evidence": [{"quote": "domani mattina c'è nebbia"}],
                }
            ],
            "sentiment": {"value": "neutral", "confidence": 1.0},
            "language": "it",
            "priority": {"value": "urgent", "confidence": 1.0, "signals": ["volo domani mattina"]},
        }
        url = f"/api/tasks/review/{body['review_id']}/resolve"
        refused = await client.post(url, json={"output": output}, headers=reviewer)
        assert refused.status_code == 422 and refused.json()["error"] == "invalid_output"
        assert refused.json()["stage"] == "business"
        output["topics"][0]["keywords"] = [
            {"candidate_id": term["candidate_id"], "term": term["term"]}
        ]
        resolved = await client.post(url, json={"output": output}, headers=reviewer)
        assert resolved.status_code == 200, resolved.text
        assert resolved.json()["model"] == "review:rev-1"
        again = await client.post(url, json={"output": output}, headers=reviewer)
        assert again.status_code == 409 and again.json()["error"] == "conflict"
        assert (await client.get("/api/tasks/review", headers=reviewer)).json()["items"] == []
        closed = (await client.get("/api/tasks/review?status=resolved", headers=reviewer)).json()
        assert [i["review_id"] for i in closed["items"]] == [body["review_id"]]
        missing = await client.get("/api/tasks/review/nope", headers=reviewer)
        assert missing.status_code == 404


class CountingModels:
    """The offline answer, slowly enough to observe how many run at once."""

    def __init__(self, fail_marked: bool = False):
        self.running = self.peak = self.calls = 0
        self.fail_marked = fail_marked  # subjects ending in "!" get an invalid answer
        self.label = "counting"
        self.notice = None
        self.tokens = {}

    async def open(self, which, *, temperature):
        return self if which == "primary" else None

    async def generate(self, request):
        self.calls += 1
        self.running += 1
        self.peak = max(self.peak, self.running)
        await asyncio.sleep(0)  # let the others start
        await asyncio.sleep(0)
        self.running -= 1
        if self.fail_marked and request.prepared.payload["subject"].endswith("!"):
            return "not json"
        return good(request)

    async def aclose(self):
        return None


async def test_a_batch_runs_each_input_with_bounded_concurrency(task_app, auth):
    models = CountingModels(fail_marked=True)
    app = task_app(models, task_batch_concurrency=3)
    inputs = [{**MAIL, "subject": f"Lezione {n}" + ("!" if n == 7 else "")} for n in range(50)]
    async with asgi_client(app) as client:
        response = await client.post(
            "/api/tasks/email_triage/batch", json={"inputs": inputs}, headers=auth(permissions=RUN)
        )
        assert response.status_code == 200, response.text
        results = response.json()["results"]
        assert [r["index"] for r in results] == list(range(50))
        assert [r["status"] for r in results].count("ok") == 49
        assert results[7]["status"] == "review" and results[7]["review_id"]
        assert results[0]["result"]["output"]["topics"]
        assert 1 < models.peak <= 3

        too_many = await client.post(
            "/api/tasks/email_triage/batch",
            json={"inputs": [*inputs, MAIL]},
            headers=auth(permissions=RUN),
        )
        assert too_many.status_code == 422 and "between 1 and 50" in too_many.text
        one_bad = await client.post(
            "/api/tasks/email_triage/batch",
            json={"inputs": [MAIL, {"from": "x", "body": 5}]},
            headers=auth(permissions=RUN),
        )
        assert one_bad.status_code == 422
        assert one_bad.json()["detail"][0]["loc"] == ["body", "inputs", 1, "body"]
        ValidationErrorBody.model_validate_json(one_bad.content, strict=True)
        assert models.calls == 49 + 4  # input 7: 3 attempts and a shrunk one; none for the refused


async def test_a_store_outage_is_a_503_and_a_batch_error_per_input(settings, auth):
    from aircoach.services import build_task_stores

    real = build_task_stores(settings)
    app = app_with(settings, task_stores=TaskStores(DownRuns(), real.reviews, real.contacts))
    async with asgi_client(app) as client:
        single = await client.post(
            "/api/tasks/email_triage", json=MAIL, headers=auth(permissions=RUN)
        )
        assert single.status_code == 503 and single.json()["error"] == "store_unavailable"
        assert "chat" not in single.json()["message"].lower()  # it named the chat history
        batch = await client.post(
            "/api/tasks/email_triage/batch", json={"inputs": [MAIL]}, headers=auth(permissions=RUN)
        )
        assert batch.json()["results"][0]["status"] == "error"
        assert batch.json()["results"][0]["error"]["error"] == "store_unavailable"


async def test_a_stored_run_is_answered_when_its_key_cannot_be_marked(settings, auth):
    # Before, the caller got a 503 for a run that was stored, then a 409 for the lease, then a
    # second run (and a second bill) once the lease had passed.
    from aircoach.services import build_task_stores

    real = build_task_stores(settings)
    stores = TaskStores(UnmarkedKeys(real.runs), real.reviews, real.contacts)
    app = app_with(settings, task_stores=stores)
    headers = {**auth(permissions=RUN), "Idempotency-Key": "mail-7"}
    async with asgi_client(app) as client:
        response = await client.post("/api/tasks/email_triage", json=MAIL, headers=headers)
        assert response.status_code == 200, response.text
        stored = await real.runs.get_run(response.json()["run_id"])
        assert stored is not None and stored.status == "ok"
        failed = ScriptedTaskModels(["no"] * 4)
        app = app_with(settings, task_stores=stores, task_models=failed)
    async with asgi_client(app) as client:
        headers["Idempotency-Key"] = "mail-8"
        review = await client.post("/api/tasks/email_triage", json=MAIL, headers=headers)
        assert review.status_code == 503 and review.json()["error"] == "task_failed"


class VerdictOnce:
    """The real runs, whose first verdict cannot be recorded."""

    def __init__(self, real):
        self.real = real
        self.failures = 1

    def __getattr__(self, name):
        return getattr(self.real, name)

    async def record_verdict(self, run_id, **kw):
        if self.failures:
            self.failures -= 1
            raise StoreUnavailable()
        await self.real.record_verdict(run_id, **kw)


async def test_a_resolution_that_fails_stores_no_run_and_the_next_stores_one(settings, auth):
    # Before, the review run was stored before the verdict: the failed verdict reopened the
    # item, and the next reviewer's resolution stored a second run for it.
    from aircoach.services import build_task_stores

    real = build_task_stores(settings)
    stores = TaskStores(VerdictOnce(real.runs), real.reviews, real.contacts)
    app = app_with(settings, task_stores=stores, task_models=ScriptedTaskModels(["no"] * 4))
    reviewer = auth("rev-1", permissions=REVIEW)
    async with asgi_client(app) as client:
        failed = await client.post(
            "/api/tasks/email_triage", json=MAIL, headers=auth(permissions=RUN)
        )
        review_id = failed.json()["review_id"]
        item = (await client.get(f"/api/tasks/review/{review_id}", headers=reviewer)).json()
        term = item["model_input"]["candidate_keywords"][0]
        output = {
            "topics": [
                {
                    "label": "METEO",
                    "confidence": 1.0,
                    "keywords": [{"candidate_id": term["candidate_id"], "term": term["term"]}],
                    "evidence": [{"quote": "domani mattina c'è nebbia"}],
                }
            ],
            "sentiment": {"value": "neutral", "confidence": 1.0},
            "language": "it",
            "priority": {"value": "urgent", "confidence": 1.0, "signals": ["volo domani mattina"]},
        }
        url = f"/api/tasks/review/{review_id}/resolve"
        down = await client.post(url, json={"output": output}, headers=reviewer)
        assert down.status_code == 503 and down.json()["error"] == "store_unavailable"
        reviews = await client.get("/api/tasks/runs?source=review", headers=reviewer)
        assert reviews.json()["items"] == []
        again = await client.post(url, json={"output": output}, headers=reviewer)
        assert again.status_code == 200, again.text
        reviews = await client.get("/api/tasks/runs?source=review", headers=reviewer)
        assert [r["run_id"] for r in reviews.json()["items"]] == [again.json()["run_id"]]
    first = await real.runs.get_run(failed.json()["run_id"])
    assert first.verdict == "corrected" and first.reviewed_output == again.json()["output"]


async def test_an_item_queued_under_an_older_input_is_refused_by_name_then_dismissed(
    store_settings, auth
):
    # Before, its detail and its resolution were a 500 `internal_error`; then a 422
    # `input_outdated` that kept it in the queue for ever: nothing else closed an item.
    from aircoach.tasks.records import PipelineVersion, ReviewItem, TaskRun

    app = app_with(store_settings)
    stores = app.state.services.task_stores
    version = PipelineVersion(
        task="email_triage",
        task_version="old",
        schema_hash="old",
        candidates_version="cand-1",
        stoplist_version="stop-old",
        model="offline-rules",
        code_version="old",
    )
    old_input = {"from": "allievo@example.it", "cc": "a field the input has no more"}
    queued = dict(task="email_triage", created_at="2026-01-01T00:00:00+00:00", source="api")
    await stores.runs.insert_run(
        TaskRun(
            run_id="run-old",
            status="low_confidence",
            caller="someone",
            input=old_input,
            output={"topics": []},
            pipeline_version=version,
            review_id="r-old",
            **queued,
        )
    )
    await stores.reviews.enqueue(
        ReviewItem(
            review_id="r-old",
            caller="someone",
            input=old_input,
            attempts=[],
            pipeline_version=version,
            run_id="run-old",
            reason="low_confidence",
            output={"topics": []},
            **queued,
        )
    )
    reviewer = auth("rev-1", permissions=REVIEW)
    async with asgi_client(app) as client:
        detail = await client.get("/api/tasks/review/r-old", headers=reviewer)
        assert detail.status_code == 200, detail.text
        assert detail.json()["input"] == old_input and detail.json()["model_input"] is None
        assert detail.json()["run_stored"] is True
        url = "/api/tasks/review/r-old/resolve"
        refused = await client.post(url, json={"confirm": True}, headers=reviewer)
        assert refused.status_code == 422, refused.text
        assert refused.json()["issues"][0]["code"] == "input_outdated"
        still = (await client.get("/api/tasks/review", headers=reviewer)).json()["items"]
        assert [i["review_id"] for i in still] == ["r-old"]

        dismiss = "/api/tasks/review/r-old/dismiss"
        note = {"note": "queued under the input before `cc` was dropped"}
        runner = await client.post(dismiss, json=note, headers=auth(permissions=RUN))
        assert runner.status_code == 403 and "'tasks:review'" in runner.json()["message"]
        for body, field in (
            ({}, "note"),
            ({"note": "  "}, "note"),
            ({"note": "x" * 501}, "note"),
            ({**note, "confirm": True}, "confirm"),
        ):
            bad = await client.post(dismiss, json=body, headers=reviewer)
            assert bad.status_code == 422, body
            assert bad.json()["detail"][0]["loc"] == ["body", field]
        missing = await client.post("/api/tasks/review/nope/dismiss", json=note, headers=reviewer)
        assert missing.status_code == 404

        dismissed = await client.post(dismiss, json=note, headers=reviewer)
        assert dismissed.status_code == 200, dismissed.text
        item = dismissed.json()
        assert (item["status"], item["resolved_by"]) == ("dismissed", "rev-1")
        assert item["dismissal_note"] == note["note"] and item["resolution_run_id"] is None
        assert (await client.get("/api/tasks/review", headers=reviewer)).json()["items"] == []
        closed = await client.get("/api/tasks/review?status=dismissed", headers=reviewer)
        assert [i["review_id"] for i in closed.json()["items"]] == ["r-old"]
        stored = await stores.reviews.get_item("r-old")
        assert stored.status == "dismissed" and stored.dismissal_note == note["note"]
        for again in (
            await client.post(url, json={"confirm": True}, headers=reviewer),
            await client.post(dismiss, json=note, headers=reviewer),
        ):
            assert again.status_code == 409 and "'r-old'" in again.json()["message"]
        # A dismissal records no verdict: the run stays out of the eval set.
        assert (await stores.runs.get_run("run-old")).verdict is None


async def test_a_doubtful_run_that_was_never_stored_leaves_an_item_that_says_so(
    store_settings, auth
):
    # Before, the item looked like any other, pointed at a run that `GET /runs/{id}` did not
    # know, and its confirmation answered 200 with a verdict recorded on nothing.
    from aircoach.services import build_task_stores

    doubtful = store_settings.model_copy(update={"task_review_below": {"email_triage": 0.95}})
    real = build_task_stores(doubtful)
    down = TaskStores(UnstoredRuns(real.runs), real.reviews, real.contacts)
    async with asgi_client(app_with(doubtful, task_stores=down)) as client:
        failed = await client.post(
            "/api/tasks/email_triage", json=MAIL, headers=auth(permissions=RUN)
        )
        assert failed.status_code == 503 and failed.json()["error"] == "store_unavailable"
    reviewer = auth("rev-1", permissions=REVIEW)
    async with asgi_client(app_with(doubtful, task_stores=real)) as client:
        (orphan,) = (await client.get("/api/tasks/review", headers=reviewer)).json()["items"]
        assert orphan["reason"] == "low_confidence" and orphan["run_stored"] is False
        url = f"/api/tasks/review/{orphan['review_id']}"
        detail = (await client.get(url, headers=reviewer)).json()
        assert detail["run_stored"] is False
        assert (
            await client.get(f"/api/tasks/runs/{detail['run_id']}", headers=reviewer)
        ).status_code == 404
        output = json.loads(json.dumps(detail["output"]))
        for topic in output["topics"]:
            topic["keywords"] = [
                {"candidate_id": k["candidate_id"], "term": k["term"]} for k in topic["keywords"]
            ]
        for body in ({"confirm": True}, {"output": output}):
            refused = await client.post(f"{url}/resolve", json=body, headers=reviewer)
            assert refused.status_code == 409, refused.text
            assert refused.json()["error"] == "conflict"
            assert repr(detail["run_id"]) in refused.json()["message"]
        assert (await client.get("/api/tasks/runs?source=review", headers=reviewer)).json()[
            "items"
        ] == []

        # The caller sends it again: this run is stored, and its item says so.
        again = await client.post(
            "/api/tasks/email_triage", json=MAIL, headers=auth(permissions=RUN)
        )
        assert again.status_code == 200 and again.json()["low_confidence"] is True
        listed = (await client.get("/api/tasks/review", headers=reviewer)).json()["items"]
        assert [(i["review_id"], i["run_stored"]) for i in listed] == [
            (orphan["review_id"], False),
            (again.json()["review_id"], True),
        ]
        dismissed = await client.post(
            f"{url}/dismiss", json={"note": "its run was never stored"}, headers=reviewer
        )
        assert dismissed.status_code == 200, dismissed.text
        (left,) = (await client.get("/api/tasks/review", headers=reviewer)).json()["items"]
        assert left["review_id"] == again.json()["review_id"]


async def test_an_invalid_task_is_refused_on_reload_and_the_last_good_keeps_serving(
    settings, auth, tmp_path
):
    docs = copy_prompt_docs(tmp_path / "docs")
    app = app_with(settings.model_copy(update={"prompt_docs_dir": docs}))
    admin = auth("admin", permissions=["admin:docs", *RUN])
    async with asgi_client(app) as client:
        first = await client.post("/api/tasks/email_triage", json=MAIL, headers=admin)
        assert first.status_code == 200
        schema = docs / "tasks" / "email_triage" / "schema.json"
        schema.write_text(schema.read_text().replace('"maxItems": 5', '"maxItems": 4', 1))
        reload = await client.post("/api/update_docs", headers=admin)
        assert reload.status_code == 422 and reload.json()["error"] == "invalid_docs"
        assert "tasks/email_triage/schema.json" in reload.json()["message"]
        again = await client.post("/api/tasks/email_triage", json=MAIL, headers=admin)
        assert again.json()["pipeline_version"] == first.json()["pipeline_version"]
