"""The Mangum handler survives a warm container: two invocations in a row."""

from __future__ import annotations

from mangum import Mangum

from aircoach.app import create_app
from tests.lambda_events import chat_event, response_body
from tests.sse import parse_sse


def test_mangum_handler_answers_two_invocations_in_a_row(settings, token):
    handler = Mangum(create_app(settings), lifespan="off")
    for query in ("Dammi una domanda del capitolo 3", "Dammi una domanda del capitolo 5"):
        response = handler(chat_event(token("lambda-user"), query), {})
        assert response["statusCode"] == 200, response
        events = parse_sse(response_body(response))
        assert [e["type"] for e in events] == ["tool_result", "done"]
    assert events[-1]["context_turns"] == 1


def test_the_deployed_entry_points_build_the_app(monkeypatch, tmp_path, issuer, settings):
    import importlib

    monkeypatch.setenv("DATA_DIR", str(settings.data_dir))
    module = importlib.import_module("functions.chat")
    module = importlib.reload(module)
    token = issuer.mint("entry-user", audience=settings.auth0_audience)
    response = module.handler(chat_event(token, "Dammi una domanda del capitolo 1"), {})
    assert (
        response["statusCode"] == 200 and parse_sse(response_body(response))[-1]["type"] == "done"
    )
    vercel = importlib.reload(importlib.import_module("api.index"))
    assert "/api/stream_query" in vercel.app.openapi()["paths"]
