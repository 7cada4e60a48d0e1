"""JSON Schema checks shared by the tool specs and the task definitions.

Checking a schema against the Draft 2020-12 meta-schema costs about 16 ms, and every docs load
checks every tool's and every task's schema again, although they rarely change: the result is
kept per schema text. `jsonschema` itself (about 150 ms to import) is imported on the first
check, not at import.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from functools import lru_cache
from typing import Any

MAX_CHARS = 200  # of a refusal's path and of its message


def canonical_json(schema: Mapping[str, Any]) -> str:
    """One text per schema, whatever its keys' order or spacing."""
    return json.dumps(schema, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def schema_problem(schema: Mapping[str, Any]) -> str | None:
    """Where and why `schema` is not a valid JSON Schema (Draft 2020-12), or None."""
    return _problem(canonical_json(schema))


@lru_cache(maxsize=256)
def _problem(canonical: str) -> str | None:
    from jsonschema import Draft202012Validator, SchemaError

    try:
        Draft202012Validator.check_schema(json.loads(canonical))
    except SchemaError as exc:
        where = "/".join(str(p) for p in exc.absolute_path)[:MAX_CHARS] or "(root)"
        message = exc.message  # may quote the offending part of the schema: bounded
        if len(message) > MAX_CHARS:
            message = message[:MAX_CHARS] + "..."
        return f"{where}: {message}"
    return None
