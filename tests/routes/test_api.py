"""Validation, authentication and the routes around the chat."""

from __future__ import annotations

import re
import subprocess
import sys
import time

import jwt
import pytest

from aircoach.settings import ROOT
from tests.helpers import app_with, asgi_client, chat
from tests.scripted_model import call, text


async def nothing_stored(app, sub="user-1"):
    assert await app.state.services.chats.history(sub, limit=5, before=None) == []


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"query": ""}, ["body", "query"]),
        ({"query": "x" * 4001}, ["body", "query"]),
        ({}, ["body", "query"]),
        ({"query": 42}, ["body", "query"]),
        ({"query": "ok", "stream": "maybe"}, ["body", "stream"]),
        ({"query": "ok", "stream": 1}, ["body", "stream"]),
        ({"query": "ok", "chat_history": 0}, ["body", "chat_history"]),
        ({"query": "ok", "user_data": "true"}, ["body", "user_data"]),
        ({"query": "ok", "tools": {"domanda_teoria": 1}}, ["body", "tools", "domanda_teoria"]),
        ({"query": "ok", "chat_history": [1]}, ["body", "chat_history"]),
        ({"query": "ok", "tools": ["domanda_teoria"]}, ["body", "tools"]),
        (
            {"query": "ok", "tools": {"domanda_teoria": "sometimes"}},
            ["body", "tools", "domanda_teoria"],
        ),
        ({"query": "ok", "tools": {"nope": True}}, ["body", "tools", "nope"]),
        ({"query": "   "}, ["body", "query"]),
        ({"query": "\n\t "}, ["body", "query"]),
        ({"query": "ok", "chat_histroy": False}, ["body", "chat_histroy"]),
        ({"query": "ok", "kb_search_enabled": "no"}, ["body", "kb_search_enabled"]),
        (
            {"query": "ok", "kb_search_enabled": False, "tools": {"kb_search": True}},
            ["body", "kb_search_enabled"],
        ),
    ],
)
async def test_bad_input_is_422_naming_the_field_and_nothing_is_stored(
    app, client, auth, body, field
):
    response = await client.post("/api/stream_query", json=body, headers=auth())
    assert response.status_code == 422, response.text
    assert field in [err["loc"] for err in response.json()["detail"]]
    await nothing_stored(app)


async def test_a_typo_in_a_field_name_is_named(client, auth):
    body = {"query": "ok", "chat_histroy": False}
    response = await client.post("/api/stream_query", json=body, headers=auth())
    assert response.json()["message"] == (
        "La richiesta non è valida: controlla il campo 'chat_histroy'."
    )
    conflict = {"query": "ok", "kb_search_enabled": False, "tools": {"kb_search": True}}
    response = await client.post("/api/stream_query", json=conflict, headers=auth())
    (error,) = response.json()["detail"]
    assert error["loc"] == ["body", "kb_search_enabled"]  # was ["body"]
    assert error["msg"] == "'kb_search_enabled' and tools['kb_search'] disagree; send only one"
    # A flat switch that is no boolean: said so (it was "Extra inputs are not permitted").
    for value in ("false", 0, None):
        body = {"query": "ok", "kb_search_enabled": value}
        response = await client.post("/api/stream_query", json=body, headers=auth())
        (error,) = response.json()["detail"]
        assert response.status_code == 422 and error["type"] == "bool_type"
        assert error["loc"] == ["body", "kb_search_enabled"] and error["input"] == value


async def test_unknown_tool_lists_the_valid_ones(client, auth):
    response = await client.post(
        "/api/stream_query", json={"query": "ok", "tools": {"nope": True}}, headers=auth()
    )
    valid = "['domanda_teoria', 'kb_search', 'lex_search', 'verifica_risposta', 'web_search']"
    assert f"unknown tool 'nope'; valid: {valid}" in response.json()["detail"][0]["msg"]


async def test_malformed_json_is_422(app, client, auth):
    headers = {**auth(), "Content-Type": "application/json"}
    response = await client.post("/api/stream_query", content=b'{"query": "x",', headers=headers)
    assert response.status_code == 422 and response.json()["detail"][0]["type"] == "json_invalid"
    await nothing_stored(app)


@pytest.mark.parametrize("path", ["/api/stream_query", "/api/chat"])
async def test_an_empty_body_is_a_422_saying_the_body_is_missing(app, client, auth, path):
    # As the routes FastAPI parses say it (the quiz's): not "non è un JSON valido".
    headers = {**auth(), "Content-Type": "application/json"}
    response = await client.post(path, content=b"", headers=headers)
    assert response.status_code == 422
    assert response.json()["detail"] == [
        {"type": "missing", "loc": ["body"], "msg": "Field required", "input": None}
    ]
    assert response.json()["message"] == "La richiesta non è valida: controlla il campo 'body'."
    await nothing_stored(app)


async def test_query_of_4000_characters_is_accepted(client, auth, script):
    script([text("ok")])
    assert (await chat(client, auth(), "x" * 4000))[-1]["type"] == "done"


async def test_old_clients_sending_only_query_still_work(client, auth, script):
    script([call("domanda_teoria")])
    events = await chat(client, auth(), "quiz")
    assert events[0]["type"] == "tool_result"


def _expect_401(response, reason: str | None = None):
    assert response.status_code == 401, response.text
    assert response.headers["www-authenticate"].startswith("Bearer")
    body = response.json()
    assert body["error"] in {"missing_token", "invalid_token"}
    if reason:
        assert reason in body["message"]


async def test_missing_token_is_401(app, client):
    _expect_401(await client.post("/api/stream_query", json={"query": "ciao"}))
    _expect_401(
        await client.post(
            "/api/stream_query", json={"query": "ciao"}, headers={"Authorization": "Basic abc"}
        )
    )
    await nothing_stored(app)


# Routes whose body FastAPI parses (their routers' `UserJsonRoute`): it reads a body before
# resolving any dependency, so the token has to be checked before that.
_PARSED_BODY_ROUTES = [
    "/api/quiz/answers",
    "/api/exams",
    "/api/exams/e1/submit",
    "/api/tasks/review/r1/resolve",
]


@pytest.mark.parametrize("path", _PARSED_BODY_ROUTES)
@pytest.mark.parametrize("body", [b"{", b"[" * 40 + b"]" * 40], ids=["malformed", "deep"])
async def test_an_anonymous_body_is_refused_before_it_is_read(client, auth, path, body):
    json_headers = {"Content-Type": "application/json"}
    _expect_401(await client.post(path, content=body, headers=json_headers))
    _expect_401(
        await client.post(
            path, content=body, headers={**json_headers, "Authorization": "Bearer x.y.z"}
        )
    )
    # With a valid token the body is read and refused as before; a route that needs a
    # permission the token lacks refuses it first, unread.
    response = await client.post(path, content=body, headers={**json_headers, **auth()})
    if path.startswith("/api/tasks/review/"):
        assert response.status_code == 403, response.text
        assert response.json()["error"] == "forbidden"
        granted = auth(permissions=["tasks:review"])
        response = await client.post(path, content=body, headers={**json_headers, **granted})
    assert response.status_code == 422, response.text


async def test_expired_token_is_401(client, token):
    expired = token(now=time.time() - 7200, ttl_s=60)
    response = await client.post(
        "/api/stream_query", json={"query": "ciao"}, headers={"Authorization": f"Bearer {expired}"}
    )
    _expect_401(response, "Token scaduto")  # Italian unless the client asks for English
    assert 'error_description="token expired"' in response.headers["www-authenticate"]


async def test_tampered_token_is_401(client, token):
    header, payload, signature = token("user-1").split(".")
    forged = jwt.utils.base64url_encode(
        b'{"sub":"admin","aud":"https://api.aircoach.dev"}'
    ).decode()
    for bad in (
        f"{header}.{forged}.{signature}",
        f"{header}.{payload}.{signature[:-4]}AAAA",
        "not-a-jwt",
    ):
        response = await client.post(
            "/api/stream_query", json={"query": "ciao"}, headers={"Authorization": f"Bearer {bad}"}
        )
        _expect_401(response)


async def test_wrong_audience_is_401(client, issuer):
    other = issuer.mint("user-1", audience="https://someone-else.example")
    response = await client.post(
        "/api/stream_query", json={"query": "ciao"}, headers={"Authorization": f"Bearer {other}"}
    )
    _expect_401(response, "audience")


async def test_token_from_another_key_is_401(client, settings, tmp_path):
    from aircoach.auth.tokens import DevIssuer

    stranger = DevIssuer(tmp_path / "other").mint("user-1", audience=settings.auth0_audience)
    response = await client.post(
        "/api/stream_query", json={"query": "ciao"}, headers={"Authorization": f"Bearer {stranger}"}
    )
    _expect_401(response)


async def test_health_needs_no_token_and_reports_backends(client):
    body = (await client.get("/api/health")).json()
    assert body["status"] == "ok" and body["store"]["backend"] == "sqlite"
    assert body["auth"]["source"] == "dev-issuer" and body["model"]["provider"] == "offline"


@pytest.mark.integration
def test_health_does_not_import_langgraph():
    code = (
        "import sys, httpx, asyncio\n"
        "from aircoach.app import create_app\n"
        "app = create_app()\n"
        "async def main():\n"
        "    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url='http://t') as c:\n"
        "        assert (await c.get('/api/health')).status_code == 200\n"
        "asyncio.run(main())\n"
        "print(sorted(m for m in sys.modules if m.startswith(('langgraph', 'langchain'))))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True
    )
    assert out.stdout.strip() == "[]"


async def test_tools_lists_name_description_default_and_source(client, auth):
    assert (await client.get("/api/tools")).status_code == 401
    tools = {t["name"]: t for t in (await client.get("/api/tools", headers=auth())).json()}
    assert set(tools) == {
        "domanda_teoria",
        "verifica_risposta",
        "web_search",
        "kb_search",
        "lex_search",
    }
    assert not any(tools[name]["available"] for name in ("web_search", "lex_search"))
    assert tools["kb_search"]["available"] and tools["kb_search"]["backend"] == "embedded"
    tool = tools["domanda_teoria"]
    assert tool["name"] == "domanda_teoria" and tool["default_enabled"] is True
    assert tool["source"] is False and tool["return_direct"] is True and tool["available"] is True
    assert tool["description"]


async def test_history_is_the_callers_own_newest_first_and_paginated(client, auth, script):
    script([text(f"a{i}") for i in range(5)])
    for i in range(3):
        await chat(client, auth("alice"), f"alice {i}")
    for i in range(2):
        await chat(client, auth("bob"), f"bob {i}")
    page = (await client.get("/api/history", params={"limit": 2}, headers=auth("alice"))).json()
    assert [t["human"] for t in page["turns"]] == ["alice 2", "alice 1"]
    rest = (
        await client.get(
            "/api/history",
            params={"limit": 2, "before": page["next_before"]},
            headers=auth("alice"),
        )
    ).json()
    assert [t["human"] for t in rest["turns"]] == ["alice 0"] and rest["next_before"] is None
    bob = (await client.get("/api/history", headers=auth("bob"))).json()
    assert {t["userId"] for t in bob["turns"]} == {"bob"} and len(bob["turns"]) == 2
    assert (
        await client.get("/api/history", params={"limit": 0}, headers=auth("bob"))
    ).status_code == 422


async def test_history_cursor_pages_exactly_and_refuses_a_forged_one(client, auth, script):
    script([text(f"a{i}") for i in range(5)])
    for i in range(5):
        await chat(client, auth("alice"), f"alice {i}")
    seen, params = [], {"limit": 2}
    while True:
        page = (await client.get("/api/history", params=params, headers=auth("alice"))).json()
        seen += [t["human"] for t in page["turns"]]
        if page["next_cursor"] is None:
            break
        assert re.fullmatch(r"[A-Za-z0-9_-]+", page["next_cursor"])  # URL-safe as it is
        params = {"limit": 2, "cursor": page["next_cursor"]}
    assert seen == [f"alice {i}" for i in reversed(range(5))]
    for bad in ("!!!", "abcde", "a+b/", "x" * 89, "", "a"):
        response = await client.get("/api/history", params={"cursor": bad}, headers=auth())
        assert response.status_code == 422, bad
        assert response.json()["detail"][0]["loc"] == ["query", "cursor"]


async def test_history_before_is_a_timestamp_even_sent_unencoded(client, auth, script):
    script([text(f"a{i}") for i in range(3)])
    for i in range(3):
        await chat(client, auth(), f"domanda {i}")
    page = (await client.get("/api/history", params={"limit": 1}, headers=auth())).json()
    stamp = page["next_before"]
    assert stamp.endswith("+00:00")
    raw = f"/api/history?limit=5&before={stamp}"  # the + becomes a space on the server
    rest = (await client.get(raw, headers=auth())).json()
    assert [t["human"] for t in rest["turns"]] == ["domanda 1", "domanda 0"]
    yesterday = await client.get("/api/history", params={"before": "yesterday"}, headers=auth())
    assert yesterday.status_code == 422
    assert yesterday.json()["detail"][0]["loc"] == ["query", "before"]
    both = {"before": stamp, "cursor": page["next_cursor"]}  # both bounds apply
    rest = (await client.get("/api/history", params=both, headers=auth())).json()
    assert [t["human"] for t in rest["turns"]] == ["domanda 1", "domanda 0"]


async def test_update_docs_needs_the_admin_permission(client, auth):
    assert (await client.post("/api/update_docs")).status_code == 401
    response = await client.post("/api/update_docs", headers=auth("user-1"))
    assert response.status_code == 403 and "admin:docs" in response.json()["message"]


async def test_update_docs_reloads_and_reports_the_version(settings, auth, tmp_path):
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "00_a.md").write_text("# Uno\nPrima versione del prompt.")
    app = app_with(settings.model_copy(update={"prompt_docs_dir": docs}))
    admin = auth("boss", permissions=["admin:docs"])
    async with asgi_client(app) as client:
        first = (await client.post("/api/update_docs", headers=admin)).json()
        (docs / "10_b.md").write_text("Seconda parte.")
        second = (await client.post("/api/update_docs", headers=admin)).json()
    assert first["docs_count"] == 1 and first["docs_details"][0]["key"] == "00_a.md"
    assert first["system_prompt"] == "# Uno\nPrima versione del prompt."
    assert second["previous_version"] == first["prompt_version"] != second["prompt_version"]
    assert second["docs_count"] == 2 and second["message"] == "prompt updated"
    assert second["system_prompt"].endswith("Seconda parte.")


async def test_the_api_docs_are_public_unless_switched_off(settings, client):
    assert (await client.get("/openapi.json")).status_code == 200
    assert (await client.get("/docs")).status_code == 200
    hidden = app_with(settings.model_copy(update={"api_docs": False}))
    async with asgi_client(hidden) as c:
        for path in ("/openapi.json", "/docs", "/redoc"):
            assert (await c.get(path)).status_code == 404
        assert (await c.get("/api/health")).status_code == 200
    assert "/api/stream_query" in hidden.openapi()["paths"]  # still built for tooling


def test_every_app_serves_the_route_modules_own_routes(settings):
    """The routes are built once per process, in their modules: an app adds them as they are.
    FastAPI's `include_router` wraps them again for each app and, on its first request,
    rebuilds every route's parameters and models (a third of the unit suite's CPU), then
    checks the routers' versions on every request."""
    from fastapi.routing import APIRoute

    from aircoach.routes import chat, quiz

    first, second = app_with(settings), app_with(settings)
    for app in (first, second):
        assert chat.router.routes[0] in app.routes and quiz.router.routes[-1] in app.routes
        assert all(r.__class__.__name__ != "_IncludedRouter" for r in app.routes)
        assert sum(isinstance(r, APIRoute) for r in app.routes) >= 40


def test_every_documented_400_and_422_is_the_error_body_the_api_sends(openapi_schema):
    """Every 400 and 422 is `{"error", "message", ...}` (aircoach/http_errors.py). FastAPI
    documented the 422 of a route that declares none as its own `{"detail": [...]}`, and the
    400 some routes declared was `{"detail": string}`: a generated client had no `message`."""
    schema = openapi_schema
    components = schema["components"]["schemas"]

    def resolve(node):
        while "$ref" in node:
            node = components[node["$ref"].rsplit("/", 1)[1]]
        return node

    wrong = []
    for path, operations in schema["paths"].items():
        for method, operation in operations.items():
            for status in ("400", "422"):
                response = operation["responses"].get(status)
                if response is None:
                    continue
                if "content" not in response:  # said in words only: a client gets no type
                    wrong.append(f"{method.upper()} {path} {status} (no schema)")
                    continue
                body = resolve(response["content"]["application/json"]["schema"])
                for branch in body.get("anyOf", [body]):
                    properties = resolve(branch).get("properties", {})
                    if not {"error", "message"} <= set(properties):
                        wrong.append(f"{method.upper()} {path} {status}")
                    # `detail` lists `ValidationIssue`s: the task routes' listed bare objects,
                    # so a generated client had `unknown` for each issue's `loc` and `msg`.
                    items = properties.get("detail", {}).get("items")
                    if items is not None and items != {
                        "$ref": "#/components/schemas/ValidationIssue"
                    }:
                        wrong.append(f"{method.upper()} {path} {status} (untyped detail)")
    assert wrong == []
    validation = resolve(schema["paths"]["/api/quiz/answers"]["post"]["responses"]["422"])
    body = resolve(validation["content"]["application/json"]["schema"])
    issue = resolve(body["properties"]["detail"]["items"])
    assert {"loc", "msg", "type", "input"} <= set(issue["properties"])


def _components_reached(node, components, reached):
    """The names of the component schemas `node` refers to, directly or through others."""
    if isinstance(node, dict):
        ref = node.get("$ref", "")
        name = ref.rsplit("/", 1)[-1]
        if ref and name not in reached:
            reached.add(name)
            _components_reached(components[name], components, reached)
        for value in node.values():
            _components_reached(value, components, reached)
    elif isinstance(node, list):
        for value in node:
            _components_reached(value, components, reached)
    return reached


def test_every_response_field_is_required_and_request_defaults_stay_optional(openapi_schema):
    """The API sends every field of a body it answers, defaulted ones too (`ResponseModel`).
    The schema listed those as optional (`MessageResponse.errors`, `HistoryPage.next_cursor`,
    `Progress.prontezza`...), so a client generated from it handled `undefined` for data that
    is never missing. A request body keeps its defaults optional: a client may omit them."""
    components = openapi_schema["components"]["schemas"]
    operations = [op for ops in openapi_schema["paths"].values() for op in ops.values()]
    sent = _components_reached([op["responses"] for op in operations], components, set())
    sent |= _components_reached({"$ref": "StreamEvent"}, components, set())
    received = _components_reached(
        [[op.get("requestBody"), op.get("parameters")] for op in operations], components, set()
    )
    assert {"MessageResponse", "HistoryTurn", "Done", "CitationCheck"} <= sent
    optional = {
        f"{name}.{field}"
        for name in sent
        for field in components[name].get("properties", {})
        if field not in components[name].get("required", [])
    }
    assert optional == {"ValidationIssue.ctx"}  # sent only for the issues that have one
    assert {"errors", "grounding", "tool"} <= set(components["MessageResponse"]["required"])
    # No model is split into an `-Input` and an `-Output` schema, and requests are unchanged.
    assert sent.isdisjoint(received)
    assert not [name for name in components if name.endswith(("-Input", "-Output"))]
    chat_body = openapi_schema["paths"]["/api/stream_query"]["post"]["requestBody"]
    assert chat_body["content"]["application/json"]["schema"]["required"] == ["query"]
    assert "required" not in components["ExamRequest"]
    assert "required" not in components["ResolveRequest"]


@pytest.mark.parametrize(
    ("method", "path"),
    [
        ("GET", "/api/tools/"),
        ("GET", "/api/exams/%2F"),
        ("GET", "/api/tasks/runs/%2F"),
        ("DELETE", "/api/conversations/%2F"),
        ("POST", "/api/tasks/%2F"),
    ],
)
async def test_a_path_with_a_trailing_or_encoded_slash_is_404_not_a_redirect(
    client, auth, method, path
):
    """No route ends with `/`, and an id is never `/`: such a path is not found. A 307 to the
    path without the slash sent the request (method and body kept) to another route."""
    response = await client.request(method, path, headers=auth())
    assert response.status_code == 404, response.text
    assert "location" not in response.headers
    assert response.json()["error"] == "not_found"


async def test_deleting_the_memory_item_slash_removes_nothing(client, auth, script):
    """`DELETE /api/memory/%2F` was redirected (307 keeps the method) to `DELETE /api/memory`,
    which removes everything the coach remembers of the caller."""
    script([text("Il QNH è la pressione al livello del mare.")])
    await chat(client, auth(), "Studio per il VDS. Cos'è il QNH?")
    before = (await client.get("/api/memory", headers=auth())).json()["items"]
    assert before
    for path in ("/api/memory/%2F", "/api/memory/"):
        response = await client.delete(path, headers=auth(), follow_redirects=True)
        assert response.status_code == 404, response.text
    assert (await client.get("/api/memory", headers=auth())).json()["items"] == before


def test_a_route_without_a_body_does_not_document_a_body_in_its_422(openapi_schema):
    """`GET /api/history`'s 422 said "The body is not JSON": its client sends none, and a
    developer reading why a page was refused looked for one."""
    said_body = [
        f"{method.upper()} {path}"
        for path, operations in openapi_schema["paths"].items()
        for method, operation in operations.items()
        if "requestBody" not in operation
        and "body" in operation["responses"].get("422", {}).get("description", "").lower()
    ]
    assert said_body == []


def test_every_idempotency_header_is_named_idempotency_key(openapi_schema):
    """A generated client names a header parameter as the schema spells it: the task route's
    was `idempotency-key` (FastAPI's spelling of the parameter `idempotency_key`) beside the
    quiz's `Idempotency-Key`, so one client had two names for one header."""
    spelled = {
        f"{method.upper()} {path}": parameter["name"]
        for path, operations in openapi_schema["paths"].items()
        for method, operation in operations.items()
        for parameter in operation.get("parameters", [])
        if parameter["in"] == "header" and parameter["name"].lower() == "idempotency-key"
    }
    assert {"POST /api/tasks/{task}", "POST /api/quiz/answers", "POST /api/stream_query"} <= set(
        spelled
    )
    assert set(spelled.values()) == {"Idempotency-Key"}, spelled
