"""Error answers that are not our own `AppError`s, in the API's one shape
`{"error", "message"}`: the 422 of a request that does not validate (with a bounded
`detail`), Starlette's HTTP errors (unknown path, wrong method), and anything unhandled (a
JSON 500 inside CORS and the request id, `UnhandledErrors`).

The 422 keeps FastAPI's `{"detail": [...]}` beside `error` and `message`, bounded whatever
the input.

FastAPI's own handler echoes each error's whole `input`: a body that fails on many fields
(or one huge field) made an answer many times its size, and a lone surrogate in the body
could not be encoded at all (a 500). Here every error keeps its `type`, `loc`, `msg` and
`input`, but each value is cut to a preview (`bounded`), at most `MAX_ERRORS` errors are
listed, and every string is made encodable.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Mapping, Sequence
from typing import Any

from fastapi import Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.datastructures import Headers
from starlette.exceptions import HTTPException
from starlette.routing import Match
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from aircoach import messages
from aircoach.messages import Language, header_language
from aircoach.text import logged_path

log = logging.getLogger(__name__)

MAX_ERRORS = 20  # errors listed in one answer; the rest are counted
MAX_CHARS = 120  # characters of a string shown (a name, a preview of an input)
MAX_ITEMS = 8  # items of a list or object shown
MAX_DEPTH = 3  # nesting shown
MAX_PREVIEW_CHARS = 1_000  # characters of one preview: its strings, keys and numbers
_ELLIPSIS = "…"


def bounded(value: Any, *, max_chars: int = MAX_CHARS) -> Any:
    """A JSON-safe preview of `value` of at most about `MAX_PREVIEW_CHARS` characters, whatever
    its size: strings, bytes and integers past 64 bits cut to `max_chars` (with `…`), lists and
    objects to their first `MAX_ITEMS` items (with a `"…": "N more"` marker) and to what the
    preview's characters allow, nesting below `MAX_DEPTH` summarised, and every string
    encodable as UTF-8 (a lone surrogate shows as `\\ud800`)."""
    return _Preview(max_chars).show(value, 0)


class _Preview:
    """One preview: every string, key and number it shows spends its `MAX_PREVIEW_CHARS` (8
    items a level over 3 levels are 512 strings: a 60 KB preview of one input)."""

    def __init__(self, max_chars: int):
        self.max_chars = max_chars
        self.left = MAX_PREVIEW_CHARS

    def show(self, value: Any, depth: int) -> Any:
        if isinstance(value, float) and not math.isfinite(value):
            return self.text(str(value))  # JSON has no NaN or Infinity
        if value is None or isinstance(value, bool):
            return value
        if isinstance(value, int) and value.bit_length() > 64:
            return self.text(_digits(value))
        if isinstance(value, int | float):
            self.left -= len(repr(value))
            return value
        if isinstance(value, bytes | bytearray):
            return self.text(bytes(value[: self.max_chars * 4]).decode("utf-8", "replace"))
        if isinstance(value, str):
            return self.text(value)
        if depth >= MAX_DEPTH and isinstance(value, Mapping | list | tuple | set | frozenset):
            return self.text(f"{type(value).__name__} of {len(value)} items")
        if isinstance(value, Mapping):
            shown: dict[str, Any] = {}
            for index, (key, item) in enumerate(value.items()):
                if index == MAX_ITEMS or self.left <= 0:
                    shown[_ELLIPSIS] = f"{len(value) - index} more"
                    break
                name = self.text(str(key))  # before its value spends the characters
                shown[name] = self.show(item, depth + 1)
            return shown
        if isinstance(value, Sequence | set | frozenset):
            items = list(value) if isinstance(value, set | frozenset) else value
            listed = []
            for index, item in enumerate(items):
                if index == MAX_ITEMS or self.left <= 0:
                    listed.append(f"{_ELLIPSIS} {len(items) - index} more")
                    break
                listed.append(self.show(item, depth + 1))
            return listed
        return self.text(str(value))

    def text(self, text: str) -> str:
        shown = _text(text, max(0, min(self.max_chars, self.left)))
        self.left -= len(shown)
        return shown


def _digits(value: int) -> str:
    try:
        return str(value)
    except ValueError:  # past Python's 4,300 digits
        return f"an integer of {value.bit_length()} bits"


def _text(text: str, max_chars: int) -> str:
    if len(text) > max_chars:
        text = text[:max_chars] + _ELLIPSIS
    # A lone surrogate (JSON allows `\ud800`) cannot be encoded as UTF-8: show it escaped.
    return text.encode("utf-8", "backslashreplace").decode("utf-8")


def bounded_errors(errors: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Pydantic/FastAPI error dicts, each bounded, at most `MAX_ERRORS` of them (the last
    entry then says how many were left out)."""
    shown = []
    for error in errors[:MAX_ERRORS]:
        item: dict[str, Any] = {
            "type": _text(str(error.get("type", "")), MAX_CHARS),
            "loc": [bounded(part) for part in error.get("loc", ())],
            # Messages are ours or pydantic's, and may name an input: never a large one.
            "msg": _text(str(error.get("msg", "")), 1000),
            "input": bounded(error.get("input")),
        }
        if isinstance(error.get("ctx"), Mapping):
            item["ctx"] = bounded(error["ctx"])
        shown.append(item)
    if len(errors) > MAX_ERRORS:
        left_out = len(errors) - MAX_ERRORS
        shown.append(
            {
                "type": "too_many_errors",
                "loc": [],
                "msg": f"{left_out} more errors not listed",
                "input": None,
            }
        )
    return shown


_WHERE = ("body", "query", "path", "header", "cookie")


def summary(errors: Sequence[Mapping[str, Any]], language: Language) -> str:
    """One sentence a client can show: the first field at fault, in the request's language
    (`detail` has the rest, for developers)."""
    for error in errors:
        if error.get("type") == "json_invalid":
            return messages.text("invalid_request_body", language)
        loc = [str(part) for part in error.get("loc", ())]
        if loc and loc[0] in _WHERE:
            loc = loc[1:]
        if loc:
            return messages.text("invalid_request", language, field=_text(".".join(loc), 60))
    return messages.text("invalid_request", language, field="body")


async def validation_error(request: Request, exc: Exception) -> JSONResponse:
    """422 `{"error": "invalid_request", "message", "detail": [...]}`: one sentence in the
    request's language, and each field at fault with a bounded input."""
    assert isinstance(exc, RequestValidationError)
    errors = exc.errors()
    # Which fields and why, never their input (a token, a student's text).
    faults = "; ".join(
        f"{'.'.join(map(str, error.get('loc', ())))[:80]} {str(error.get('type', ''))[:40]}"
        for error in errors[:5]
    )
    path = logged_path(request.url.path)
    log.info("%s %r -> 422 invalid_request: %s", request.method, path, faults)
    body = {
        "error": "invalid_request",
        "message": summary(errors, header_language(request.headers)),
        "detail": bounded_errors(errors),
    }
    return JSONResponse(body, status_code=422)


# Starlette's HTTP errors: raised by routing (404, 405) and by FastAPI (a body it could not
# read: 400). Our own refusals are `AppError`s.
_HTTP_ERROR_KEYS = {400: "bad_request", 404: "not_found", 405: "method_not_allowed"}


async def http_error(request: Request, exc: Exception) -> JSONResponse:
    """`{"error", "message"}` for an HTTP error Starlette or FastAPI raised, with its
    headers (`Allow` on a 405), never FastAPI's `{"detail"}`."""
    assert isinstance(exc, HTTPException)
    key = _HTTP_ERROR_KEYS.get(exc.status_code)
    if key is None:
        key = "bad_request" if exc.status_code < 500 else "internal_error"
    text = messages.text(key, header_language(request.headers), method=request.method[:16])
    headers = exc.headers
    if exc.status_code == 405:
        headers = {**(headers or {}), "Allow": _allowed(request)}
    return JSONResponse(
        {"error": key, "message": text}, status_code=exc.status_code, headers=headers
    )


def _allowed(request: Request) -> str:
    """Every method of the path: Starlette's 405 names the first route's alone (`DELETE
    /api/exams` said `Allow: POST`, though `GET /api/exams` exists)."""
    methods: set[str] = set()
    for route in request.app.router.routes:
        match, _ = route.matches(request.scope)
        if match is not Match.NONE:
            methods |= getattr(route, "methods", None) or set()
    return ", ".join(sorted(methods))


class UnhandledErrors:
    """ASGI middleware inside CORS and the request id: an exception that no handler took
    becomes `500 {"error": "internal_error"}` that a browser client can read, with its
    `X-Request-ID`, and one log line with the traceback. Starlette's own last resort is plain
    text, sent outside every middleware. A stream that has started cannot change its status:
    its exception goes on to the server."""

    def __init__(self, app: ASGIApp):
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = False

        async def tracked_send(message: Message) -> None:
            nonlocal started
            started = started or message["type"] == "http.response.start"
            await send(message)

        try:
            await self.app(scope, receive, tracked_send)
        except Exception:
            if started:
                raise
            path = logged_path(str(scope.get("path", "")))
            log.exception("%s %r -> 500 unhandled", scope.get("method"), path)
            language = header_language(Headers(scope=scope))
            body = {"error": "internal_error", "message": messages.text("internal_error", language)}
            await JSONResponse(body, status_code=500)(scope, receive, send)
