"""`python -m aircoach.tools`: write the published JSON Schema of `tools.json`."""

from __future__ import annotations

import json
from pathlib import Path

from aircoach.tools.registry import SCHEMA_FILE, tools_json_schema


def write_schema(path: Path = SCHEMA_FILE) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(tools_json_schema(), indent=2, ensure_ascii=False) + "\n", "utf-8")


if __name__ == "__main__":
    write_schema()
    print(f"wrote {SCHEMA_FILE}")
