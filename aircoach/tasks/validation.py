"""The generic validation stages of a model's answer: parse (hard) and schema (hard). The task's
kind adds its own: business rules and verifiers (hard), quality checks (warnings).

A hard failure raises `StageFailure` with the stage and its issues; the engine records it,
feeds the issues back to the model and retries. Messages are cut short: they go back to the
model, into the stored attempt and to the reviewer, and must never echo a large answer.
"""

from __future__ import annotations

import json
import math
from typing import Any

from aircoach.tasks.definition import TaskDefinition
from aircoach.tasks.records import Issue

MAX_ISSUES = 10
MAX_MESSAGE_CHARS = 300


class StageFailure(Exception):
    """A hard failure of one stage: the attempt is invalid."""

    def __init__(self, stage: str, issues: list[Issue]):
        super().__init__(f"{stage}: {issues[0].message if issues else 'failed'}")
        self.stage = stage
        self.issues = issues[:MAX_ISSUES]


def issue(stage: str, code: str, message: str) -> Issue:
    if len(message) > MAX_MESSAGE_CHARS:
        message = message[: MAX_MESSAGE_CHARS - 1] + "…"
    return Issue(stage=stage, code=code, message=message)


def parse_stage(raw: str) -> Any:
    """Stage 1: the answer is one JSON value (a Markdown code fence around it is tolerated:
    some OpenAI-compatible servers add one even in JSON mode)."""
    text = raw.strip()
    if text.startswith("```"):
        text = text.strip("`").removeprefix("json").strip()
    if not text:
        raise StageFailure("parse", [issue("parse", "empty", "the answer is empty")])
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise StageFailure(
            "parse", [issue("parse", "invalid_json", f"not valid JSON: {exc.msg} at {exc.pos}")]
        ) from None
    except RecursionError:
        raise StageFailure(
            "parse", [issue("parse", "invalid_json", "not valid JSON: nested too deep")]
        ) from None


def schema_stage(definition: TaskDefinition, data: Any) -> None:
    """Stage 2: the answer validates against the task's JSON Schema (every error, in a stable
    order, so the same answer always gets the same feedback), and holds no non-finite number:
    Python's parser reads `NaN`, `Infinity` and `1e400`, JSON Schema takes them for numbers
    (NaN fails no `minimum`), and the store would keep them as null."""
    errors = sorted(
        definition.validator.iter_errors(data), key=lambda e: (list(map(str, e.path)), e.message)
    )
    non_finite = [
        issue("schema", "finite_number", f"{_path(path)}: {value!r} is not a finite number")
        for path, value in _non_finite(data)
    ]
    if errors or non_finite:
        raise StageFailure(
            "schema",
            [
                issue("schema", e.validator or "invalid", f"{_path(e.path)}: {e.message}")
                for e in errors
            ]
            + non_finite,
        )


def _non_finite(data: Any) -> list[tuple[tuple[str | int, ...], float]]:
    """Every non-finite number in `data`, with its path, in document order."""
    found: list[tuple[tuple[str | int, ...], float]] = []
    stack: list[tuple[Any, tuple[str | int, ...]]] = [(data, ())]
    while stack:
        value, path = stack.pop()
        if isinstance(value, float) and not math.isfinite(value):
            found.append((path, value))
        elif isinstance(value, dict | list):
            pairs = list(value.items() if isinstance(value, dict) else enumerate(value))
            stack.extend((item, (*path, key)) for key, item in reversed(pairs))
    return found


def _path(path: Any) -> str:
    out = "$"
    for part in path:
        out += f"[{part}]" if isinstance(part, int) else f".{part}"
    return out
