"""The 422 answer: it names the field at fault and never echoes a large input."""

from __future__ import annotations

import json
import math
from typing import Any

import httpx
import pytest
from fastapi.routing import APIRoute

from aircoach.bodies import CheckedJsonRoute
from aircoach.http_errors import MAX_ERRORS, bounded, bounded_errors
from aircoach.models import MAX_TOOLS
from tests.helpers import app_with, asgi_client


def test_bounded_cuts_strings_bytes_lists_and_objects():
    assert bounded("x" * 10_000) == "x" * 120 + "…"
    assert bounded(b"\xff" * 10_000).endswith("…") and len(bounded(b"\xff" * 10_000)) == 121
    assert bounded(list(range(100))) == [0, 1, 2, 3, 4, 5, 6, 7, "… 92 more"]
    shown = bounded({f"k{i}": True for i in range(10_000)})
    assert len(shown) == 9 and shown["…"] == "9992 more"
    assert bounded({"a": {"b": {"c": {"d": [1]}}}}) == {"a": {"b": {"c": "dict of 1 items"}}}
    assert bounded(None) is None and bounded(3) == 3 and bounded(True) is True


def test_bounded_numbers_are_json_numbers_or_text():
    assert [bounded(x) for x in (math.nan, math.inf, -math.inf)] == ["nan", "inf", "-inf"]
    json.dumps(bounded({"x": math.nan}), allow_nan=False)


def test_bounded_strings_are_always_encodable():
    text = bounded("ciao \ud800")
    assert text == "ciao \\ud800"
    text.encode("utf-8")


def _tree(width: int, key_chars: int, value_chars: int) -> dict[str, Any]:
    """Three levels of `width` members: every level of a preview filled."""
    leaf = {f"k{i:02d}" + "k" * key_chars: "v" * value_chars for i in range(width)}
    middle = {f"m{i:02d}" + "m" * key_chars: leaf for i in range(width)}
    return {f"t{i:02d}" + "t" * key_chars: middle for i in range(width)}


def test_a_preview_is_small_however_the_input_fills_its_levels():
    """8 items a level and 120 characters a string still made 8 x 8 x 8 strings: a 60 KB
    preview of one input."""
    shown = bounded(_tree(8, 120, 120))
    size = len(json.dumps(shown, ensure_ascii=False))
    assert size < 1_500, size
    # The first members are shown, down to a value; then how many were left out.
    first, rest = list(shown)
    assert first.startswith("t00") and shown[rest] == "7 more"
    leaf = next(iter(shown[first].values()))
    assert next(iter(leaf.values())) == "v" * 120


def test_a_huge_integer_is_shown_cut():
    assert bounded(10**4000) == "1" + "0" * 119 + "…"
    assert bounded(-(2**63)) == -(2**63) and bounded(2**64 - 1) == 2**64 - 1


def test_bounded_errors_lists_at_most_max_errors_and_counts_the_rest():
    errors = [
        {"type": "x", "loc": ("body", "tools", f"t{i}"), "msg": "m", "input": i} for i in range(50)
    ]
    shown = bounded_errors(errors)
    assert len(shown) == MAX_ERRORS + 1
    assert shown[-1]["type"] == "too_many_errors" and "30 more" in shown[-1]["msg"]


async def test_a_map_of_ten_thousand_unknown_tools_is_a_small_422(settings, auth):
    # 220 KB: past the default body limit (a 413), so the limit is raised to reach the 422.
    tools = {f"strumento_{i:05d}": True for i in range(10_000)}
    app = app_with(settings.model_copy(update={"max_body_bytes": 1_000_000}))
    async with asgi_client(app) as client:
        response = await client.post(
            "/api/stream_query", json={"query": "ciao", "tools": tools}, headers=auth()
        )
    assert response.status_code == 422
    assert len(response.content) < 4_000, len(response.content)
    (error,) = response.json()["detail"]
    assert error["loc"] == ["body", "tools"]
    assert f"at most {MAX_TOOLS} tool switches, got 10000" in error["msg"]


async def test_a_body_that_misses_fields_is_not_echoed_once_per_field(client, auth):
    """Each `missing` error's input is the whole body: a 48 KB body made a 191 KB 422."""
    body = json.dumps(_tree(8, 20, 60)).encode()
    assert len(body) > 45_000
    response = await client.post(
        "/api/quiz/answers", content=body, headers={**auth(), "Content-Type": "application/json"}
    )
    assert response.status_code == 422
    assert [e["loc"] for e in response.json()["detail"][:3]] == [
        ["body", "capitolo"],
        ["body", "numero"],
        ["body", "risposta"],
    ]
    assert len(response.content) < 16_000, len(response.content)


async def test_each_unknown_tool_is_reported_alone(client, auth):
    tools = {f"nope_{i:02d}": True for i in range(MAX_TOOLS)}
    response = await client.post(
        "/api/stream_query", json={"query": "ciao", "tools": tools}, headers=auth()
    )
    assert response.status_code == 422
    detail = response.json()["detail"]
    assert len(detail) == MAX_ERRORS + 1
    assert detail[0]["loc"] == ["body", "tools", "nope_00"] and detail[0]["input"] == "nope_00"
    assert len(response.content) < 10_000, len(response.content)


async def test_a_long_tool_name_is_refused_without_echoing_it(client, auth):
    name = "n" * 5_000
    response = await client.post(
        "/api/stream_query", json={"query": "ciao", "tools": {name: True}}, headers=auth()
    )
    assert response.status_code == 422
    assert name not in response.text and len(response.content) < 2_000


async def test_a_huge_query_is_refused_without_echoing_it(client, auth):
    response = await client.post("/api/stream_query", json={"query": "q" * 60_000}, headers=auth())
    assert response.status_code == 422
    (error,) = response.json()["detail"]
    assert error["loc"] == ["body", "query"] and error["type"] == "string_too_long"
    assert len(response.content) < 2_000


@pytest.mark.parametrize("query", ["ciao \ud800", "\udfff", "a\ud83d"])
async def test_a_lone_surrogate_is_a_422_not_a_500(client, auth, query):
    body = json.dumps({"query": query}).encode()  # JSON escapes it: \ud800
    response = await client.post(
        "/api/stream_query",
        content=body,
        headers={**auth(), "Content-Type": "application/json"},
    )
    assert response.status_code == 422, response.text
    assert response.json()["detail"]


async def test_an_unhandled_error_is_a_json_500_with_cors_and_a_request_id(app, caplog):
    """Starlette's last resort is text/plain, outside CORS and the request id."""

    async def broken() -> None:
        raise RuntimeError("a bug with a secret: hunter2")

    app.add_api_route("/api/broken", broken)
    transport = httpx.ASGITransport(app=app, raise_app_exceptions=False)
    async with httpx.AsyncClient(transport=transport, base_url="http://127.0.0.1:8000") as c:
        response = await c.get("/api/broken", headers={"Origin": "https://app.example"})
    assert response.status_code == 500
    assert response.json() == {
        "error": "internal_error",
        "message": "Si è verificato un errore da parte nostra.",
    }
    assert response.headers["access-control-allow-origin"]
    assert response.headers["x-request-id"]
    assert "hunter2" not in response.text
    assert any("-> 500 unhandled" in r.getMessage() and r.exc_info for r in caplog.records)


def test_every_route_whose_body_fastapi_parses_checks_it_first(app):
    """A body FastAPI parses itself skips `parse_json_body`: its router must use
    `CheckedJsonRoute` (depth, size and non-finite numbers are checked before any model)."""
    unchecked = [
        route.path
        for route in app.routes
        if isinstance(route, APIRoute)
        and route.body_field is not None
        and not isinstance(route, CheckedJsonRoute)
    ]
    assert unchecked == []


def test_every_route_whose_body_fastapi_parses_checks_the_token_first(app):
    """FastAPI reads a body it parses before it resolves any dependency: a route that needs a
    user must verify the token before that (`UserJsonRoute`), or an anonymous body is read."""
    from aircoach.deps import UserJsonRoute, current_user

    def needs_user(dependant) -> bool:
        return any(d.call is current_user or needs_user(d) for d in dependant.dependencies)

    unguarded = [
        route.path
        for route in app.routes
        if isinstance(route, APIRoute)
        and route.body_field is not None
        and needs_user(route.dependant)
        and not isinstance(route, UserJsonRoute)
    ]
    assert unguarded == []


@pytest.mark.parametrize(
    ("method", "path", "allowed"),
    [
        ("DELETE", "/api/exams", "GET, POST"),  # said "POST" alone: the first route's
        ("POST", "/api/memory", "DELETE, GET"),
        ("PUT", "/api/stream_query", "POST"),
    ],
)
async def test_a_405_allows_every_method_of_the_path(client, auth, method, path, allowed):
    response = await client.request(method, path, headers=auth())
    assert response.status_code == 405
    assert response.json()["error"] == "method_not_allowed"
    assert response.headers["allow"] == allowed
