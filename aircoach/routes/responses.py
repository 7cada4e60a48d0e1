"""OpenAPI declarations of the JSON error answers (`ErrorBody`) the routes may give, so the
schema tells clients (and schemathesis) every status they can get."""

from __future__ import annotations

from typing import Any

from aircoach.models import ErrorBody, ValidationErrorBody

Responses = dict[int | str, dict[str, Any]]

# A route that parses its body itself (`aircoach.bodies.parse_json_body`) declares its 422:
# FastAPI documents it only for the parameters it validates.
INVALID_BODY: Responses = {
    422: {
        "model": ValidationErrorBody,
        "description": "The body is not JSON or does not validate; `detail` names each field.",
    }
}

# FastAPI's own answer (`{"detail": ...}`) to a body it cannot even decode (not UTF-8), on
# routes that let FastAPI parse their body; the chat route parses its own (a 422).
UNPARSABLE_BODY: Responses = {
    400: {
        "description": "The body could not be parsed (for example, it is not UTF-8).",
        "content": {
            "application/json": {
                "schema": {
                    "type": "object",
                    "required": ["detail"],
                    "properties": {"detail": {"type": "string"}},
                }
            }
        },
    }
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


def unavailable(*codes: str) -> Responses:
    """A 503 naming the backends whose failure this route reports."""
    names = ", ".join(f"`{code}`" for code in codes)
    return {503: {"model": ErrorBody, "description": f"A backend failed: {names}. Retry later."}}
