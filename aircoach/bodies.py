"""Request bodies: a size limit checked as the body streams in, and JSON parsed into a model
only when a route asks for it (after its authentication).

Every route gets `MAX_BODY_BYTES` (64 KB by default; the largest valid chat body is about
16 KB). A route that needs more declares it on its endpoint, in one line: a number of bytes,
or the name of the setting that holds it:

    @router.post("/tasks/{task}/batch")
    @max_body_bytes("task_batch_max_body_bytes")
    async def run_batch(...): ...

A declared `Content-Length` over the limit is refused before any of the body is read; a body
sent without one (chunked) is counted as it arrives and refused as soon as it passes the
limit. Either way the answer is `413 body_too_large` and the rest is never read. A route that
never reads its body pays nothing (the server discards it).

FastAPI (0.16x) has a `max_body_size` of its own; it is not used because its 413 is plain
text, or `{"detail"}`, sent outside the CORS middleware, where this API answers every error
as `{"error", "message"}` a browser client can read.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any, TypeVar

from fastapi import Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from pydantic import BaseModel, ValidationError
from starlette.datastructures import Headers
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from aircoach.errors import BodyTooLarge
from aircoach.messages import header_language

F = TypeVar("F", bound=Callable[..., Any])
M = TypeVar("M", bound=BaseModel)

_LIMIT_ATTRIBUTE = "max_body_bytes"


def max_body_bytes(limit: int | str) -> Callable[[F], F]:
    """Declare a route's own body limit (above or below `MAX_BODY_BYTES`): bytes, or the name
    of the setting that holds them."""
    if isinstance(limit, int) and limit < 0:
        raise ValueError(f"a body limit must be >= 0, got {limit!r}")

    def declare(endpoint: F) -> F:
        setattr(endpoint, _LIMIT_ATTRIBUTE, limit)
        return endpoint

    return declare


def route_limit(scope: Scope, default: int, settings: object = None) -> int:
    """The limit of the route the request was routed to (known once the router matched,
    which is before any route reads its body), else `default`."""
    route = scope.get("route")
    endpoint = getattr(route, "endpoint", None)
    declared = getattr(endpoint, _LIMIT_ATTRIBUTE, None)
    if isinstance(declared, str):
        declared = getattr(settings, declared)
    return declared if isinstance(declared, int) else default


class BodyLimit:
    """ASGI middleware: `413 body_too_large` for a body over its route's limit. `settings`
    resolves the limits routes declare by a setting's name."""

    def __init__(self, app: ASGIApp, *, default: int, settings: object = None):
        self.app = app
        self.default = default
        self.settings = settings

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        refused: BodyTooLarge | None = None
        started = False
        received = 0

        async def limited_receive() -> Message:
            nonlocal refused, received
            if refused is not None:
                raise refused
            limit = route_limit(scope, self.default, self.settings)
            declared = _content_length(scope)
            if declared is not None and declared > limit:
                refused = BodyTooLarge(limit)
                raise refused
            message = await receive()
            if message["type"] == "http.request":
                received += len(message.get("body", b""))
                if received > limit:
                    refused = BodyTooLarge(limit)
                    raise refused
            return message

        async def guarded_send(message: Message) -> None:
            nonlocal started
            # Whatever the app answers about a body it did not get whole (FastAPI turns a
            # failed read into a 400), the 413 is the answer.
            if refused is not None and not started:
                return
            if message["type"] == "http.response.start":
                started = True
            await send(message)

        try:
            await self.app(scope, limited_receive, guarded_send)
        except BodyTooLarge:
            if started:
                raise
        if refused is not None and not started:
            message = refused.message_in(header_language(Headers(scope=scope)))
            response = JSONResponse(
                {"error": refused.code, "message": message}, status_code=refused.status
            )
            await response(scope, receive, send)


def _content_length(scope: Scope) -> int | None:
    for name, value in scope["headers"]:
        if name == b"content-length":
            try:
                return int(value)
            except ValueError:
                return None
    return None


async def read_json_body(request: Request) -> Any:
    """The body as JSON (any shape), or the 422 FastAPI gives for a body it cannot decode."""
    raw = await request.body()
    try:
        return json.loads(raw)
    except json.JSONDecodeError as exc:
        raise _not_json(exc.pos, exc.msg) from None
    except UnicodeDecodeError as exc:
        raise _not_json(exc.start, exc.reason) from None


def _not_json(position: int, reason: str) -> RequestValidationError:
    return RequestValidationError(
        [
            {
                "type": "json_invalid",
                "loc": ("body", position),
                "msg": "JSON decode error",
                "input": {},
                "ctx": {"error": reason},
            }
        ]
    )


async def parse_json_body(request: Request, model: type[M]) -> M:
    """The body as `model`, or a 422 naming the fields at fault (loc `["body", ...]`)."""
    raw = await request.body()
    try:
        return model.model_validate_json(raw)
    except ValidationError as exc:
        errors = [
            {**error, "loc": ("body", *error["loc"])} for error in exc.errors(include_url=False)
        ]
        raise RequestValidationError(errors) from None


def json_body_openapi(model: type[BaseModel]) -> dict[str, Any]:
    """The OpenAPI `requestBody` of a route that parses `model` itself (`parse_json_body`),
    for the route's `openapi_extra`."""
    return {
        "requestBody": {
            "required": True,
            "content": {"application/json": {"schema": model.model_json_schema()}},
        }
    }
