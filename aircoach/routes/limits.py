"""Bodies read with a cap before they are parsed. The task routes take bigger bodies (an
e-mail, a batch of them) than the default limit; their cap is checked on `Content-Length` and
again while reading, so nothing past it is ever held in memory.

(Issue 12 builds the app-wide body limit, `MAX_BODY_BYTES` with per-route limits; this helper
is meant to fold into it.)"""

from __future__ import annotations

import json
from typing import Any

from fastapi import Request
from fastapi.exceptions import RequestValidationError

from aircoach.errors import PayloadTooLarge


async def read_capped_json(request: Request, max_bytes: int) -> Any:
    """The JSON body, or 413 `payload_too_large` past `max_bytes`, or 422 when it is not JSON."""
    declared = request.headers.get("content-length", "")
    if declared.isdigit() and int(declared) > max_bytes:
        raise PayloadTooLarge(_too_large(max_bytes))
    chunks: list[bytes] = []
    size = 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > max_bytes:
            raise PayloadTooLarge(_too_large(max_bytes))
        chunks.append(chunk)
    try:
        return json.loads(b"".join(chunks))
    except json.JSONDecodeError as exc:
        raise _not_json(exc.pos, exc.msg) from None
    except UnicodeDecodeError as exc:
        raise _not_json(exc.start, exc.reason) from None


def _not_json(position: int, reason: str) -> RequestValidationError:
    """The error FastAPI gives for a JSON body it cannot decode."""
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


def _too_large(max_bytes: int) -> str:
    return f"The request body is larger than {max_bytes} bytes."
