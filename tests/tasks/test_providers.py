"""Each fallback step end to end against the fake model servers (real HTTP on loopback, the
real langchain-google-genai and langchain-openai clients): native structured output in the
request, invalid JSON -> retry, invented candidate -> retry, repeated failure -> shrink ->
fallback model -> dead letter."""

from __future__ import annotations

import json

import pytest

from aircoach.tasks.triage import TriageInput
from tests.helpers import app_with, asgi_client
from tests.llm.fakes import gemini_error, gemini_json, openai_error, openai_json

RUN = ["tasks:email_triage"]
MAIL = {
    "subject": "Fattura e lezione",
    "from": "allievo@example.it",
    "body": "Buongiorno, non ho ricevuto la fattura di marzo. Posso prenotare una lezione di volo "
    "per sabato?\n\nGrazie",
}


def answer(triage, *, shrink: bool = False) -> str:
    """The valid answer to the request the engine will send: candidates are deterministic,
    so the test computes the same ones."""
    prepared = triage.kind.prepare(triage, TriageInput.model_validate(MAIL), shrink=shrink)
    return json.dumps(triage.kind.offline(triage, prepared))


def with_invented_candidate(triage) -> str:
    data = json.loads(answer(triage))
    data["topics"][0]["keywords"].append({"candidate_id": "cdeadbeef000", "term": "bonifico"})
    return json.dumps(data)


def openai_settings(model_settings, openai_api, **overrides):
    return model_settings(
        model_provider="openai",
        model_name="fake-llama",
        openai_base_url=f"{openai_api.url}/v1",
        **overrides,
    )


async def post(app, auth):
    async with asgi_client(app) as client:
        return await client.post(
            "/api/tasks/email_triage", json=MAIL, headers=auth(permissions=RUN)
        )


async def tokens(app, run_id: str) -> dict[str, int] | None:
    """The tokens the stored run counts (what `/api/tasks/stats` sums)."""
    run = await app.state.services.task_stores.runs.get_run(run_id)
    assert run is not None
    return run.tokens


async def test_gemini_invalid_json_is_retried_with_feedback(
    gemini_api, gemini_settings, auth, triage
):
    gemini_api.script(gemini_json('{"topics": [ oops'), gemini_json(answer(triage)))
    app = app_with(gemini_settings())
    response = await post(app, auth)
    assert response.status_code == 200, response.text
    body = response.json()
    assert body["model"] == "gemini-2.5-flash" and body["warnings"] == []
    assert [(a["stage"], a["ok"]) for a in body["attempts"]] == [("parse", False), (None, True)]
    # Both calls' usage, as the fake server reported it (120 in, 40 out each).
    assert await tokens(app, body["run_id"]) == {"input": 240, "output": 80}
    async with asgi_client(app) as client:
        stats = await client.get("/api/tasks/stats", headers=auth(permissions=["tasks:review"]))
    (numbers,) = stats.json()
    assert (numbers["input_tokens"], numbers["output_tokens"]) == (240, 80)

    first, second = gemini_api.requests
    assert first.path == "/v1beta/models/gemini-2.5-flash:generateContent"
    config = first.body["generationConfig"]
    assert config["responseMimeType"] == "application/json"
    assert config["responseJsonSchema"] == triage.model_schema
    assert config["temperature"] == pytest.approx(0.1)
    assert "Smistamento" in first.body["systemInstruction"]["parts"][0]["text"]
    sent = json.loads(first.body["contents"][0]["parts"][0]["text"])
    assert sent["subject"] == MAIL["subject"] and len(sent["candidate_keywords"]) <= 100
    feedback = second.body["contents"][-1]["parts"][0]["text"]
    assert "non è valida" in feedback and "'parse'" in feedback


async def test_openai_invented_candidate_is_retried(openai_api, model_settings, auth, triage):
    openai_api.script(openai_json(with_invented_candidate(triage)), openai_json(answer(triage)))
    app = app_with(openai_settings(model_settings, openai_api))
    response = await post(app, auth)
    assert response.status_code == 200, response.text
    body = response.json()
    assert body["model"] == "fake-llama" and body["pipeline_version"]["model"] == "fake-llama"
    assert await tokens(app, body["run_id"]) == {"input": 240, "output": 80}
    assert body["attempts"][0]["stage"] == "business"
    assert body["attempts"][0]["errors"][0]["code"] == "invented_candidate"

    first, second = openai_api.requests
    assert first.path == "/v1/chat/completions"
    assert first.body["response_format"] == {
        "type": "json_schema",
        "json_schema": {"name": "email_triage", "strict": True, "schema": triage.model_schema},
    }
    assert first.body["temperature"] == pytest.approx(0.1) and not first.body.get("stream")
    assert [m["role"] for m in first.body["messages"]] == ["system", "user"]
    assert [m["role"] for m in second.body["messages"]] == ["system", "user", "user"]
    assert "cdeadbeef000" in second.body["messages"][-1]["content"]


async def test_repeated_failure_shrinks_then_the_fallback_model_answers(
    openai_api, gemini_api, model_settings, auth, triage
):
    openai_api.script(
        openai_json("not json at all"),
        openai_json('{"topics": []}'),
        openai_json(with_invented_candidate(triage)),
        openai_json(with_invented_candidate(triage)),  # the shrunk attempt
    )
    gemini_api.script(gemini_json(answer(triage, shrink=True)))
    settings = openai_settings(
        model_settings,
        openai_api,
        model_fallback="gemini:gemini-2.5-flash",
        google_api_key="fake-key",
        gemini_base_url=gemini_api.url,
    )
    app = app_with(settings)
    response = await post(app, auth)
    assert response.status_code == 200, response.text
    body = response.json()
    assert [(a["model"], a["shrunk"], a["stage"]) for a in body["attempts"]] == [
        ("fake-llama", False, "parse"),
        ("fake-llama", False, "schema"),
        ("fake-llama", False, "business"),
        ("fake-llama", True, "business"),
        ("gemini-2.5-flash", True, None),
    ]
    assert body["model"] == body["pipeline_version"]["model"] == "gemini-2.5-flash"
    assert await tokens(app, body["run_id"]) == {"input": 600, "output": 200}  # five calls
    shrunk = json.loads(openai_api.requests[3].body["messages"][1]["content"])
    assert len(shrunk["candidate_keywords"]) <= 50
    fallback = json.loads(gemini_api.requests[0].body["contents"][0]["parts"][0]["text"])
    assert fallback["candidate_keywords"] == shrunk["candidate_keywords"]


async def test_when_the_fallback_fails_too_the_input_goes_to_review(
    openai_api, gemini_api, model_settings, auth, triage
):
    openai_api.script(*[openai_json("[]")] * 4)
    gemini_api.script(gemini_error(503))
    settings = openai_settings(
        model_settings,
        openai_api,
        model_fallback="gemini:gemini-2.5-flash",
        google_api_key="fake-key",
        gemini_base_url=gemini_api.url,
    )
    app = app_with(settings)
    response = await post(app, auth)
    assert response.status_code == 503
    body = response.json()
    assert body["error"] == "task_failed"
    item = await app.state.services.task_stores.reviews.get_item(body["review_id"])
    assert item is not None and item.status == "open"
    assert [a.raw for a in item.attempts] == ["[]", "[]", "[]", "[]", None]
    assert item.attempts[-1].stage == "model" and "503" in item.attempts[-1].errors[0].message
    assert item.pipeline_version.model == "fake-llama+gemini-2.5-flash"
    run = await app.state.services.task_stores.runs.get_run(body["run_id"])
    assert run is not None and run.status == "dead_letter"
    assert run.tokens == {"input": 480, "output": 160}  # the four answered calls; not the 503


async def test_a_server_error_goes_straight_to_the_fallback_model(
    openai_api, gemini_api, model_settings, auth, triage
):
    openai_api.script(openai_error(500))
    gemini_api.script(gemini_json(answer(triage, shrink=True)))
    settings = openai_settings(
        model_settings,
        openai_api,
        model_fallback="gemini:gemini-2.5-flash",
        google_api_key="fake-key",
        gemini_base_url=gemini_api.url,
    )
    response = await post(app_with(settings), auth)
    assert response.status_code == 200, response.text
    attempts = response.json()["attempts"]
    assert [(a["model"], a["stage"]) for a in attempts] == [
        ("fake-llama", "model"),
        ("gemini-2.5-flash", None),
    ]
    assert "500" in attempts[0]["errors"][0]["message"]
