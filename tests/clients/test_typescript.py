"""The OpenAPI document generates a client that compiles: `openapi-typescript` (pinned in
package.json) types the schema, and `tsc --strict` (TypeScript 5) compiles a small client that
sends `{query}`, narrows the stream's events by `type` through the component schemas, and
calls the quiz API."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest

from aircoach.app import create_app
from aircoach.settings import ROOT, Settings

pytestmark = pytest.mark.integration

NODE_BIN = ROOT / "node_modules" / ".bin"


def _tool(name: str) -> str:
    tool = NODE_BIN / name
    assert tool.exists(), f"{tool} is missing: run `npm ci` (make test does)"
    return str(tool)


def test_the_generated_types_compile_a_strict_client(settings: Settings, tmp_path: Path):
    (tmp_path / "openapi.json").write_text(json.dumps(create_app(settings).openapi()))
    shutil.copy(ROOT / "tests" / "clients" / "typed_client.ts", tmp_path / "typed_client.ts")
    generate = [_tool("openapi-typescript"), "openapi.json", "-o", "api.d.ts"]
    done = subprocess.run(generate, cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    compile_ = [
        _tool("tsc"),
        "--strict",
        "--noEmit",
        "--target",
        "es2022",
        "--module",
        "esnext",
        "--moduleResolution",
        "bundler",
        "--lib",
        "es2022,dom",
        "typed_client.ts",
    ]
    done = subprocess.run(compile_, cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr
