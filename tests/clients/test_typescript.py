"""The OpenAPI document generates a client that compiles: `openapi-typescript` (pinned in
package.json) types the schema, and `tsc --strict` (TypeScript 5) compiles a small client that
sends `{query}`, narrows the stream's events by `type` through the component schemas, and
calls the quiz API."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from pathlib import Path

import httpx
import pytest

from aircoach.app import create_app
from aircoach.settings import ROOT, Settings

pytestmark = pytest.mark.integration

NODE_BIN = ROOT / "node_modules" / ".bin"


README = ROOT / "clients" / "typescript" / "README.md"


def _typescript_blocks(markdown: Path) -> list[str]:
    """The ```ts blocks of a Markdown file."""
    return re.findall(r"^```ts\n(.*?)^```$", markdown.read_text(), flags=re.M | re.S)


def _tool(name: str) -> str:
    tool = NODE_BIN / name
    assert tool.exists(), f"{tool} is missing: run `npm ci` (make test does)"
    return str(tool)


def test_the_generated_types_compile_a_strict_client(settings: Settings, tmp_path: Path):
    (tmp_path / "openapi.json").write_text(json.dumps(create_app(settings).openapi()))
    shutil.copy(ROOT / "tests" / "clients" / "typed_client.ts", tmp_path / "typed_client.ts")
    (tmp_path / "node_modules").symlink_to(ROOT / "node_modules")  # the `ai` package's types
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


async def test_the_shipped_client_chats_rejoins_and_cancels(
    settings: Settings, token, tmp_path: Path
):
    """clients/typescript compiled with `tsc --strict` and run under Node against a server:
    a chat's typed events to `done`, the same turn rejoined, a cancel of an ended turn."""
    import anyio

    from tests.helpers import app_with, served
    from tests.scripted_model import Script, ScriptedModels, text

    source = ROOT / "clients" / "typescript" / "src"
    out = tmp_path / "src"
    shutil.copytree(source, out)
    # The README's examples are compiled with the client (`declare`d names are the app's).
    (out / "readme.ts").write_text("\n".join(_typescript_blocks(README)))
    (tmp_path / "openapi.json").write_text(json.dumps(create_app(settings).openapi()))
    generate = [_tool("openapi-typescript"), "openapi.json", "-o", "src/api.d.ts"]
    done = await anyio.run_process(generate, cwd=tmp_path, check=False)
    assert done.returncode == 0, done.stderr.decode()
    compile_ = [
        _tool("tsc"),
        "--strict",
        "--target",
        "es2022",
        "--module",
        "esnext",
        "--moduleResolution",
        "bundler",
        "--lib",
        "es2022,dom,dom.asynciterable",
        "--outDir",
        "out",
        "src/client.ts",
        "src/readme.ts",
    ]
    done = await anyio.run_process(compile_, cwd=tmp_path, check=False)
    assert done.returncode == 0, (done.stdout + done.stderr).decode()
    shutil.copy(out / "client.test.mjs", tmp_path / "out" / "client.test.mjs")
    (tmp_path / "out" / "package.json").write_text('{"type": "module"}')

    app = app_with(settings, models=ScriptedModels(Script([text("Lo stallo è la perdita.")])))
    with served(app) as url:
        env = {**os.environ, "BASE_URL": url, "TOKEN": token(), "QUESTION": "Stallo?"}
        with anyio.fail_after(120):
            done = await anyio.run_process(
                [shutil.which("node") or "node", "out/client.test.mjs"],
                cwd=tmp_path,
                env=env,
                check=False,
            )
        async with httpx.AsyncClient(base_url=url) as api:
            progress = (
                await api.get("/api/progress", headers={"Authorization": f"Bearer {env['TOKEN']}"})
            ).json()
    assert done.returncode == 0, done.stderr.decode()
    got = json.loads(done.stdout)
    types = [item["event"]["type"] for item in got["events"]]
    assert types[-1] == "done" and "agent_message" in types
    assert [item["id"] for item in got["events"]] == list(range(1, len(types) + 1))
    assert got["events"][-1]["event"]["turn_id"] == got["turnId"]
    assert [item["event"] for item in got["rejoined"]] == [item["event"] for item in got["events"]]
    assert got["cancelled"] is False  # it had ended
    # The answer sent twice with its Idempotency-Key: the same grading, recorded once.
    first, again = got["answers"]
    assert first == again and first["corretta"] is False
    assert progress["risposte"] == 1
