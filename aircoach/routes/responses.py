"""OpenAPI declarations of the JSON error answers (`ErrorBody`) the routes may give, so the
schema tells clients (and schemathesis) every status they can get."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from fastapi import FastAPI, Header

from aircoach.models import (
    CLIENT_MESSAGE_ID_PATTERN,
    MAX_CLIENT_MESSAGE_ID,
    ErrorBody,
    TurnInProgressBody,
    ValidationErrorBody,
)

Responses = dict[int | str, dict[str, Any]]

# A route that parses its body itself (`aircoach.bodies.parse_json_body`) declares its 422:
# FastAPI documents it only for the parameters it validates.
INVALID_BODY: Responses = {
    422: {
        "model": ValidationErrorBody,
        "description": "The body is not JSON or does not validate; `detail` names each field.",
    }
}
# The same for a route that takes no body.
INVALID_QUERY: Responses = {
    422: {
        "model": ValidationErrorBody,
        "description": "A query parameter does not validate; `detail` names each "
        '(`["query", name]`).',
    }
}

# A body the server could not read: FastAPI turns a failed read into a 400, which is answered
# as every error is (`aircoach.http_errors.http_error`). A body that is not JSON, or not
# UTF-8, is a 422.
UNPARSABLE_BODY: Responses = {
    400: {"model": ErrorBody, "description": "The body could not be read (`bad_request`)."}
}

TOO_LARGE: Responses = {
    413: {
        "model": ErrorBody,
        "description": "The body is larger than the route's limit (`body_too_large`).",
    }
}

UNAUTHORIZED: Responses = {
    401: {
        "model": ErrorBody,
        "description": "No bearer token (`missing_token`), or an invalid, expired or foreign "
        "one (`invalid_token`).",
    }
}


# The refusals of the turn pipeline (`aircoach.routes.chat.run_chat`), whichever chat route
# encodes its events.
TURN_REFUSED: Responses = {
    409: {
        "model": TurnInProgressBody,
        "description": "`turn_in_progress`: another turn of the conversation is running (send "
        '`if_busy: "interrupt"` to replace it), or the first request with this '
        "`client_message_id` is between its end and its store write; `turn_id` names it "
        "(rejoin with `GET /api/turns/{turn_id}/events`), `Retry-After` says when to retry.",
    },
    429: {
        "model": ErrorBody,
        "description": "`quota_exceeded`: the user's turns per minute or per day are spent; "
        "`Retry-After` says when the window ends.",
    },
}


# The request header that makes a retry answer the first request's result (chat, quiz answers,
# tasks), spelled so in every route's schema: a generated client names its parameter so.
IDEMPOTENCY_HEADER = "Idempotency-Key"
# The header of an answer that is a repeat's: the first request's result, sent again.
REPLAYED_HEADER = "Idempotent-Replayed"


def idempotency_key_header(description: str) -> Any:
    """The optional `Idempotency-Key` of a quiz answer or an exam: a client message id's
    characters and length, checked before any work."""
    return Header(
        alias=IDEMPOTENCY_HEADER,
        min_length=1,
        max_length=MAX_CLIENT_MESSAGE_ID,
        pattern=CLIENT_MESSAGE_ID_PATTERN,
        description=description,
    )


# The header of an answer that says when to retry, declared on it (`"headers": RETRY_AFTER`)
# so a generated client reads it as a number of seconds.
RETRY_AFTER: dict[str, Any] = {
    "Retry-After": {
        "description": "Seconds to wait before retrying.",
        "schema": {"type": "integer", "minimum": 1},
    }
}


def unavailable(*codes: str) -> Responses:
    """A 503 naming the backends whose failure this route reports."""
    names = ", ".join(f"`{code}`" for code in codes)
    return {503: {"model": ErrorBody, "description": f"A backend failed: {names}. Retry later."}}


_FASTAPI_422 = "HTTPValidationError"


def install_validation_error_body(app: FastAPI) -> None:
    """Make `app.openapi()` say what every 422 is. FastAPI documents the 422 of each route
    that declares none as its own `HTTPValidationError` (`{"detail": [...]}`); the API
    answers all of them `ValidationErrorBody` (`aircoach.http_errors.validation_error`), so
    that component is made that body (a generated client then knows `error` and `message`)."""
    generate: Callable[[], dict[str, Any]] = app.openapi

    def openapi() -> dict[str, Any]:
        if app.openapi_schema is None:
            schemas = generate().get("components", {}).get("schemas", {})
            if _FASTAPI_422 in schemas:
                body = ValidationErrorBody.model_json_schema(
                    mode="serialization", ref_template="#/components/schemas/{model}"
                )
                for name, component in body.pop("$defs", {}).items():
                    schemas.setdefault(name, component)
                schemas[_FASTAPI_422] = {**body, "title": _FASTAPI_422}
                schemas.pop("ValidationError", None)  # FastAPI's item: its body's alone
        return app.openapi_schema or generate()

    app.openapi = openapi  # type: ignore[method-assign]


_UNSUPPORTED_MEDIA_TYPE = {
    "description": "The body is not declared JSON: `Content-Type` missing or not "
    "`application/json` (`unsupported_media_type`).",
    "content": {"application/json": {"schema": {"$ref": "#/components/schemas/ErrorBody"}}},
}


def install_unsupported_media_type(app: FastAPI) -> None:
    """Make `app.openapi()` list the 415 of every route that takes a JSON body: each answers
    it (`aircoach.bodies`), whether FastAPI or the route parses the body. (Every such route
    declares `ErrorBody` answers already, so the component is there.)"""
    generate: Callable[[], dict[str, Any]] = app.openapi

    def openapi() -> dict[str, Any]:
        if app.openapi_schema is None:
            for operations in generate()["paths"].values():
                for operation in operations.values():
                    if "application/json" in operation.get("requestBody", {}).get("content", {}):
                        operation["responses"].setdefault("415", _UNSUPPORTED_MEDIA_TYPE)
        return app.openapi_schema or generate()

    app.openapi = openapi  # type: ignore[method-assign]
