"""Embedded backends: a tool declared with both `http` and `embedded` calls its service while
the service's variables are set (`remote`), and runs in process otherwise (`embedded`).

An embedded handler is `async handler(ctx, **arguments) -> list[dict]`: the results, as the
service would answer them. Both backends give the model the same text (the tool's `format`)
and the client the same data (`aircoach.tools.results`); like the HTTP executor, nothing here
raises into the turn: a failure is a `[Tool NAME failed: REASON]` output the model explains.
"""

from __future__ import annotations

import logging
import time
from typing import Any

from aircoach.grounding.followups import expanded_search
from aircoach.tools.formatting import format_result
from aircoach.tools.http import call_http_tool, cap_arguments
from aircoach.tools.registry import ToolContext, ToolOutput, ToolSpec, resolve_handler
from aircoach.tools.results import failure_data, success_data

log = logging.getLogger(__name__)

EMBEDDED_ENDPOINT = "embedded"


async def call_remote_or_embedded(spec: ToolSpec, ctx: ToolContext, **arguments: Any) -> ToolOutput:
    """The service when it is configured, else the embedded backend."""
    if spec.remote_available(ctx.env):
        return await call_http_tool(spec, ctx, **arguments)
    return await call_embedded_tool(spec, ctx, **arguments)


async def call_embedded_tool(spec: ToolSpec, ctx: ToolContext, **arguments: Any) -> ToolOutput:
    assert spec.embedded is not None, f"tool {spec.name!r} has no embedded backend"
    started = time.perf_counter()
    meta: dict[str, Any] = {
        "latency_ms": 0,
        "source": spec.name,
        "endpoint": EMBEDDED_ENDPOINT,
        "attempts": 1,
    }
    caps = spec.http.caps if spec.http is not None else {}
    capped = cap_arguments(arguments, caps)
    plain = dict(capped)
    if spec.source and ctx.topic and (expanded := expanded_search(capped, ctx.topic)):
        # A follow-up searches the conversation's topic first, as the HTTP backend does.
        name, capped[name] = expanded
        meta["expanded_query"] = capped[name]
    try:
        # An embedded handler answers a list of results, not a ToolOutput.
        items: Any = await resolve_handler(spec.embedded)(ctx, **capped)
        if items == [] and capped != plain:  # the topic found nothing: the query as asked
            items = await resolve_handler(spec.embedded)(ctx, **plain)
            meta.pop("expanded_query", None)
    except ValueError as exc:  # bad arguments: the model can fix them
        return _failure(spec, str(exc), meta, started)
    except Exception as exc:
        log.exception("[%s] embedded backend failed", spec.name)
        return _failure(spec, type(exc).__name__, meta, started)
    if not isinstance(items, list):
        return _failure(spec, "the embedded backend answered no list", meta, started)
    meta["latency_ms"] = _elapsed_ms(started)
    text = format_result(spec.name, spec.format, {spec.format.results_key: items})
    data = success_data(items, meta, spec.format, max_bytes=ctx.client_max_bytes)
    return ToolOutput(text=text, data=data)


def _failure(spec: ToolSpec, reason: str, meta: dict[str, Any], started: float) -> ToolOutput:
    meta["latency_ms"] = _elapsed_ms(started)
    log.warning("[%s] embedded backend failed: %s (%s ms)", spec.name, reason, meta["latency_ms"])
    return ToolOutput(
        text=f"[Tool {spec.name} failed: {reason}]", data=failure_data(reason, meta), ok=False
    )


def _elapsed_ms(started: float) -> int:
    return round((time.perf_counter() - started) * 1000)
