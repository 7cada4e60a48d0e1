"""Logs an operator can use: one line per event, JSON where a log service reads them, every
line of a request carrying its request id, and one summary line per chat turn.

`configure_logging` works whoever configured logging first. On Lambda the runtime has already
put its own handler on the root logger (whose level stays WARNING), so `logging.basicConfig`
did nothing and every INFO line of the app was dropped. Here the app's logger (`aircoach`)
gets the level itself; in JSON mode it also gets its own handler and stops propagating, so each
line is one JSON object that no runtime formatter wraps or repeats. In text mode the lines go
through the root logger's handlers (ours when nobody installed any).

The request id comes from the `X-Request-ID` header when it is a sane token, else from the
platform (the Lambda request id, Vercel's `x-vercel-id`), else it is made up; it is echoed in
the `X-Request-ID` response header and held in a context variable that every line reads.
"""

from __future__ import annotations

import json
import logging
import re
import sys
import time
import uuid
from collections.abc import Mapping
from contextvars import ContextVar
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from starlette.datastructures import MutableHeaders
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from aircoach import telemetry
from aircoach.settings import ServerSettings
from aircoach.stages import Stages
from aircoach.text import redact_query

APP_LOGGER = "aircoach"
REQUEST_ID_HEADER = "X-Request-ID"

# What a caller may choose as a request id: short, printable, no spaces or quotes. Anything
# else is ignored (never echoed), and the request gets an id of ours.
_SANE_ID = re.compile(r"[A-Za-z0-9._:/+=-]{1,128}")


@dataclass(frozen=True)
class RequestContext:
    id: str
    started: float  # time.monotonic() when the request arrived
    stages: Stages = field(default_factory=Stages)  # where its time went (a chat turn's)

    def elapsed_ms(self) -> int:
        return round((time.monotonic() - self.started) * 1000)


_request: ContextVar[RequestContext | None] = ContextVar("aircoach_request", default=None)


def current_request() -> RequestContext | None:
    """The request being served in this context (None outside a request)."""
    return _request.get()


def current_stages() -> Stages:
    """The stage timings of the request being served (a throwaway one outside a request)."""
    request = _request.get()
    return request.stages if request else Stages()


def current_request_id() -> str | None:
    request = _request.get()
    return request.id if request else None


def log_fields(logger: logging.Logger, event: str, fields: Mapping[str, Any]) -> None:
    """One INFO line `event k=v ...`; in JSON the fields are keys of the object. The fields
    also feed the metrics (and a turn's request span), which count whatever the log level."""
    if logger.isEnabledFor(logging.INFO):
        text = " ".join(f"{key}={_text(value)}" for key, value in fields.items())
        logger.info("%s %s", event, text, extra={"fields": {"event": event, **fields}})
    telemetry.observe(event, fields)


def _text(value: Any) -> str:
    if isinstance(value, list | tuple):
        # An item may come from outside (a web page's title in `retrieved`): one with a space,
        # `=` or `,` is quoted, so that it cannot read as another item or another field, and
        # one with a line break or another control character too (repr escapes them), so that
        # the line stays one line.
        return ",".join(_quoted(str(item), " =,") for item in value) or "-"
    if isinstance(value, str):
        return _quoted(value, " =")
    return str(value)


def _quoted(text: str, separators: str) -> str:
    plain = text and text.isprintable() and not any(c in text for c in separators)
    return text if plain else repr(text)


# Line breaks that JSON writes as they are (it escapes only those below U+0020): escaped, so
# that a line splitter (`str.splitlines`, a log shipper) sees one line per object.
_LINE_BREAKS = {ord(c): f"\\u{ord(c):04x}" for c in "\x85\u2028\u2029"}


class JsonFormatter(logging.Formatter):
    """One JSON object per line: ts, level, logger, msg, request_id (and trace_id, span_id
    when tracing is on), the line's fields."""

    def format(self, record: logging.LogRecord) -> str:
        entry: dict[str, Any] = {
            "ts": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname,
            "logger": record.name,
            "msg": record.getMessage(),
        }
        if (request_id := current_request_id()) is not None:
            entry["request_id"] = request_id
        if ids := telemetry.trace_ids():
            entry["trace_id"], entry["span_id"] = ids
        fields = getattr(record, "fields", None)
        if isinstance(fields, Mapping):
            entry.update((k, v) for k, v in fields.items() if k not in entry)
        if record.exc_info:
            entry["exc"] = self.formatException(record.exc_info)
        return json.dumps(entry, ensure_ascii=False, default=str).translate(_LINE_BREAKS)


class TextFormatter(logging.Formatter):
    """`time LEVEL logger [request id]: message` (the id only inside a request)."""

    def __init__(self) -> None:
        super().__init__("%(asctime)s %(levelname)s %(name)s%(request)s: %(message)s")

    def format(self, record: logging.LogRecord) -> str:
        request_id = current_request_id()
        record.request = f" [{request_id}]" if request_id else ""
        return super().format(record)


class _AppHandler(logging.StreamHandler):  # type: ignore[type-arg]
    """Ours, so that configuring again (one app per test, a second app) replaces it."""


class RedactQuery(logging.Filter):
    """uvicorn's access line without query values: `?access_token=…&q=…` keeps the names an
    operator needs and drops what a client may put there (a token, a student's search words).
    uvicorn's access record's args are `(client, method, path with query, http version,
    status)`."""

    def filter(self, record: logging.LogRecord) -> bool:
        args = record.args
        if isinstance(args, tuple) and len(args) == 5 and isinstance(args[2], str):
            record.args = (*args[:2], redact_query(args[2]), *args[3:])
        return True


_ACCESS_LOGGER = "uvicorn.access"


def configure_logging(settings: ServerSettings) -> None:
    """Set up the app's logging per `LOG_LEVEL` and `LOG_FORMAT`; safe to call again."""
    access = logging.getLogger(_ACCESS_LOGGER)
    if not any(isinstance(f, RedactQuery) for f in access.filters):
        access.addFilter(RedactQuery())
    app_logger = logging.getLogger(APP_LOGGER)
    root = logging.getLogger()
    for logger in (app_logger, root):
        for old in [h for h in logger.handlers if isinstance(h, _AppHandler)]:
            logger.removeHandler(old)
    app_logger.setLevel(settings.log_level.upper())
    json_lines = settings.resolved_log_format == "json"
    app_logger.propagate = not json_lines
    if json_lines:
        app_logger.addHandler(_handler(json_lines))
    if not root.handlers:
        # Nobody configured logging (a laptop, uvicorn): other libraries' warnings and errors
        # get our format too. Their INFO lines stay out (httpx logs every URL it calls).
        root.addHandler(_handler(json_lines))
        root.setLevel(logging.WARNING)


def _handler(json_lines: bool) -> logging.Handler:
    handler = _AppHandler(sys.stderr)
    handler.setFormatter(JsonFormatter() if json_lines else TextFormatter())
    return handler


class RequestIdMiddleware:
    """Gives every HTTP request an id (see the module docstring) for its log lines and its
    `X-Request-ID` response header."""

    def __init__(self, app: ASGIApp):
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        request = RequestContext(_request_id(scope), time.monotonic())

        async def send_with_id(message: Message) -> None:
            if message["type"] == "http.response.start":
                MutableHeaders(scope=message)[REQUEST_ID_HEADER] = request.id
            await send(message)

        token = _request.set(request)
        try:
            await self.app(scope, receive, send_with_id)
        finally:
            _request.reset(token)


def _request_id(scope: Scope) -> str:
    headers = dict(scope.get("headers") or [])
    given = headers.get(REQUEST_ID_HEADER.lower().encode(), b"").decode("latin-1").strip()
    if _SANE_ID.fullmatch(given):
        return given
    # Latin-1 decodes any bytes: a header value that is not UTF-8 is then not a sane id.
    vercel_id = headers.get(b"x-vercel-id", b"").decode("latin-1")
    for platform_id in (_lambda_request_id(scope), vercel_id):
        if platform_id and _SANE_ID.fullmatch(platform_id):
            return platform_id
    return uuid.uuid4().hex


def _lambda_request_id(scope: Scope) -> str | None:
    """Mangum puts the invocation's context and event in the scope: the context's id is the
    one in the runtime's own START/END/REPORT lines; API Gateway's is the next best."""
    context_id = getattr(scope.get("aws.context"), "aws_request_id", None)
    if isinstance(context_id, str):
        return context_id
    event = scope.get("aws.event")
    request_context = event.get("requestContext") if isinstance(event, dict) else None
    if isinstance(request_context, dict) and isinstance(request_context.get("requestId"), str):
        return request_context["requestId"]
    return None
