"""The model's tool arguments checked against the tool's JSON Schema (`ToolSpec.parameters`)
before the handler runs: required fields, types, enums and unknown keys.

What is safe to coerce is coerced first, as models often quote numbers: `"5"` for an integer
becomes 5 (so a string `top_k` meets its cap afterwards), `"true"` for a boolean becomes True;
`null` means "not given" and is dropped. A key the schema does not declare is refused unless
the schema sets `additionalProperties` itself. A violation is an `InvalidArguments` whose
message, bounded, goes back to the model as the tool's error.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from functools import lru_cache
from typing import Any

from jsonschema import Draft202012Validator

MAX_PROBLEMS = 5  # violations named in one message
MAX_CHARS = 80  # characters of a value quoted in a message

_INTEGER = re.compile(r"^[+-]?\d{1,15}$")


class InvalidArguments(ValueError):
    """The arguments break the tool's schema; `str()` says how, for the model."""


def check_arguments(schema: Mapping[str, Any], arguments: Mapping[str, Any]) -> dict[str, Any]:
    """`arguments`, coerced where safe, or `InvalidArguments` naming what is wrong."""
    properties = schema.get("properties") or {}
    coerced = {
        name: _coerce(properties.get(name), value)
        for name, value in arguments.items()
        if value is not None
    }
    validator = _validator(_freeze(schema))
    problems = sorted(validator.iter_errors(coerced), key=lambda e: list(e.absolute_path))
    if not problems:
        return coerced
    shown = [_describe(problem) for problem in problems[:MAX_PROBLEMS]]
    if len(problems) > MAX_PROBLEMS:
        shown.append(f"and {len(problems) - MAX_PROBLEMS} more")
    raise InvalidArguments("; ".join(shown))


def _coerce(spec: Any, value: Any) -> Any:
    types = _types(spec)
    if isinstance(value, str):
        text = value.strip()
        if "integer" in types and _INTEGER.match(text):
            return int(text)
        if "number" in types:
            try:
                number = float(text)
            except ValueError:
                return value
            if number == number and abs(number) != float("inf"):  # not NaN, not infinite
                return int(number) if number.is_integer() and "." not in text else number
        if "boolean" in types and text.lower() in ("true", "false"):
            return text.lower() == "true"
        return value
    if isinstance(value, float) and "integer" in types and value.is_integer():
        return int(value)
    if isinstance(value, list) and isinstance(spec, Mapping):
        return [_coerce(spec.get("items"), item) for item in value]
    return value


def _types(spec: Any) -> set[str]:
    if not isinstance(spec, Mapping):
        return set()
    declared = spec.get("type")
    if isinstance(declared, str):
        return {declared}
    if isinstance(declared, list):
        return {t for t in declared if isinstance(t, str)}
    return set()


def _describe(problem: Any) -> str:
    where = ".".join(str(part) for part in problem.absolute_path)
    message = problem.message
    if len(message) > MAX_CHARS * 2:
        message = message[: MAX_CHARS * 2] + "..."
    return f"{where!r}: {message}" if where else message


def _freeze(schema: Mapping[str, Any]) -> str:
    strict = dict(schema)
    strict.setdefault("additionalProperties", False)
    return json.dumps(strict, sort_keys=True, default=str)


@lru_cache(maxsize=128)
def _validator(frozen: str) -> Draft202012Validator:
    return Draft202012Validator(json.loads(frozen))
