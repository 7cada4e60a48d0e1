"""An office's first week, on SQLite and MongoDB: every mail gets an outcome (attachments, an
empty body, a long body), doubt goes to a person (low confidence, confirm or correct, the
export), redeliveries and repeated requests run once, and the runs and stats routes."""

from __future__ import annotations

import asyncio
import json

import pytest

from aircoach.entry.tasks_worker import SqsTaskWorker
from aircoach.services import Services, build_task_stores
from aircoach.tasks.export import reviewed_examples
from aircoach.tasks.ports import RunFilter
from tests.entry.test_tasks_worker import sqs as sqs  # the fixture: moto's SQS
from tests.helpers import app_with, asgi_client

RUN = ["tasks:email_triage"]
REVIEW = ["tasks:review"]
URL = "/api/tasks/email_triage"
MAIL = {
    "subject": "Lezione di volo",
    "from": "Sara Conti <sara.conti@outlook.it>",
    "body": "Buongiorno, vorrei prenotare una lezione di volo per sabato mattina. Grazie.",
}


@pytest.fixture
def make_app(store_settings):
    def make(**overrides):
        return app_with(store_settings.model_copy(update=overrides))

    return make


async def test_an_empty_body_with_attachments_is_triaged_from_the_names(make_app, auth):
    mail = {
        "subject": "",
        "from": "allievo@example.it",
        "body": "",
        "attachments": [
            {
                "filename": "certificato medico classe 2.pdf",
                "content_type": "application/pdf",
                "size": 183_204,
            },
        ],
    }
    app = make_app()
    async with asgi_client(app) as client:
        response = await client.post(URL, json=mail, headers=auth(permissions=RUN))
        assert response.status_code == 200, response.text
        body = response.json()
        assert body["output"]["topics"][0]["label"] == "CERTIFICATO_MEDICO"
        quote = body["output"]["topics"][0]["evidence"][0]["quote"]
        assert "certificato medico" in quote
        run = await app.state.services.task_stores.runs.get_run(body["run_id"])
        assert run.input["attachments"] == mail["attachments"] and run.input["body"] == ""
        # Wrong types are what is refused, and nothing of the input is echoed.
        bad = await client.post(
            URL, json={**mail, "attachments": [{"filename": 5}]}, headers=auth(permissions=RUN)
        )
        assert bad.status_code == 422 and "certificato" not in bad.text


async def test_a_long_body_is_cut_at_a_sentence_and_says_how_much_was_kept(make_app, auth):
    sentence = "Vorrei sapere se la lezione di volo di sabato è confermata. "
    body = (sentence * (250_000 // len(sentence) + 1))[:250_000]
    async with asgi_client(make_app()) as client:
        response = await client.post(
            URL, json={**MAIL, "body": body}, headers=auth(permissions=RUN)
        )
        assert response.status_code == 200, response.text
        result = response.json()
        assert result["input_truncated"] is True
        assert result["input_total_chars"] == len(body.rstrip())
        kept = result["input_kept_chars"]
        assert 6_000 <= kept <= 8_000 and kept % len(sentence) == len(sentence) - 1
        assert result["output"]["topics"][0]["label"] == "PRENOTAZIONE_VOLO"
        too_long = await client.post(
            URL, json={**MAIL, "body": body + "x"}, headers=auth(permissions=RUN)
        )
        assert too_long.status_code == 422 and len(too_long.text) < 2_000


async def test_a_doubtful_output_is_answered_and_queued_then_confirmed(make_app, auth):
    app = make_app(task_review_below={"email_triage": 0.95})
    stores = app.state.services.task_stores
    async with asgi_client(app) as client:
        response = await client.post(URL, json=MAIL, headers=auth(permissions=RUN))
        assert response.status_code == 200, response.text
        result = response.json()
        assert result["low_confidence"] is True and result["review_id"]
        assert result["confidence"] < 0.95 and result["output"]["topics"]
        queue = await client.get("/api/tasks/review", headers=auth(permissions=REVIEW))
        (item,) = queue.json()["items"]
        assert (item["review_id"], item["reason"]) == (result["review_id"], "low_confidence")

        stats = (await client.get("/api/tasks/stats", headers=auth(permissions=REVIEW))).json()
        assert len(stats) == 1, stats
        (numbers,) = stats
        assert numbers["runs"] == {"ok": 0, "low_confidence": 1, "review": 0}
        assert numbers["review_queue_open"] == 1 and numbers["review_queue_oldest_age_s"] >= 0

        neither = await client.post(
            f"/api/tasks/review/{item['review_id']}/resolve",
            json={},
            headers=auth("boss", permissions=REVIEW),
        )
        assert neither.status_code == 422
        confirmed = await client.post(
            f"/api/tasks/review/{item['review_id']}/resolve",
            json={"confirm": True},
            headers=auth("boss", permissions=REVIEW),
        )
        assert confirmed.status_code == 200, confirmed.text
        assert confirmed.json()["output"] == result["output"]
        run = await stores.runs.get_run(result["run_id"])
        assert run.verdict == "confirmed" and run.reviewed_output == result["output"]
        after = (await client.get("/api/tasks/stats", headers=auth(permissions=REVIEW))).json()
        assert after[0]["review_queue_open"] == 0 and after[0]["total"] == 1
    (example,) = [e async for e in reviewed_examples(stores.runs)]
    assert example["verdict"] == "confirmed" and example["input"]["body"] == MAIL["body"]


async def test_a_doubtful_output_is_corrected_and_the_correction_kept(make_app, auth):
    app = make_app(task_review_below={"email_triage": 0.95})
    stores = app.state.services.task_stores
    async with asgi_client(app) as client:
        result = (await client.post(URL, json=MAIL, headers=auth(permissions=RUN))).json()
        corrected = json.loads(json.dumps(result["output"]))
        for topic in corrected["topics"]:  # as the model answers: the candidates' ids and terms
            topic["keywords"] = [
                {"candidate_id": k["candidate_id"], "term": k["term"]} for k in topic["keywords"]
            ]
        corrected["priority"] = {"value": "high", "confidence": 1.0, "signals": ["volo sabato"]}
        response = await client.post(
            f"/api/tasks/review/{result['review_id']}/resolve",
            json={"output": corrected},
            headers=auth("boss", permissions=REVIEW),
        )
        assert response.status_code == 200, response.text
    run = await stores.runs.get_run(result["run_id"])
    assert run.verdict == "corrected" and run.reviewed_output["priority"]["value"] == "high"
    assert run.output == result["output"]  # the model's own answer stays as it was
    (example,) = [e async for e in reviewed_examples(stores.runs, task="email_triage")]
    assert example["output"]["priority"]["value"] == "high"


async def test_an_idempotency_key_runs_once_and_refuses_another_input(make_app, auth):
    app = make_app()
    async with asgi_client(app) as client:
        headers = {**auth(permissions=RUN), "Idempotency-Key": "mail-42"}
        first = await client.post(URL, json=MAIL, headers=headers)
        again = await client.post(URL, json=MAIL, headers=headers)
        assert first.status_code == again.status_code == 200
        assert first.json()["run_id"] == again.json()["run_id"]
        assert again.headers["Idempotent-Replayed"] == "true"
        assert "Idempotent-Replayed" not in first.headers
        other = await client.post(URL, json={**MAIL, "body": "Altro testo."}, headers=headers)
        assert other.status_code == 409 and other.json()["error"] == "conflict"
        # Another caller's key is its own.
        theirs = await client.post(
            URL,
            json=MAIL,
            headers={**auth("user-2", permissions=RUN), "Idempotency-Key": "mail-42"},
        )
        assert theirs.status_code == 200 and theirs.json()["run_id"] != first.json()["run_id"]
        bad_key = await client.post(
            URL, json=MAIL, headers={**auth(permissions=RUN), "Idempotency-Key": "a b"}
        )
        assert bad_key.status_code == 422
        assert bad_key.json()["detail"][0]["loc"] == ["header", "Idempotency-Key"]
        assert "Idempotency-Key" in bad_key.json()["message"]
        # Headers are case-insensitive: the key in lower case is the same key.
        lower = await client.post(
            URL, json=MAIL, headers={**auth(permissions=RUN), "idempotency-key": "mail-42"}
        )
        assert lower.json()["run_id"] == first.json()["run_id"]
        runs = await client.get("/api/tasks/runs", headers=auth(permissions=REVIEW))
        assert len(runs.json()["items"]) == 2


async def test_the_run_list_pages_newest_first_and_filters_by_source(make_app, auth):
    app = make_app()
    async with asgi_client(app) as client:
        ids = []
        for n in range(5):
            response = await client.post(
                URL, json={**MAIL, "subject": f"Lezione {n}"}, headers=auth(permissions=RUN)
            )
            ids.append(response.json()["run_id"])
        assert (
            await client.get("/api/tasks/runs", headers=auth(permissions=RUN))
        ).status_code == 403
        seen, cursor = [], None
        while True:
            params = {"limit": 2, "source": "http", "task": "email_triage"}
            if cursor:
                params["cursor"] = cursor
            page = (
                await client.get("/api/tasks/runs", params=params, headers=auth(permissions=REVIEW))
            ).json()
            seen += [item["run_id"] for item in page["items"]]
            assert all(item["source"] == "http" for item in page["items"])
            cursor = page["next_cursor"]
            if cursor is None:
                break
        assert seen == ids[::-1]
        # A last page that is just full says so (it gave a cursor to an empty page).
        params = {"limit": 5, "source": "http"}
        whole = await client.get("/api/tasks/runs", params=params, headers=auth(permissions=REVIEW))
        assert len(whole.json()["items"]) == 5 and whole.json()["next_cursor"] is None
        none = await client.get(
            "/api/tasks/runs", params={"source": "sqs"}, headers=auth(permissions=REVIEW)
        )
        assert none.json() == {"items": [], "next_cursor": None}
        future = await client.get(
            "/api/tasks/runs",
            params={"since": "2999-01-01T00:00:00Z"},
            headers=auth(permissions=REVIEW),
        )
        assert future.json()["items"] == []
        for route in ("/api/tasks/runs", "/api/tasks/stats"):  # a 500 (an OverflowError)
            edge = await client.get(
                route,
                params={"since": "9999-12-31T23:59:59-14:00"},
                headers=auth(permissions=REVIEW),
            )
            assert edge.status_code == 422, edge.text
            assert edge.json()["detail"][0]["loc"] == ["query", "since"]
        stats = (
            await client.get(
                "/api/tasks/stats",
                params={"task": "email_triage"},
                headers=auth(permissions=REVIEW),
            )
        ).json()
        (numbers,) = stats
        assert numbers["total"] == 5 and numbers["runs"]["ok"] == 5
        assert numbers["attempts_per_run"] == 1.0 and numbers["shrunk"] == numbers["fallback"] == 0
        assert 0 < numbers["latency_p50_ms"] <= numbers["latency_p95_ms"]


def test_an_sqs_batch_with_a_duplicate_and_a_malformed_record(sqs, store_settings):
    """moto's SQS: one run per distinct message, one failure (the malformed record); the
    redelivery of a done message returns its first run."""
    first = sqs.send({"task": "email_triage", "input": MAIL})
    second = sqs.send({"task": "email_triage", "input": {**MAIL, "subject": "Fattura"}})
    malformed = sqs.send({"task": "email_triage", "input": {**MAIL, "body": 42}})
    messages = sqs.receive()
    assert len(messages) == 3
    duplicate = next(m for m in messages if m["MessageId"] == first)
    worker = SqsTaskWorker(Services.build(store_settings))
    result = worker.handle(sqs.event([*messages, duplicate]))
    assert result == {"batchItemFailures": [{"itemIdentifier": malformed}]}
    sqs.settle(messages, result)

    async def runs() -> list:
        stores = build_task_stores(store_settings)
        found = await stores.runs.list_runs(RunFilter(source="sqs"), limit=10, before=None)
        return sorted(r.origin for r in found)

    assert asyncio.run(runs()) == sorted([f"sqs:{first}", f"sqs:{second}"])
    # SQS redelivers the first message (its deletion was lost): no second run.
    again = worker.handle(sqs.event([duplicate]))
    assert again == {"batchItemFailures": []}
    assert asyncio.run(runs()) == sorted([f"sqs:{first}", f"sqs:{second}"])
    one = asyncio.run(
        build_task_stores(store_settings).runs.list_runs(
            RunFilter(source=f"sqs:{first}"), limit=10, before=None
        )
    )
    assert len(one) == 1 and one[0].source == "sqs"


def test_export_reviews_writes_the_verdicts_as_json_lines(monkeypatch, data_dir, tmp_path, capsys):
    from aircoach.__main__ import main
    from aircoach.settings import Settings
    from aircoach.tasks.records import PipelineVersion, TaskRun

    settings = Settings(_env_file=None, data_dir=data_dir)
    runs = build_task_stores(settings).runs
    version = PipelineVersion(
        task="email_triage",
        task_version="v",
        schema_hash="s",
        candidates_version="cand-3",
        stoplist_version="stop-1",
        model="m",
        code_version="c",
    )

    def run(run_id: str, **fields) -> TaskRun:
        values = {
            "run_id": run_id,
            "task": "email_triage",
            "status": "low_confidence",
            "source": "sqs",
            "caller": "sqs",
            "created_at": "2026-11-25T10:00:00+00:00",
            "input": MAIL,
            "output": {"topics": [{"label": "METEO"}]},
            "pipeline_version": version,
        }
        return TaskRun(**{**values, **fields})

    async def seed() -> None:
        await runs.insert_run(run("r1"))
        await runs.insert_run(run("r2"))
        await runs.insert_run(run("r3", source="review", status="ok", verdict="confirmed"))
        await runs.record_verdict(
            "r1", verdict="corrected", output={"topics": [{"label": "ESAME"}]}
        )

    asyncio.run(seed())
    monkeypatch.setenv("DATA_DIR", str(data_dir))
    monkeypatch.chdir(data_dir)  # no stray .env
    out = tmp_path / "reviews.jsonl"
    main(["tasks", "export-reviews", "--out", str(out)])
    (line,) = out.read_text("utf-8").splitlines()
    example = json.loads(line)
    assert (example["run_id"], example["verdict"]) == ("r1", "corrected")
    assert example["output"] == {"topics": [{"label": "ESAME"}]} and example["input"] == MAIL
    assert "1 reviewed runs exported" in capsys.readouterr().err
