"""The Mangum handler survives a warm container: two invocations in a row."""

from __future__ import annotations

import gc

import pytest
from mangum import Mangum

from aircoach.app import create_app
from aircoach.errors import ConfigError
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
    assert gc.isenabled()  # paused while the app was built (aircoach/startup.py), on again
    token = issuer.mint("entry-user", audience=settings.auth0_audience)
    response = module.handler(chat_event(token, "Dammi una domanda del capitolo 1"), {})
    assert (
        response["statusCode"] == 200 and parse_sse(response_body(response))[-1]["type"] == "done"
    )
    vercel = importlib.reload(importlib.import_module("api.index"))
    assert "/api/stream_query" in vercel.app.openapi()["paths"]
    assert gc.isenabled()


def test_the_gateway_handler_refuses_a_turn_cap_the_gateway_would_cut(settings):
    from functions.chat import check_gateway_timeout

    on_lambda = {"AWS_LAMBDA_FUNCTION_NAME": "aircoach-api-prod-api"}
    default = settings.model_copy(update={"turn_timeout_s": 45.0, "store_timeout_s": 5.0})
    with pytest.raises(ConfigError, match=r"TURN_TIMEOUT_S=45 is above 25 s") as refused:
        check_gateway_timeout(default, on_lambda)
    assert "STORE_TIMEOUT_S=5" in str(refused.value)
    slow_store = settings.model_copy(update={"turn_timeout_s": 25.0, "store_timeout_s": 8.0})
    with pytest.raises(ConfigError, match=r"TURN_TIMEOUT_S=25 is above 22 s"):
        check_gateway_timeout(slow_store, on_lambda)
    fits = settings.model_copy(update={"turn_timeout_s": 25.0, "store_timeout_s": 5.0})
    check_gateway_timeout(fits, on_lambda)
    check_gateway_timeout(default, {})  # off Lambda (tests, a laptop): any cap goes


def test_the_gateway_entry_does_not_start_on_lambda_with_the_default_cap(monkeypatch, settings):
    import importlib

    import functions.chat

    monkeypatch.setenv("DATA_DIR", str(settings.data_dir))
    monkeypatch.setenv("AWS_LAMBDA_FUNCTION_NAME", "aircoach-api-prod-api")
    monkeypatch.setenv("AUTH0_DOMAIN", "tenant.example")
    monkeypatch.setenv("STORE", "sqlite")
    monkeypatch.setenv("MODEL_PROVIDER", "offline")
    monkeypatch.setenv("LOG_FORMAT", "text")  # JSON would stop app logs reaching caplog later
    with pytest.raises(ConfigError, match="TURN_TIMEOUT_S=45"):
        importlib.reload(functions.chat)
    assert gc.isenabled()  # a refused start leaves the collector on
    monkeypatch.setenv("TURN_TIMEOUT_S", "25")
    assert importlib.reload(functions.chat).handler is not None
