"""The client's shape of a search tool's result, whichever backend answered (an HTTP service
or an embedded one): `{"success": true, "items": [...], "meta": {...}}` or `{"success": false,
"error": ..., "meta": {...}}`, capped in bytes so that a large answer never bloats the stream
or the stored turn. `meta` is `{latency_ms, source, endpoint, attempts}`, plus `truncated`
(items dropped by the cap) when the cap cut the list.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

# The default cap of the items' JSON for the client (the model's text is capped on its own).
CLIENT_MAX_BYTES = 64_000
MAX_ERROR_CHARS = 300


def items_of(body: Mapping[str, Any], results_key: str) -> list[Any]:
    """The list of results of a service's answer: `body[results_key]`, or the answer itself
    as the one item when it is a single document."""
    results = body.get(results_key)
    if isinstance(results, list):
        return results
    if results is not None:
        return [results]
    document = {key: value for key, value in body.items() if key != "meta"}
    return [document] if document else []


def tool_success(
    items: list[Any], meta: Mapping[str, Any], *, max_bytes: int = CLIENT_MAX_BYTES
) -> dict[str, Any]:
    """A successful result: the longest prefix of `items` whose JSON fits in `max_bytes`."""
    kept, size = [], 2
    for item in items:
        size += len(json.dumps(item, ensure_ascii=False, default=str).encode()) + 1
        if size > max_bytes:
            break
        kept.append(item)
    meta = dict(meta)
    if len(kept) < len(items):
        meta["truncated"] = len(items) - len(kept)
    return {"success": True, "items": kept, "meta": meta}


def tool_failure(error: str, meta: Mapping[str, Any]) -> dict[str, Any]:
    """A failed result; `error` is a short reason (cut at MAX_ERROR_CHARS), never the input."""
    if len(error) > MAX_ERROR_CHARS:
        error = error[: MAX_ERROR_CHARS - 1] + "…"
    return {"success": False, "error": error, "meta": dict(meta)}
