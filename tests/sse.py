"""Parse an SSE body into (event, data) pairs, as a client would."""

from __future__ import annotations

import json
from typing import Any


def parse_sse(body: str) -> list[dict[str, Any]]:
    events = []
    for block in body.replace("\r\n", "\n").split("\n\n"):
        lines = [line for line in block.split("\n") if line and not line.startswith(":")]
        if not lines:
            continue
        name = next(line[len("event: ") :] for line in lines if line.startswith("event: "))
        data = json.loads(
            "\n".join(line[len("data: ") :] for line in lines if line.startswith("data: "))
        )
        assert data["type"] == name, (
            f"event line {name!r} does not match data type {data['type']!r}"
        )
        events.append(data)
    return events


def parse_sse_ids(body: str) -> list[tuple[int, dict[str, Any]]]:
    """(id, data) of each event; every event must carry an `id:` line."""
    numbered = []
    for block in body.replace("\r\n", "\n").split("\n\n"):
        lines = [line for line in block.split("\n") if line and not line.startswith(":")]
        if not lines:
            continue
        ids = [line[len("id: ") :] for line in lines if line.startswith("id: ")]
        assert len(ids) == 1, f"an event without one id line: {block!r}"
        numbered.append((int(ids[0]), parse_sse(block + "\n\n")[0]))
    return numbered
