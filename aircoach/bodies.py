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

Every JSON body is checked before any model is built from it (`load_json`): at most
`MAX_JSON_DEPTH` levels of nesting and `MAX_JSON_ITEMS` values, and no non-finite number
(`NaN`, `Infinity`, `1e400`, or an integer larger than any float: JSON has none, Python's parser
accepts them, a NaN in a 422's echo was a 500, and so was an integer past Python's 4,300 digits).
Each is a 422 naming the place at fault. Routes whose body FastAPI parses get
the check from `CheckedJsonRoute`; `parse_json_body` and `read_json_body` do it themselves.

A body must also say it is JSON: `Content-Type: application/json` (or `application/*+json`,
any parameters). Any other, or none, is `415 unsupported_media_type` on every JSON route,
once the body has been read (after the token, and after the 413 of a body too large). FastAPI
parses a body it is given only under a JSON type (its `strict_content_type`: a browser sends
a body as `text/plain`, or with no type, without asking the server first, and `curl -d` sends
`application/x-www-form-urlencoded`), so the routes whose body it parses refused the others
with a 422 about `body`, while the routes that parse their own accepted them as JSON.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Coroutine
from typing import Any, TypeVar

import anyio
from fastapi import Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from fastapi.routing import APIRoute
from pydantic import BaseModel, ValidationError
from starlette.datastructures import Headers
from starlette.responses import Response
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from aircoach.errors import BodyTooLarge, UnsupportedMediaType
from aircoach.messages import header_language

F = TypeVar("F", bound=Callable[..., Any])
M = TypeVar("M", bound=BaseModel)

_LIMIT_ATTRIBUTE = "max_body_bytes"
_MESSAGE_ATTRIBUTE = "max_body_bytes_message"


def max_body_bytes(limit: int | str, *, message: str | None = None) -> Callable[[F], F]:
    """Declare a route's own body limit (above or below `MAX_BODY_BYTES`): bytes, or the name
    of the setting that holds them; `message`: the catalogue key of its 413's text, when the
    route has something to add to `body_too_large`'s (the code stays `body_too_large`)."""
    if isinstance(limit, int) and limit < 0:
        raise ValueError(f"a body limit must be >= 0, got {limit!r}")

    def declare(endpoint: F) -> F:
        setattr(endpoint, _LIMIT_ATTRIBUTE, limit)
        if message is not None:
            setattr(endpoint, _MESSAGE_ATTRIBUTE, message)
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


def _too_large(scope: Scope, limit: int) -> BodyTooLarge:
    """The 413 of the route the request was routed to, with its own message if it has one."""
    endpoint = getattr(scope.get("route"), "endpoint", None)
    return BodyTooLarge(limit, getattr(endpoint, _MESSAGE_ATTRIBUTE, None))


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
                refused = _too_large(scope, limit)
                raise refused
            message = await receive()
            if message["type"] == "http.request":
                received += len(message.get("body", b""))
                if received > limit:
                    refused = _too_large(scope, limit)
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


MAX_JSON_DEPTH = 32  # levels of nesting in one body (our deepest valid body has 5)
MAX_JSON_ITEMS = 20_000  # values in one body: object members and array items, nested ones too


class _NonFinite:
    """Stands in for a number JSON cannot hold while the body is parsed; `load_json` then
    names where it was."""

    def __init__(self, text: str):
        self.text = text


def _number(text: str) -> float | _NonFinite:
    value = float(text)
    return value if math.isfinite(value) else _NonFinite(text)


_FLOAT_BITS = 1024  # an integer of more bits is larger than any float
_FLOAT_DIGITS = 309  # an integer of more digits is larger than any float


def _integer(text: str) -> int | _NonFinite:
    if len(text.lstrip("-")) > _FLOAT_DIGITS:
        return _NonFinite(text)
    return int(text)


def _parse(raw: bytes | str, parse_int: Callable[[str], Any] | None = None) -> Any:
    return json.loads(raw, parse_constant=_NonFinite, parse_float=_number, parse_int=parse_int)


def load_json(
    raw: bytes | str, *, max_depth: int = MAX_JSON_DEPTH, max_items: int = MAX_JSON_ITEMS
) -> Any:
    """`raw` as JSON, or a 422 (`RequestValidationError`) when it is not JSON, nests deeper
    than `max_depth`, holds more than `max_items` values, or holds a non-finite number. The
    parse is the C parser's; the walk that checks the result stops at the first fault, so a
    body made to be expensive (380,000 unknown keys, 100,000 levels) costs one parse."""
    try:
        try:
            data = _parse(raw)
        except ValueError as exc:
            if isinstance(exc, json.JSONDecodeError | UnicodeDecodeError):
                raise
            # An integer past Python's 4,300 digits: parsed again, each integer looked at (a
            # Python call per integer, paid only here), so that the walk names its place.
            data = _parse(raw, _integer)
    except json.JSONDecodeError as exc:
        raise _not_json(exc.pos, exc.msg) from None
    except UnicodeDecodeError as exc:
        raise _not_json(exc.start, exc.reason) from None
    except RecursionError:
        raise _refused((), "json_too_deep", f"JSON nested deeper than {max_depth} levels") from None
    _check_parsed(data, max_depth, max_items)
    return data


def _check_parsed(data: Any, max_depth: int, max_items: int) -> None:
    stack: list[tuple[Any, tuple[str | int, ...]]] = [(data, ())]
    items = 0
    while stack:
        value, path = stack.pop()
        if isinstance(value, _NonFinite):
            raise _refused(path, "finite_number", "Input should be a finite number", value.text)
        if type(value) is int and value.bit_length() > _FLOAT_BITS:
            raise _refused(path, "finite_number", "Input should be a finite number", value)
        if not isinstance(value, dict | list) or not value:
            continue
        if len(path) >= max_depth:
            raise _refused(path, "json_too_deep", f"JSON nested deeper than {max_depth} levels")
        items += len(value)
        if items > max_items:
            raise _refused((), "json_too_many_items", f"JSON with more than {max_items} values")
        pairs = value.items() if isinstance(value, dict) else enumerate(value)
        stack.extend((item, (*path, key)) for key, item in pairs)


def _refused(
    path: tuple[str | int, ...], kind: str, reason: str, given: Any = None
) -> RequestValidationError:
    # The place is cut: a path 30 levels deep would be a long message for nothing.
    return RequestValidationError(
        [{"type": kind, "loc": ("body", *path[:8]), "msg": reason, "input": given}]
    )


def is_json_media_type(content_type: str | None) -> bool:
    """Whether a `Content-Type` value says JSON: `application/json` or `application/*+json`,
    with any parameters (`; charset=utf-8`)."""
    media_type = (content_type or "").split(";", 1)[0].strip().lower()
    main, _, sub = media_type.partition("/")
    return main == "application" and (sub == "json" or sub.endswith("+json"))


def _require_json(request: Request, raw: bytes) -> None:
    """415 for a body that is not declared JSON. An empty body is left to the model (a 422
    naming what is missing), as FastAPI leaves it."""
    if raw and not is_json_media_type(request.headers.get("content-type")):
        raise UnsupportedMediaType()


# A body larger than this is parsed in a worker thread: a 4 MB batch takes the C parser
# some 100 ms, which the event loop would spend on one request.
_INLINE_PARSE_BYTES = 128 * 1024


async def read_json_body(request: Request) -> Any:
    """The body as JSON (any shape), checked (`load_json`); 415 when it is not declared
    JSON."""
    raw = await request.body()
    _require_json(request, raw)
    if len(raw) > _INLINE_PARSE_BYTES:
        return await anyio.to_thread.run_sync(load_json, raw)
    return load_json(raw)


class CheckedJsonRoute(APIRoute):
    """A route whose JSON body FastAPI parses gets it checked by `load_json` first. The parsed
    body is left where Starlette's `Request.json()` caches it, so it is parsed once; a failure
    raised from inside `Request.json()` would be FastAPI's bare 400 `{"detail"}`."""

    def get_route_handler(self) -> Callable[[Request], Coroutine[Any, Any, Response]]:
        handler = super().get_route_handler()
        if self.body_field is None:
            return handler

        async def checked(request: Request) -> Response:
            raw = await request.body()
            if raw:
                _require_json(request, raw)
                request._json = load_json(raw)
            return await handler(request)

        return checked


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
    """The body as `model`, or a 422 naming the fields at fault (loc `["body", ...]`). The
    body is checked (`load_json`) before the model sees it; 415 when it is not declared
    JSON."""
    raw = await request.body()
    _require_json(request, raw)
    if not raw:  # as FastAPI says it of the bodies it parses
        raise RequestValidationError(
            [{"type": "missing", "loc": ("body",), "msg": "Field required", "input": None}]
        )
    load_json(raw)
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
