"""How a tool's result becomes text for the model: a header and one capped line per result.
The client gets the data itself; only the model's text is shaped here."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from aircoach.tools.registry import ResultFormat


def format_result(tool: str, fmt: ResultFormat, body: Mapping[str, Any]) -> str:
    """The text the model reads: a header and one capped line per result, or `no_results`."""
    results = body.get(fmt.results_key)
    if results is None:
        # A single-document answer (no list): its fields, capped.
        results = [body] if any(k != "meta" for k in body) else []
    if not isinstance(results, list):
        results = [results]
    if not results:
        return fmt.no_results.replace("{tool}", tool)
    header = fmt.header.replace("{tool}", tool).replace("{count}", str(len(results)))
    lines = [_format_item(item, fmt) for item in results[: fmt.max_results]]
    if len(results) > fmt.max_results:
        lines.append(f"(altri {len(results) - fmt.max_results} risultati non mostrati)")
    return "\n".join([header, *lines])


class _Fields(dict[str, str]):
    """Template values: `{a|b}` takes the first present field; a missing one is empty."""

    def __missing__(self, key: str) -> str:
        for name in key.split("|"):
            if name in self:
                return self[name]
        return ""


def _format_item(item: Any, fmt: ResultFormat) -> str:
    if not isinstance(item, dict):
        return f"- {_truncate(_as_text(item), fmt.max_chars)}"
    fields = _Fields(
        {
            key: _truncate(_as_text(value), fmt.max_chars_by_field.get(key, fmt.max_chars))
            for key, value in item.items()
            if value is not None and key != "meta"
        }
    )
    if fmt.item is None:
        return "- " + "; ".join(f"{key}: {value}" for key, value in fields.items())
    try:
        return fmt.item.format_map(fields)
    except (ValueError, IndexError, KeyError):
        return "- " + "; ".join(f"{key}: {value}" for key, value in fields.items())


def _as_text(value: Any) -> str:
    if isinstance(value, str):
        return " ".join(value.split())
    if isinstance(value, float):
        return f"{value:.3g}"
    return str(value)


def _truncate(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 1].rstrip() + "…"
