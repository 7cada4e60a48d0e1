"""The pinned Vercel CLI's `vercel build`, run on what `vercel deploy` uploads (deploy/
vercel_build.py), with python3.12 first on PATH and a `.vercel/project.json` written here (no
login: a build needs none). The Python builder installs requirements.txt, and the function it
outputs holds those packages and none of the work tree's local files.

Where it stops: `vercel deploy --prebuilt` (uploading the output) needs a Vercel account."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from aircoach.settings import ROOT
from deploy import vercel_build
from tests.deploy.conftest import npm_tool

pytestmark = pytest.mark.integration

# What the work tree may hold and the function must not.
LOCAL = re.compile(
    r"^(\.env|\.aircoach/|\.venv/|tests/|bench/|deploy/|dist/|node_modules/|docs/|\.git/|"
    r"functions/|Makefile$|README\.md$|serverless\.yml$|package(-lock)?\.json$|"
    r"requirements-dev\.txt$)|(^|/)(\.env(\..*)?|dev_issuer_key\.pem|[^/]*\.sqlite3.*)$"
)


def _distribution(requirement: str) -> str:
    name = re.split(r"[<>=!~;\[ #]", requirement.strip(), maxsplit=1)[0]
    return re.sub(r"[-_.]+", "_", name).lower()


def _work_tree() -> tuple[str, list[str]]:
    """git's view of the work tree, and which of the builder's usual droppings exist (build/
    is git-ignored, so git alone would not see it)."""
    status = subprocess.run(
        ["git", "status", "--porcelain", "--untracked-files=all"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    return status, [
        name for name in ("uv.lock", ".python-version", "build") if (ROOT / name).exists()
    ]


def test_vercel_build_installs_the_requirements_and_ships_no_local_file(
    tmp_path: Path, python312_first: str
):
    vercel = npm_tool("vercel")
    uv = Path(sys.executable).parent / "uv"
    assert uv.exists(), f"{uv} is missing: make test installs it (the Python builder runs uv)"
    tools = tmp_path / "tools"
    tools.mkdir()
    (tools / "uv").symlink_to(uv)  # uv alone: the venv's python3 must not come first
    python3 = Path(python312_first.split(os.pathsep)[0]) / "python3"
    (tools / "python3.12").symlink_to(python3.resolve())
    before = _work_tree()

    staging = vercel_build.stage(tmp_path / "staging")
    (staging / ".vercel").mkdir()
    (staging / ".vercel" / "project.json").write_text(
        json.dumps({"projectId": "prj_test", "orgId": "team_test", "settings": {"framework": None}})
    )
    environment = {
        "PATH": f"{tools}{os.pathsep}{python312_first}",
        "HOME": str(tmp_path / "home"),
        "VERCEL_TELEMETRY_DISABLED": "1",
        "NO_UPDATE_NOTIFIER": "1",  # no version check against the npm registry
        # uv downloads the wheels from the package index, through this machine's CA bundle.
        **{k: v for k, v in os.environ.items() if k in ("SSL_CERT_FILE", "SSL_CERT_DIR")},
        **{k: v for k, v in os.environ.items() if k.lower().endswith("_proxy")},
    }
    result = vercel_build.build(staging, env=environment)
    log = result.stdout + result.stderr
    assert result.returncode == 0, log
    print(
        f"\n{vercel.name} build: "
        + " | ".join(re.findall(r"^(?:Using|Installing|Build).*", log, re.M))
    )

    assert "Installing required dependencies from requirements.txt" in log
    function = staging / ".vercel" / "output" / "functions" / "api" / "index.func"
    config = json.loads((function / ".vc-config.json").read_text())
    assert config["runtime"] == "python3.12"
    assert (
        config["maxDuration"]
        == json.loads((ROOT / "vercel.json").read_text())["functions"]["api/index.py"][
            "maxDuration"
        ]
    )
    files = list(config.get("filePathMap", {})) + [
        p.relative_to(function).as_posix() for p in function.rglob("*") if p.is_file()
    ]
    installed = {
        _distribution(path.split("/")[1].split("-")[0])
        for path in files
        if re.fullmatch(r"_vendor/[^/]+\.dist-info/METADATA", path)
    }
    required = {
        _distribution(line)
        for line in (ROOT / "requirements.txt").read_text().splitlines()
        if line.strip() and not line.startswith("#")
    }
    assert sorted(required - installed) == [], "requirements missing from the function"
    app = [path for path in files if not path.startswith("_vendor/")]
    assert "api/index.py" in app and "aircoach/app.py" in app and "prompt_docs/tools.json" in app
    assert [path for path in app if LOCAL.search(path)] == []
    print(f"function: {len(files)} files, {len(installed)} distributions; app files: {len(app)}")
    assert _work_tree() == before, "vercel build changed the work tree"
