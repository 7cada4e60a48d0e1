"""The Mangum handler survives a warm container: two invocations in a row."""

from __future__ import annotations

import base64
import json

from mangum import Mangum

from aircoach.app import create_app
from tests.sse import parse_sse


def _event(body: dict, token: str) -> dict:
    raw = json.dumps(body)
    return {
        "version": "2.0",
        "routeKey": "$default",
        "rawPath": "/api/stream_query",
        "rawQueryString": "",
        "headers": {
            "content-type": "application/json",
            "authorization": f"Bearer {token}",
            "host": "x.lambda-url.eu-west-1.on.aws",
        },
        "requestContext": {
            "accountId": "123",
            "apiId": "api",
            "domainName": "x",
            "domainPrefix": "x",
            "http": {
                "method": "POST",
                "path": "/api/stream_query",
                "protocol": "HTTP/1.1",
                "sourceIp": "127.0.0.1",
                "userAgent": "test",
            },
            "requestId": "r",
            "routeKey": "$default",
            "stage": "$default",
            "time": "22/Nov/2026:10:00:00 +0000",
            "timeEpoch": 1795000000000,
        },
        "body": raw,
        "isBase64Encoded": False,
    }


def _body(response: dict) -> str:
    body = response["body"]
    return base64.b64decode(body).decode() if response.get("isBase64Encoded") else body


def test_mangum_handler_answers_two_invocations_in_a_row(settings, token):
    handler = Mangum(create_app(settings), lifespan="off")
    for query in ("Dammi una domanda del capitolo 3", "Dammi una domanda del capitolo 5"):
        response = handler(_event({"query": query}, token("lambda-user")), {})
        assert response["statusCode"] == 200, response
        events = parse_sse(_body(response))
        assert [e["type"] for e in events] == ["tool_result", "done"]
    assert events[-1]["context_turns"] == 1


def test_the_deployed_entry_points_build_the_app(monkeypatch, tmp_path, issuer, settings):
    import importlib

    monkeypatch.setenv("DATA_DIR", str(settings.data_dir))
    module = importlib.import_module("functions.chat")
    module = importlib.reload(module)
    token = issuer.mint("entry-user", audience=settings.auth0_audience)
    response = module.handler(_event({"query": "Dammi una domanda del capitolo 1"}, token), {})
    assert response["statusCode"] == 200 and parse_sse(_body(response))[-1]["type"] == "done"
    vercel = importlib.reload(importlib.import_module("api.index"))
    assert "/api/stream_query" in vercel.app.openapi()["paths"]
