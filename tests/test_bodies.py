"""Request bodies: 413 past the route's limit without reading the rest, and the chat body
parsed only after the token verified."""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import Any

import pytest
from fastapi import APIRouter, FastAPI
from fastapi.exceptions import RequestValidationError
from pydantic import BaseModel

from aircoach.auth import webhook
from aircoach.bodies import BodyLimit, load_json, max_body_bytes
from aircoach.errors import AppError
from tests.helpers import app_with, asgi_client, chat, services_of
from tests.scripted_model import text

CHUNK = 16 * 1024


class Sent:
    """One request driven straight through the ASGI interface, so the test sees how much of
    the body the app pulled."""

    def __init__(self) -> None:
        self.pulled = 0
        self.status: int | None = None
        self.headers: dict[str, str] = {}
        self.body = b""

    @property
    def json(self) -> Any:
        return json.loads(self.body)


async def send(
    app: Any,
    path: str,
    chunks: Iterable[bytes],
    *,
    headers: dict[str, str] | None = None,
    content_length: int | None = None,
    method: str = "POST",
) -> Sent:
    sent = Sent()
    pending = iter(chunks)
    raw_headers = [(k.lower().encode(), v.encode()) for k, v in (headers or {}).items()]
    if content_length is not None:
        raw_headers.append((b"content-length", str(content_length).encode()))
    scope = {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": method,
        "scheme": "http",
        "path": path,
        "raw_path": path.encode(),
        "query_string": b"",
        "root_path": "",
        "headers": raw_headers,
        "client": ("127.0.0.1", 1),
        "server": ("t", 80),
    }

    async def receive() -> dict[str, Any]:
        chunk = next(pending, None)
        if chunk is None:
            return {"type": "http.request", "body": b"", "more_body": False}
        sent.pulled += len(chunk)
        return {"type": "http.request", "body": chunk, "more_body": True}

    async def reply(message: dict[str, Any]) -> None:
        if message["type"] == "http.response.start":
            sent.status = message["status"]
            sent.headers = {k.decode(): v.decode() for k, v in message["headers"]}
        elif message["type"] == "http.response.body":
            sent.body += message.get("body", b"")

    await app(scope, receive, reply)
    return sent


def endless() -> Iterable[bytes]:
    while True:
        yield b"x" * CHUNK


def ten_megabytes() -> Iterable[bytes]:
    return (b"x" * CHUNK for _ in range(10 * 1024 * 1024 // CHUNK))


async def test_a_declared_length_over_the_limit_is_refused_before_reading(app, auth):
    sent = await send(
        app, "/api/stream_query", ten_megabytes(), headers=auth(), content_length=10 * 2**20
    )
    assert sent.status == 413 and sent.pulled == 0
    assert sent.json == {
        "error": "body_too_large",
        "message": "Il corpo della richiesta supera 65536 byte.",
    }


async def test_a_chunked_body_is_cut_just_past_the_limit(app, auth):
    sent = await send(app, "/api/stream_query", endless(), headers=auth())
    assert sent.status == 413 and sent.json["error"] == "body_too_large"
    assert 64 * 1024 < sent.pulled <= 64 * 1024 + CHUNK


async def test_an_anonymous_chat_body_is_never_read(app):
    for length in (10 * 2**20, None):
        sent = await send(app, "/api/stream_query", ten_megabytes(), content_length=length)
        assert sent.pulled == 0
        assert sent.status in (401, 413)
    small = await send(app, "/api/stream_query", [b'{"query": "ciao"}'])
    assert small.status == 401 and small.pulled == 0 and small.json["error"] == "missing_token"


async def test_the_limit_is_a_setting(settings, auth):
    app = app_with(settings.model_copy(update={"max_body_bytes": 2048}))
    body = json.dumps({"query": "q" * 3000}).encode()
    sent = await send(app, "/api/stream_query", [body], headers=auth())
    assert sent.status == 413 and sent.json["message"].endswith("2048 byte.")


async def test_a_signed_webhook_body_over_the_limit_is_413(settings):
    secret = "s3cret"
    app = app_with(settings.model_copy(update={"update_docs_secret": secret}))
    body = b"x" * (100 * 1024)
    sent = await send(app, "/api/update_docs", [body], headers=webhook.signed_headers(secret, body))
    assert sent.status == 413 and sent.pulled <= 64 * 1024 + len(body)
    assert sent.json["error"] == "body_too_large"


async def test_the_413_carries_cors_headers(app, auth):
    headers = {**auth(), "Origin": "https://app.example"}
    sent = await send(app, "/api/stream_query", endless(), headers=headers)
    assert sent.status == 413 and sent.headers.get("access-control-allow-origin") == "*"


# --- a route's own limit (how e.g. a batch route declares 1 MB) ---


class Batch(BaseModel):
    items: list[str]


def limited_app() -> FastAPI:
    """Routes declared on a router and included, as the app's own are."""
    app = FastAPI()
    app.add_middleware(BodyLimit, default=1024)
    router = APIRouter(prefix="")

    async def app_error(request: Any, exc: Exception) -> Any:
        from fastapi.responses import JSONResponse

        assert isinstance(exc, AppError)
        return JSONResponse({"error": exc.code}, status_code=exc.status)

    app.add_exception_handler(AppError, app_error)

    @router.post("/small")
    async def small(batch: Batch) -> int:
        return len(batch.items)

    @router.post("/large")
    @max_body_bytes(100_000)
    async def large(batch: Batch) -> int:
        return len(batch.items)

    app.include_router(router)
    return app


def batch_of(size: int) -> bytes:
    return json.dumps({"items": ["x" * 100] * (size // 104)}).encode()


async def test_a_route_declares_its_own_limit_in_one_line():
    app = limited_app()
    body = batch_of(50_000)
    large = await send(app, "/large", [body], headers={"content-type": "application/json"})
    assert large.status == 200 and large.json == len(json.loads(body)["items"])
    small = await send(app, "/small", [body], headers={"content-type": "application/json"})
    assert small.status == 413
    too_large = await send(app, "/large", endless(), headers={"content-type": "application/json"})
    assert too_large.status == 413 and too_large.pulled <= 100_000 + CHUNK


async def test_a_fastapi_body_parameter_gets_413_not_400():
    # FastAPI turns a failed body read into a 400; the 413 still is the answer.
    sent = await send(
        limited_app(), "/small", endless(), headers={"content-type": "application/json"}
    )
    assert sent.status == 413 and sent.json == {
        "error": "body_too_large",
        "message": "Il corpo della richiesta supera 1024 byte.",
    }


async def test_routes_that_read_no_body_are_untouched(app):
    sent = await send(app, "/api/health", endless(), method="GET")
    assert sent.status == 200 and sent.pulled == 0


@pytest.mark.parametrize("digits", [310, 5_000])
async def test_an_integer_larger_than_any_float_is_a_422_naming_its_field(client, auth, digits):
    """JSON has no such number (as `1e400`); past 4,300 digits Python's parser raised a
    ValueError of its own, a 500, and below that the whole number was echoed."""
    body = b'{"capitolo": ' + b"9" * digits + b', "numero": 1, "risposta": "a"}'
    response = await client.post(
        "/api/quiz/answers",
        content=body,
        headers={**auth(), "Content-Type": "application/json"},
    )
    assert response.status_code == 422, response.text
    (error,) = response.json()["detail"]
    assert error["loc"] == ["body", "capitolo"] and error["type"] == "finite_number"
    assert "'capitolo'" in response.json()["message"]
    assert len(response.content) < 1_000, len(response.content)
    progress = (await client.get("/api/progress", headers=auth())).json()
    assert progress["risposte"] == 0


def test_load_json_refuses_a_huge_integer_anywhere_and_keeps_ordinary_ones():
    with pytest.raises(RequestValidationError) as refused:
        load_json(b'{"items": [1, 2, ' + b"-" + b"7" * 5_000 + b"]}")
    (error,) = refused.value.errors()
    assert error["loc"] == ("body", "items", 2) and error["type"] == "finite_number"
    assert load_json(b'{"n": -9007199254740993, "m": 0}') == {"n": -9007199254740993, "m": 0}


EN = {"Accept-Language": "en"}
PERMISSIONS = ["admin:docs", "tasks:email_triage", "tasks:review"]
# Every route that takes a JSON body, with the paths the test sends it to (ids that reach the
# body: an unknown turn is a 404 before its feedback is read).
JSON_ROUTES = {
    ("post", "/api/stream_query"): "/api/stream_query",
    ("post", "/api/chat"): "/api/chat",
    ("post", "/api/tasks/{task}"): "/api/tasks/email_triage",
    ("post", "/api/tasks/{task}/batch"): "/api/tasks/email_triage/batch",
    ("post", "/api/tasks/review/{review_id}/resolve"): "/api/tasks/review/r1/resolve",
    ("post", "/api/tasks/review/{review_id}/dismiss"): "/api/tasks/review/r1/dismiss",
    ("post", "/api/quiz/answers"): "/api/quiz/answers",
    ("post", "/api/exams"): "/api/exams",
    ("post", "/api/exams/{exam_id}/submit"): "/api/exams/e1/submit",
    ("post", "/api/turns/{turn_id}/feedback"): "/api/turns/{turn_id}/feedback",
}


def test_the_routes_that_take_json_are_all_listed(openapi_schema):
    taking_json = {
        (method, path)
        for path, operations in openapi_schema["paths"].items()
        for method, operation in operations.items()
        if "application/json" in operation.get("requestBody", {}).get("content", {})
    }
    assert taking_json == set(JSON_ROUTES)
    for method, path in JSON_ROUTES:
        assert "415" in openapi_schema["paths"][path][method]["responses"], (method, path)
        # Each has a body limit (`aircoach.bodies`): the quiz's answers and the exams' two
        # routes sent a 413 their schema did not declare.
        assert "413" in openapi_schema["paths"][path][method]["responses"], (method, path)


@pytest.mark.parametrize(
    "content_type",
    [None, "text/plain", "text/plain;charset=UTF-8", "application/x-www-form-urlencoded"],
)
async def test_a_body_not_declared_json_is_415_on_every_json_route(app, auth, content_type, script):
    """`curl -d` sends a form type, `fetch` with a string body `text/plain`, some clients
    none. The routes whose body FastAPI parses answered a 422 about `body`; the chat, tasks
    and feedback routes parsed it as JSON anyway."""
    script([text("Ciao.")])
    async with asgi_client(app) as client:
        turn = (await chat(client, auth(), "ciao"))[-1]
        headers = auth(permissions=PERMISSIONS)
        if content_type is not None:
            headers["Content-Type"] = content_type
        answers = {}
        for path in JSON_ROUTES.values():
            path = path.replace("{turn_id}", turn["turn_id"])
            answers[path] = await client.post(path, content=b'{"query": "ciao"}', headers=headers)
        english = await client.post(
            "/api/stream_query", content=b'{"query": "ciao"}', headers={**headers, **EN}
        )
    assert english.json()["message"] == (
        "The request body must be JSON, sent with the header Content-Type: application/json."
    )
    wrong = {p: (r.status_code, r.text[:80]) for p, r in answers.items() if r.status_code != 415}
    assert wrong == {}
    for response in answers.values():
        assert response.json() == {
            "error": "unsupported_media_type",
            "message": "Il corpo della richiesta deve essere JSON, con l'intestazione "
            "Content-Type: application/json.",
        }
    stored = await services_of(app).chats.history("user-1", limit=5, before=None)
    assert len(stored) == 1  # the turn asked as JSON, no other


@pytest.mark.parametrize(
    "content_type",
    [
        "application/json",
        "application/json; charset=utf-8",
        "Application/JSON",
        "application/vnd.api+json",
    ],
)
async def test_a_body_declared_json_is_read(client, auth, content_type):
    response = await client.post(
        "/api/quiz/answers",
        content=b'{"capitolo": 3, "numero": 1, "risposta": "b"}',
        headers={**auth(), "Content-Type": content_type},
    )
    assert response.status_code == 200, response.text


async def test_an_anonymous_body_not_declared_json_is_401(client):
    response = await client.post("/api/stream_query", content=b"query=ciao")
    assert response.status_code == 401
