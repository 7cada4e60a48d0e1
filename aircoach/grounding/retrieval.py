"""What each tool of a turn returned, as ids or titles (never whole texts): stored with the
turn (`retrieved`) and logged in its summary line beside what the answer cited, so an
operator sees "retrieved X, cited Y"."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from aircoach.grounding.models import Retrieved
from aircoach.turn.records import ToolCall

# Where a result list usually is (the client shape `items`, a search service's `results`),
# and which field of a result names it, best first.
RESULT_KEYS = ("items", "results")
REF_FIELDS = ("id", "riferimento", "ref", "doc_id", "title", "titolo", "url", "source")
MAX_REFS = 10
MAX_REF_CHARS = 80


def _results(data: Mapping[str, Any]) -> list[Any] | None:
    for key in RESULT_KEYS:
        if isinstance(data.get(key), list):
            return data[key]
    return next((v for v in data.values() if isinstance(v, list)), None)


def _ref(item: Any) -> str | None:
    if not isinstance(item, Mapping):
        return None
    for name in REF_FIELDS:
        value = item.get(name)
        if isinstance(value, str | int) and not isinstance(value, bool) and str(value).strip():
            text = " ".join(str(value).split())
            return text if len(text) <= MAX_REF_CHARS else text[: MAX_REF_CHARS - 1] + "…"
    return None


def retrieved(calls: Sequence[ToolCall]) -> list[Retrieved]:
    """One entry per successful tool call that returned a list of results."""
    found = []
    for call in calls:
        results = _results(call.data) if call.status == "success" else None
        if results is None:
            continue
        refs = [ref for ref in map(_ref, results) if ref is not None]
        found.append(
            Retrieved(
                tool_name=call.tool_name,
                call_id=call.call_id,
                count=len(results),
                refs=list(dict.fromkeys(refs))[:MAX_REFS],
            )
        )
    return found


def log_entries(records: Sequence[Retrieved], *, per_tool: int = 5) -> list[str]:
    """`kb_search:3.1|3.2` per call (`kb_search:0` when it found nothing): short and greppable."""
    return [
        f"{r.tool_name}:{'|'.join(ref[:40] for ref in r.refs[:per_tool]) or r.count}"
        for r in records
    ]
