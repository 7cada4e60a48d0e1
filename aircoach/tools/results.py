"""The client shape of a search tool's result (`tool_result.data`, and so the stored turn):

    {"success": true, "items": [...], "meta": {"latency_ms", "source", "endpoint", "attempts"}}
    {"success": false, "error": "...", "meta": {...}}

`items` are the results the formatter shows the model (`ResultFormat.max_results`), each
field capped as for the model's text (`max_chars`, `max_chars_by_field`), never a service's
raw answer (SearXNG's may be 2 MB). The whole object stays under `TOOL_CLIENT_MAX_BYTES`:
items are dropped from the end until it fits, and `meta.dropped` says how many. Every search
backend (HTTP tools, an embedded one) builds its client data here, so clients see one shape.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from aircoach.tools.registry import ResultFormat

DEFAULT_CLIENT_MAX_BYTES = 16_384
_MAX_DEPTH = 3  # levels of a nested field kept; deeper ones become capped text
_MAX_ERROR_CHARS = 300


def result_items(body: Mapping[str, Any], fmt: ResultFormat) -> list[Any]:
    """The results a formatter reads from a service's answer (`fmt.results_key`, or the
    answer itself when it is one document), before capping."""
    results = body.get(fmt.results_key)
    if results is None:
        results = [{k: v for k, v in body.items() if k != "meta"}] if body else []
    if not isinstance(results, list):
        results = [results]
    return [item for item in results if item not in ({}, None)]


def success_data(
    items: list[Any],
    meta: Mapping[str, Any],
    fmt: ResultFormat,
    *,
    max_bytes: int = DEFAULT_CLIENT_MAX_BYTES,
) -> dict[str, Any]:
    """`{"success": true, "items", "meta"}`: the kept items, capped, within `max_bytes`."""
    kept = [_capped_item(item, fmt) for item in items[: fmt.max_results]]
    data: dict[str, Any] = {"success": True, "items": kept, "meta": dict(meta)}
    dropped = 0
    while kept and _size(data) > max_bytes:
        kept.pop()
        dropped += 1
        data["meta"]["dropped"] = dropped
    return data


def failure_data(error: str, meta: Mapping[str, Any]) -> dict[str, Any]:
    """`{"success": false, "error", "meta"}`: what failed, in a few words."""
    return {"success": False, "error": _cut(error, _MAX_ERROR_CHARS), "meta": dict(meta)}


def _capped_item(item: Any, fmt: ResultFormat) -> Any:
    if not isinstance(item, Mapping):
        return _capped(item, fmt.max_chars, 0)
    return {
        str(key)[:64]: _capped(value, fmt.max_chars_by_field.get(str(key), fmt.max_chars), 0)
        for key, value in item.items()
        if value is not None and key != "meta"
    }


def _capped(value: Any, limit: int, depth: int) -> Any:
    if isinstance(value, str):
        return _cut(value, limit)
    if value is None or isinstance(value, bool | int | float):
        return value
    if depth >= _MAX_DEPTH:
        return _cut(json.dumps(value, ensure_ascii=False, default=str), limit)
    if isinstance(value, Mapping):
        return {str(k)[:64]: _capped(v, limit, depth + 1) for k, v in list(value.items())[:20]}
    if isinstance(value, list | tuple):
        return [_capped(v, limit, depth + 1) for v in value[:20]]
    return _cut(str(value), limit)


def _cut(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: max(limit - 1, 0)].rstrip() + "…"


def _size(data: Any) -> int:
    return len(json.dumps(data, ensure_ascii=False).encode())
