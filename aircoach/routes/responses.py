"""OpenAPI declarations of the JSON error answers (`ErrorBody`) the routes may give, so the
schema tells clients (and schemathesis) every status they can get."""

from __future__ import annotations

from typing import Any

from aircoach.models import ErrorBody

Responses = dict[int | str, dict[str, Any]]

# FastAPI's own answer (`{"detail": ...}`) to a JSON body it cannot even decode (not UTF-8);
# a body that decodes but does not validate is a 422.
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
