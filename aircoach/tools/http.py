"""The HTTP tool executor: call a configured endpoint with timeout and retry, and shape the
answer for the model.

Driven by `tools.json`: the model's arguments are capped and merged with the fixed fields,
sent as JSON (POST) or as the query string (GET); 502/503/504 and timeouts are retried as the
tool's `RetryPolicy` says. The client gets `tools.results`' shape, never the raw answer:
`{"success": true, "items", "meta"}` or `{"success": false, "error", "meta"}`, `meta` being
`{latency_ms, source, endpoint, attempts}`, where `endpoint` is the URL template of
tools.json, never an expanded variable.
Nothing here raises into the turn: a failure becomes a `[Tool NAME failed: REASON]`
ToolOutput the model can explain.
"""

from __future__ import annotations

import functools
import json
import logging
import time
from collections.abc import Mapping
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import anyio
import httpx

from aircoach.errors import ConfigError
from aircoach.grounding.followups import expanded_search
from aircoach.threads import Threads
from aircoach.tls import shared_tls_context
from aircoach.tools.formatting import format_result
from aircoach.tools.registry import ToolContext, ToolOutput, ToolSpec, expand_env
from aircoach.tools.results import failure_data, result_items, success_data

log = logging.getLogger(__name__)

# An answer larger than this is parsed in a worker thread. A 2 MB answer (the default
# `max_response_bytes`) of many small objects or numbers takes the C parser about 20 ms here,
# one of long strings about 2 ms; an answer of this size about 1 ms, less than it is worth
# sending to a thread and back.
INLINE_PARSE_BYTES = 128 * 1024
# Parsing is CPU-bound: more threads than cores would not help.
_threads = Threads("tool-json", limit=2)


class _Failed(Exception):
    """One attempt's failure: `reason` is what the model reads, `retryable` per the policy."""

    def __init__(self, reason: str, *, retryable: bool):
        super().__init__(reason)
        self.reason = reason
        self.retryable = retryable


async def call_http_tool(spec: ToolSpec, ctx: ToolContext, **arguments: Any) -> ToolOutput:
    http = spec.http
    assert http is not None, f"tool {spec.name!r} has no http config"
    started = time.perf_counter()
    # The template as tools.json writes it (`${TOOL_METEO_URL}/metar`): an expanded variable
    # may hold a key, and `meta` reaches the client and the stored turn.
    meta: dict[str, Any] = {
        "latency_ms": 0,
        "source": spec.name,
        "endpoint": _public_endpoint(http.url),
        "attempts": 0,
    }
    try:
        url = expand_env(http.url, ctx.env)
        headers = {key: expand_env(value, ctx.env) for key, value in http.headers.items()}
    except ConfigError as exc:
        return _failure(spec, str(exc), meta, started)
    payload = {**cap_arguments(arguments, http.caps), **http.fixed}
    plain = dict(payload)
    if spec.source and ctx.topic:
        # A follow-up searches the conversation's topic first. The model's own arguments
        # stay as they were (the stored call); what was searched goes in `meta`.
        expanded = expanded_search(payload, ctx.topic)
        if expanded is not None:
            name, payload[name] = expanded
            meta["expanded_query"] = payload[name]

    try:
        body = await _with_retries(spec, url, headers, payload, meta)
        items = result_items(body, spec.format)
        if not items and payload != plain:
            # The topic added to a follow-up found nothing: search the query as asked.
            body = await _with_retries(spec, url, headers, plain, meta)
            items = result_items(body, spec.format)
            meta.pop("expanded_query", None)
    except _Failed as failure:
        return _failure(spec, failure.reason, meta, started)

    meta["latency_ms"] = _elapsed_ms(started)
    data = success_data(items, meta, spec.format, max_bytes=ctx.client_max_bytes)
    return ToolOutput(text=format_result(spec.name, spec.format, body), data=data)


async def _with_retries(
    spec: ToolSpec,
    url: str,
    headers: dict[str, str],
    payload: dict[str, Any],
    meta: dict[str, Any],
) -> dict[str, Any]:
    """The service's answer, retried as the tool's config says; `_Failed` when it gives up.
    `meta["attempts"]` counts every attempt of the call."""
    http = spec.http
    assert http is not None
    tries = 0
    while True:
        tries += 1
        meta["attempts"] += 1
        try:
            return await _attempt(spec, url, headers, payload)
        except _Failed as failure:
            if not failure.retryable or tries > http.retry.retries:
                raise
            log.warning("[%s] %s, retrying (attempt %d)", spec.name, failure.reason, tries)
            await anyio.sleep(http.retry.backoff_s)


async def _attempt(
    spec: ToolSpec, url: str, headers: dict[str, str], payload: dict[str, Any]
) -> dict[str, Any]:
    http = spec.http
    assert http is not None
    request: dict[str, Any] = {"params": payload} if http.method == "GET" else {"json": payload}
    try:
        # A client per call, inside the running loop: nothing loop-bound outlives the request.
        verify = await shared_tls_context()
        async with httpx.AsyncClient(
            timeout=http.timeout_s, headers=headers, verify=verify
        ) as client:
            # httpx's timeout is per read; the deadline bounds the whole exchange.
            with anyio.fail_after(http.timeout_s):
                async with client.stream(http.method, url, **request) as response:
                    content = await _read_capped(response, http.max_response_bytes)
    except (httpx.TimeoutException, TimeoutError):
        reason = f"timeout after {round(http.timeout_s * 1000)}ms"
        raise _Failed(reason, retryable=http.retry.on_timeout) from None
    except httpx.HTTPError as exc:
        raise _Failed(f"{type(exc).__name__}", retryable=False) from None
    if response.status_code >= 400:
        retryable = response.status_code in http.retry.on_status
        raise _Failed(f"HTTP {response.status_code}", retryable=retryable)
    if content is None:
        raise _Failed(f"answer larger than {http.max_response_bytes} bytes", retryable=False)
    try:
        if len(content) > INLINE_PARSE_BYTES:
            body = await _threads.run(functools.partial(json.loads, content))
        else:
            body = json.loads(content)
    except (ValueError, RecursionError):  # RecursionError: nested past the parser's limit
        raise _Failed("the service did not answer JSON", retryable=False) from None
    if isinstance(body, list):
        body = {spec.format.results_key: body}
    if not isinstance(body, dict):
        raise _Failed("the service answered neither an object nor a list", retryable=False)
    return body


async def _read_capped(response: httpx.Response, limit: int) -> bytes | None:
    """The body, or None as soon as it exceeds `limit` (without reading the rest)."""
    chunks, size = [], 0
    async for chunk in response.aiter_bytes():
        size += len(chunk)
        if size > limit:
            return None
        chunks.append(chunk)
    return b"".join(chunks)


def cap_arguments(arguments: Mapping[str, Any], caps: Mapping[str, float]) -> dict[str, Any]:
    """Drop unset arguments and bound numeric ones (e.g. `top_k` at 20)."""
    capped: dict[str, Any] = {}
    for name, value in arguments.items():
        if value is None:
            continue
        cap = caps.get(name)
        if cap is not None and isinstance(value, int | float) and not isinstance(value, bool):
            value = min(value, type(value)(cap))
        capped[name] = value
    return capped


def _failure(spec: ToolSpec, reason: str, meta: dict[str, Any], started: float) -> ToolOutput:
    meta["latency_ms"] = _elapsed_ms(started)
    log.warning("[%s] failed: %s (%s ms)", spec.name, reason, meta["latency_ms"])
    return ToolOutput(
        text=f"[Tool {spec.name} failed: {reason}]",
        data=failure_data(reason, meta),
        ok=False,
    )


def _elapsed_ms(started: float) -> int:
    return round((time.perf_counter() - started) * 1000)


def _public_endpoint(url: str) -> str:
    """A URL template without credentials or query string: `meta` goes to the client."""
    parts = urlsplit(url)
    netloc = parts.netloc.rpartition("@")[2]  # no user:password@
    return urlunsplit((parts.scheme, netloc, parts.path, "", ""))
