"""What runs a tool: its Python handler, its HTTP endpoint (`aircoach.tools.http`), or the
endpoint with its embedded fallback (`aircoach.tools.embedded`). Kept apart from the registry
(pure data), which imports none of its backends."""

from __future__ import annotations

import functools

from aircoach.tools.embedded import call_remote_or_embedded
from aircoach.tools.http import call_http_tool
from aircoach.tools.registry import Handler, ToolSpec, resolve_handler


def load_handler(spec: ToolSpec) -> Handler:
    """The callable that runs `spec`: `handler(ctx, **arguments) -> ToolOutput`."""
    if spec.http is not None:
        if spec.embedded is not None:
            return functools.partial(call_remote_or_embedded, spec)
        return functools.partial(call_http_tool, spec)
    assert spec.python is not None
    # Its module was checked against PYTHON_TOOL_MODULES when the spec validated.
    return resolve_handler(spec.python)
