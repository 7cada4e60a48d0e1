"""POST /api/update_docs: signed webhook or admin token; anything else is refused before any
S3 call."""

from __future__ import annotations

import json
import time

import pytest

from aircoach.auth.webhook import SIGNATURE_HEADER, TIMESTAMP_HEADER, signed_headers
from aircoach.prompts.store import build_prompt
from tests.helpers import app_with, asgi_client, shipped_docs
from tests.s3 import CallCounter, s3_settings

SECRET = "s3cret"
BODY = json.dumps({"reason": "docs pushed by CI"}).encode()
LOCAL = shipped_docs()


@pytest.fixture
def s3_app(aws_env, settings):
    """An app on the S3 source. The tests that reload ask for the moto bucket (`s3`); the
    ones that are refused need none: any S3 call they made would show in `s3_calls`."""
    return app_with(s3_settings(settings.data_dir, update_docs_secret=SECRET))


@pytest.fixture
def s3_calls(s3_app) -> CallCounter:
    return CallCounter().attach(s3_app.state.services.prompts.source.client)


@pytest.fixture
async def s3_client(s3_app):
    async with asgi_client(s3_app) as c:
        yield c


async def post(client, headers, body=BODY):
    return await client.post(
        "/api/update_docs", content=body, headers={"content-type": "application/json", **headers}
    )


async def test_valid_signature_reloads_and_details_every_doc(s3, s3_client, s3_calls):
    version_ids = {key: s3.put(key, text) for key, text in LOCAL.items()}
    response = await post(s3_client, signed_headers(SECRET, BODY))
    assert response.status_code == 200, response.text
    body = response.json()
    assert body["message"] == "prompt updated" and body["previous_version"] is None
    assert body["prompt_version"] == build_prompt(LOCAL)[1]
    assert body["system_prompt"] == build_prompt(LOCAL)[0]
    assert body["docs_count"] == len(LOCAL)
    details = {d["key"]: d for d in body["docs_details"]}
    assert {k: d["version_id"] for k, d in details.items()} == version_ids
    assert all(d["etag"] and d["size"] > 0 and d["last_modified"] for d in details.values())
    assert s3_calls.count("ListObjectsV2") == 1

    s3.put("20_quiz.md", "Niente quiz oggi.")
    again = (await post(s3_client, signed_headers(SECRET, BODY))).json()
    assert again["previous_version"] == body["prompt_version"]
    assert again["prompt_version"] != body["prompt_version"] and again["docs_count"] == len(LOCAL)
    assert "Niente quiz oggi." in again["system_prompt"]


async def test_admin_token_may_reload(s3, s3_client, s3_calls, auth):
    response = await post(s3_client, auth("admin-1", permissions=["admin:docs"]))
    assert response.status_code == 200 and response.json()["docs_count"] == len(LOCAL)


def skewed(seconds: int) -> dict[str, str]:
    return signed_headers(SECRET, BODY, timestamp=int(time.time()) + seconds)


def signature_only() -> dict[str, str]:
    return {SIGNATURE_HEADER: signed_headers(SECRET, BODY)[SIGNATURE_HEADER]}


# Headers are built when the test runs (a timestamp taken at collection would age). The
# future skew has a margin: whole-second timestamps plus a slow machine eat into 301 s.
@pytest.mark.parametrize(
    ("make_headers", "body", "code"),
    [
        pytest.param(
            lambda: signed_headers("wrong", BODY), BODY, "invalid_signature", id="wrong-secret"
        ),
        pytest.param(lambda: skewed(-301), BODY, "invalid_signature", id="stale-timestamp"),
        pytest.param(lambda: skewed(+330), BODY, "invalid_signature", id="future-timestamp"),
        pytest.param(
            lambda: signed_headers(SECRET, BODY),
            BODY + b" ",
            "invalid_signature",
            id="body-altered",
        ),
        pytest.param(signature_only, BODY, "invalid_signature", id="no-timestamp"),
        pytest.param(
            lambda: {TIMESTAMP_HEADER: "yesterday"}, BODY, "invalid_signature", id="bad-timestamp"
        ),
        pytest.param(dict, BODY, "missing_token", id="no-auth"),
        pytest.param(
            lambda: {"Authorization": "Bearer nope"}, BODY, "invalid_token", id="garbage-token"
        ),
    ],
)
async def test_rejected_calls_get_401_and_make_no_s3_call(
    s3_client, s3_calls, make_headers, body, code
):
    response = await post(s3_client, make_headers(), body)
    assert (response.status_code, response.json()["error"]) == (401, code)
    assert s3_calls.calls == []


async def test_a_signature_just_inside_the_window_is_accepted(s3, s3_client, s3_calls):
    response = await post(s3_client, skewed(-290))
    assert response.status_code == 200 and s3_calls.count("ListObjectsV2") == 1


async def test_user_token_without_the_permission_is_forbidden(s3_client, s3_calls, auth):
    response = await post(s3_client, auth("user-1", permissions=["chat"]))
    assert response.status_code == 403 and response.json()["error"] == "forbidden"
    assert "admin:docs" in response.json()["message"]
    assert s3_calls.calls == []


async def test_signatures_are_refused_when_no_secret_is_configured(settings, aws_env):
    app = app_with(s3_settings(settings.data_dir, update_docs_secret=None))
    calls = CallCounter().attach(app.state.services.prompts.source.client)
    async with asgi_client(app) as c:
        response = await post(c, signed_headers("", BODY))
    assert response.status_code == 401 and "webhook firmate" in response.json()["message"]
    assert calls.calls == []


async def test_local_source_reloads_too(client, auth):
    response = await post(client, auth("admin-1", permissions=["admin:docs"]))
    assert response.status_code == 200
    body = response.json()
    assert body["prompt_version"] == build_prompt(LOCAL)[1]
    assert all(d["version_id"] is None for d in body["docs_details"])


async def test_a_taxonomy_edit_on_s3_is_a_new_task_version_not_a_new_prompt(s3, s3_client, auth):
    """Editing a task is a docs push and a reload: the task's version moves, the chat's
    prompt version (and its memory threads) does not."""
    headers = auth("office", permissions=["admin:docs", "tasks:email_triage"])
    first = (await post(s3_client, headers)).json()
    (task,) = (await s3_client.get("/api/tasks", headers=headers)).json()
    rules = json.loads(LOCAL["tasks/email_triage/rules.json"])
    rules["topics"]["METEO"] = "Voli annullati o rinviati per il meteo (anche vento e nebbia)."
    s3.put("tasks/email_triage/rules.json", json.dumps(rules, ensure_ascii=False))

    second = (await post(s3_client, headers)).json()
    assert second["prompt_version"] == first["prompt_version"]
    assert second["system_prompt"] == first["system_prompt"]
    (edited,) = (await s3_client.get("/api/tasks", headers=headers)).json()
    assert edited["version"] != task["version"]
    mail = {"from": "a@example.it", "body": "Il volo di domani è annullato per la nebbia?"}
    run = (await s3_client.post("/api/tasks/email_triage", json=mail, headers=headers)).json()
    assert run["pipeline_version"]["task_version"] == edited["version"]


@pytest.mark.parametrize("body", [BODY, BODY + b" "], ids=["wrong-secret", "body-altered"])
async def test_a_signature_that_does_not_match_is_told_by_its_header(s3_client, body):
    """It said "La firma del webhook manca, è scaduta o non corrisponde.": no header named,
    and an expiry where nothing had expired (a stale timestamp has its own message)."""
    sent = signed_headers("wrong" if body == BODY else SECRET, BODY)
    response = await post(s3_client, sent, body)
    assert response.status_code == 401
    message = response.json()["message"]
    assert (
        message.startswith(f"'{SIGNATURE_HEADER}' non corrisponde al corpo")
        and "scad" not in message
    )
